// The per-step JavaScript of an executed step (issue 13): the cuts of 2026-12-07, held in place.
// - promises made per executed step (each also costs the one async hook, call-scope.ts's and
//   late-work.ts's, and a microtask). A count, not a time: it holds on a loaded machine. A
//   step without a timeout settles its attempt in one promise (no async attempt awaiting an
//   async race), waits for the cascade it was made in without beforeExecute's async function
//   (when that is all it would wait for), and records without async record()/commit() around
//   the committer, which answers by callbacks.
// - the committer settles each batch in one reaction: a store that throws (synchronously or
//   not) rejects that batch's writes and the next batch still flushes.
// - resolvePolicy remembers delay strings it read, and still refuses unreadable ones.

import { describe, expect, it } from "vitest";
import { Committer } from "../src/engine/committer.js";
import { createEngine, sqliteStore } from "../src/index.js";
import type { RunWrite, Store, WriteOutcome } from "../src/store/store.js";
import { resolvePolicy } from "../src/workflow/retry.js";
import { promisesPerStep, stepLoop } from "./helpers/step-promises.js";

const loop = stepLoop("hot-path-loop");

describe("per-step promises", () => {
  it("an executed step makes at most 18 promises (36.6 at first, 29.7 before the step chain's cut, 15.9 after)", async () => {
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [loop] });
    try {
      const perStep = await promisesPerStep(engine, loop);
      expect(perStep).toBeGreaterThan(5); // the hook saw the steps at all
      expect(perStep).toBeLessThanOrEqual(18); // a promise of margin for background work
    } finally {
      await engine.close();
    }
  });
});

function write(runId: string): RunWrite {
  return { runId, epoch: 1 } as RunWrite;
}

describe("Committer batches", () => {
  for (const how of ["synchronously", "asynchronously"] as const) {
    it(`a store that throws ${how} rejects that batch; the next batch still flushes`, async () => {
      let calls = 0;
      const store = {
        appendRecords(writes: RunWrite[]): Promise<WriteOutcome[]> {
          calls++;
          if (calls === 1) {
            if (how === "synchronously") throw new Error("disk gone");
            return Promise.reject(new Error("disk gone"));
          }
          return Promise.resolve(writes.map(() => ({ ok: true }) as WriteOutcome));
        },
      } as unknown as Store;
      const c = new Committer(store);
      const first = [c.write(write("a")), c.write(write("b"))];
      for (const p of first) await expect(p).rejects.toThrow("disk gone");
      expect(c.writing("a")).toBe(false);
      await expect(c.write(write("a"))).resolves.toBeUndefined();
      await c.drain();
      expect(calls).toBe(2);
      expect(c.stats).toEqual({ batches: 2, writes: 3 });
    });
  }

  it("a write queued while a batch is written goes in the next batch, and drain waits for it", async () => {
    const sizes: number[] = [];
    let release: () => void = () => {};
    const store = {
      appendRecords(writes: RunWrite[]): Promise<WriteOutcome[]> {
        sizes.push(writes.length);
        return new Promise((resolve) => {
          release = () => resolve(writes.map(() => ({ ok: true }) as WriteOutcome));
        });
      },
    } as unknown as Store;
    const c = new Committer(store);
    const a = c.write(write("a"));
    await new Promise((r) => setImmediate(r));
    expect(sizes).toEqual([1]);
    const b = c.write(write("b"));
    const c2 = c.write(write("c"));
    expect(c.writing("a")).toBe(true);
    release();
    await a;
    for (let turn = 0; turn < 10 && sizes.length < 2; turn++) {
      await new Promise((r) => setImmediate(r));
    }
    expect(sizes).toEqual([1, 2]);
    const drained = c.drain();
    release();
    await Promise.all([b, c2, drained]);
    expect(c.writing("b")).toBe(false);
  });
});

describe("resolvePolicy's delays", () => {
  it("reads a delay string once, and still refuses an unreadable one after readable ones", () => {
    for (let i = 0; i < 3; i++) {
      expect(resolvePolicy([{ initialDelay: "2s", maxDelay: "3m" }]).initialDelay).toBe("2s");
    }
    expect(() => resolvePolicy([{ initialDelay: "2 fortnights" }], () => "Step x")).toThrow(
      /^Step x: retry\.initialDelay: cannot parse/,
    );
    expect(() => resolvePolicy([{ maxDelay: -1 }])).toThrow(/retry\.maxDelay/);
    expect(() => resolvePolicy([{ maxDelay: "1000000000d" }])).toThrow(/100,000 years/);
    // Refused each time, not only the first.
    expect(() => resolvePolicy([{ maxDelay: "1000000000d" }])).toThrow(/100,000 years/);
  });
});
