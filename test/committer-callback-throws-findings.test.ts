// a writeThen callback that threw was thrown again in a microtask, an uncaught exception
// that ends the process (every run of the worker with it). The Committer now contains it:
// the throw goes to its report (the engine's `log`, as its other unexpected errors do), the
// rest of the batch is answered, and nothing reaches the process.

import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Committer } from "../src/engine/committer.js";
import type { RunWrite, Store, WriteOutcome } from "../src/store/store.js";

const store = {
  appendRecords: (writes: RunWrite[]) =>
    Promise.resolve(writes.map(() => ({ ok: true }) as WriteOutcome)),
} as unknown as Store;

const write = (runId: string): RunWrite => ({ runId, epoch: 1, steps: [] });

let uncaught: unknown[] = [];
const onUncaught = (err: unknown) => uncaught.push(err);
const realMicrotask = globalThis.queueMicrotask;
beforeEach(() => {
  uncaught = [];
  process.on("uncaughtException", onUncaught);
  // What the Committer threw again in a microtask, caught here rather than by the runner.
  globalThis.queueMicrotask = (fn) =>
    realMicrotask(() => {
      try {
        fn();
      } catch (err) {
        uncaught.push(err);
      }
    });
});
afterEach(() => {
  process.off("uncaughtException", onUncaught);
  globalThis.queueMicrotask = realMicrotask;
});

const turns = async (n: number) => {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
};

describe("a writeThen callback that throws", () => {
  it("is reported to the Committer's report, and nothing is thrown into the process", async () => {
    const reported: unknown[] = [];
    const c = new Committer(store, (err) => reported.push(err));
    let answered = 0;
    c.writeThen(
      write("a"),
      () => {
        throw new Error("a's callback threw");
      },
      () => {},
    );
    c.writeThen(
      write("b"),
      () => answered++,
      () => {},
    );
    await c.drain();
    await turns(3);
    expect(answered).toBe(1);
    expect(reported.map((e) => (e as Error).message)).toEqual(["a's callback threw"]);
    expect(uncaught).toEqual([]);
  });

  it("a report that throws too is dropped, not thrown into the process", async () => {
    const c = new Committer(store, () => {
      throw new Error("the report threw");
    });
    c.writeThen(
      write("a"),
      () => {
        throw new Error("a's callback threw");
      },
      () => {},
    );
    await c.drain();
    await turns(3);
    expect(uncaught).toEqual([]);
    // And the Committer goes on.
    await expect(c.write(write("b"))).resolves.toBeUndefined();
  });
});
