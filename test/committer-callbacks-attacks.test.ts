// Committer.writeThen answers a write by callbacks (this stop). Attacks: a batch the store
// refuses (a rejected promise, a synchronous throw), a batch of mixed outcomes, and
// callbacks that throw: every waiter is answered exactly once, with its own error, the
// next batch still flushes, and a callback's throw is reported, not lost or thrown into
// the batch's settling.

import { describe, expect, it } from "vitest";
import { Committer } from "../src/engine/committer.js";
import { LeaseLostError, WriteConflictError } from "../src/errors.js";
import type { RunWrite, Store } from "../src/store/store.js";

type Outcomes = Awaited<ReturnType<Store["appendRecords"]>>;

function fakeStore(answers: Array<(writes: RunWrite[]) => Promise<Outcomes>>) {
  const batches: string[][] = [];
  const store = {
    appendRecords(writes: RunWrite[]) {
      batches.push(writes.map((w) => w.runId));
      const next = answers.shift();
      if (!next) return Promise.resolve(writes.map(() => ({ ok: true }))) as Promise<Outcomes>;
      return next(writes);
    },
  } as unknown as Store;
  return { store, batches };
}

const write = (runId: string): RunWrite => ({ runId, epoch: 1, steps: [] });

/** Answers of writeThen, per write, in the order they came. */
function answers() {
  const got = new Map<string, string[]>();
  const note = (id: string, what: string) => got.set(id, [...(got.get(id) ?? []), what]);
  return { got, note };
}

describe("Committer.writeThen", () => {
  it("a batch the store rejects answers each waiter once with the error; the next batch flushes", async () => {
    const boom = new Error("disk gone");
    const { store, batches } = fakeStore([() => Promise.reject(boom)]);
    const c = new Committer(store);
    const { got, note } = answers();
    for (const id of ["a", "b", "c"]) {
      c.writeThen(
        write(id),
        () => note(id, "ok"),
        (e) => note(id, `failed:${e.message}`),
      );
    }
    await c.drain();
    expect([...got]).toEqual([
      ["a", ["failed:disk gone"]],
      ["b", ["failed:disk gone"]],
      ["c", ["failed:disk gone"]],
    ]);
    c.writeThen(
      write("d"),
      () => note("d", "ok"),
      () => note("d", "failed"),
    );
    await c.drain();
    expect(got.get("d")).toEqual(["ok"]);
    expect(batches).toEqual([["a", "b", "c"], ["d"]]);
  });

  it("a store that throws synchronously is answered as a rejection", async () => {
    const store = {
      appendRecords() {
        throw new Error("sync throw");
      },
    } as unknown as Store;
    const c = new Committer(store);
    const { got, note } = answers();
    c.writeThen(
      write("a"),
      () => note("a", "ok"),
      (e) => note("a", e.message),
    );
    await c.drain();
    expect(got.get("a")).toEqual(["sync throw"]);
  });

  it("mixed outcomes: each waiter gets its own, callbacks that throw stop none of the rest and are reported", async () => {
    const { store } = fakeStore([
      () =>
        Promise.resolve([
          { ok: true },
          { ok: false, reason: "lease-lost" },
          { ok: false, reason: "conflict", key: "k" },
          { ok: true },
        ] as Outcomes),
    ]);
    const reported: unknown[] = [];
    const c = new Committer(store, (err) => reported.push(err));
    const { got, note } = answers();
    c.writeThen(
      write("a"),
      () => {
        note("a", "ok");
        throw new Error("a's callback threw");
      },
      () => note("a", "failed"),
    );
    c.writeThen(
      write("b"),
      () => note("b", "ok"),
      (e) => {
        note("b", e instanceof LeaseLostError ? "lease-lost" : String(e));
        throw new Error("b's callback threw");
      },
    );
    c.writeThen(
      write("c"),
      () => note("c", "ok"),
      (e) => note("c", e instanceof WriteConflictError ? "conflict" : String(e)),
    );
    const p = c.write(write("d"));
    await p;
    await c.drain();
    await new Promise((r) => setImmediate(r));
    expect([...got]).toEqual([
      ["a", ["ok"]],
      ["b", ["lease-lost"]],
      ["c", ["conflict"]],
    ]);
    expect(reported.map((e) => (e as Error).message)).toEqual([
      "a's callback threw",
      "b's callback threw",
    ]);
  });
});
