import { afterEach, describe, expect, it, vi } from "vitest";
import { inDistinctRounds, isolatingFailures, TurnBatch } from "./turn-batch.js";

const ok = <O>(value: O): PromiseSettledResult<O> => ({ status: "fulfilled", value });

describe("TurnBatch", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("hands over what was asked for in one turn together, and answers each", async () => {
    const sent: number[][] = [];
    const batch = new TurnBatch<number, number>(async (items) => {
      sent.push(items);
      return items.map((i) =>
        i === 2 ? { status: "rejected", reason: new Error("two") } : ok(i * 10),
      );
    });
    const first = [1, 2, 3].map((i) => batch.ask(i));
    await expect(first[0]).resolves.toBe(10);
    await expect(first[1]).rejects.toThrow("two");
    await expect(first[2]).resolves.toBe(30);
    await expect(batch.ask(4)).resolves.toBe(40);
    expect(sent).toEqual([[1, 2, 3], [4]]);
  });

  it("a failure of the whole send is every item's; a wrong count of answers too", async () => {
    const failing = new TurnBatch<number, number>(async () => {
      throw new Error("down");
    });
    const asked = [failing.ask(1), failing.ask(2)];
    for (const a of asked) await expect(a).rejects.toThrow("down");
    const short = new TurnBatch<number, number>(async () => [ok(1)]);
    const both = [short.ask(1), short.ask(2)];
    for (const a of both) await expect(a).rejects.toThrow("a batch of 2 got 1 answers");
  });

  it("still sends under a test's fake timers (it keeps the real setImmediate)", async () => {
    vi.useFakeTimers();
    const batch = new TurnBatch<number, number>(async (items) => items.map(ok));
    const answer = batch.ask(7);
    vi.useRealTimers();
    await expect(answer).resolves.toBe(7);
  });

  it("drain() sends what is queued at once and waits for every answer", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const sent: number[][] = [];
    const batch = new TurnBatch<number, number>(async (items) => {
      sent.push(items);
      await gate;
      return items.map(ok);
    });
    const a = batch.ask(1);
    let drained = false;
    const d = batch.drain().then(() => {
      drained = true;
    });
    await new Promise((r) => setImmediate(r));
    expect(sent).toEqual([[1]]);
    expect(drained).toBe(false);
    release();
    await d;
    await expect(a).resolves.toBe(1);
  });
});

describe("inDistinctRounds", () => {
  it("puts a repeated key in a later round and answers in the order asked", async () => {
    const rounds: string[][] = [];
    const out = await inDistinctRounds(
      ["a", "b", "a", "c", "a"],
      (k) => k,
      async (round) => {
        rounds.push(round);
        return round.map((k) => ok(`${k}${rounds.length}`));
      },
    );
    expect(rounds).toEqual([["a", "b", "c"], ["a"], ["a"]]);
    expect(out.map((o) => (o.status === "fulfilled" ? o.value : "x"))).toEqual([
      "a1",
      "b1",
      "a2",
      "c1",
      "a3",
    ]);
  });
});

describe("isolatingFailures", () => {
  it("an error it may isolate sends each alone: only the item at fault fails", async () => {
    const calls: number[][] = [];
    const out = await isolatingFailures(
      [1, 2, 3],
      async (items) => {
        calls.push(items);
        if (items.includes(2)) throw new Error("refused");
        return items;
      },
      () => true,
    );
    expect(calls).toEqual([[1, 2, 3], [1], [2], [3]]);
    expect(out.map((o) => o.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
  });

  it("any other error is every item's, with no second try", async () => {
    let calls = 0;
    const out = await isolatingFailures(
      [1, 2],
      async () => {
        calls++;
        throw new Error("connection lost");
      },
      () => false,
    );
    expect(calls).toBe(1);
    expect(out.map((o) => o.status)).toEqual(["rejected", "rejected"]);
  });
});
