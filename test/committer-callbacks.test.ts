// The Committer's scheduled flush and its batch's two reactions are functions made once
// (issue 13): a run executing alone flushes once a step, and the setImmediate callback, the
// two callbacks of the batch's reaction and the closure settling each write were four
// functions made every step. The batch a reaction settles is the one being written (one at
// a time), its writes answered in order, by their outcomes, as before.

import { describe, expect, it } from "vitest";
import { Committer } from "../src/engine/committer.js";
import type { RunWrite, Store, WriteOutcome } from "../src/store/store.js";

function write(runId: string): RunWrite {
  return { runId, epoch: 1 } as RunWrite;
}

describe("the Committer's callbacks", () => {
  it("hands setImmediate and each batch's reaction the same functions every flush", async () => {
    const reactions: unknown[][] = [];
    const store = {
      appendRecords(writes: RunWrite[]) {
        const outcomes = writes.map((w) =>
          w.runId === "lost"
            ? ({ ok: false, reason: "lease-lost" } as WriteOutcome)
            : ({ ok: true } as WriteOutcome),
        );
        const p = Promise.resolve(outcomes);
        return {
          // biome-ignore lint/suspicious/noThenProperty: a promise that tells its reactions
          then(a: unknown, b: unknown) {
            reactions.push([a, b]);
            return p.then(a as never, b as never);
          },
        } as unknown as Promise<WriteOutcome[]>;
      },
    } as unknown as Store;
    const immediates: unknown[] = [];
    const real = globalThis.setImmediate;
    globalThis.setImmediate = ((fn: () => void) => {
      immediates.push(fn);
      return real(fn);
    }) as typeof setImmediate;
    const c = new Committer(store);
    const answers: string[] = [];
    try {
      for (const batch of [["a", "lost"], ["b"], ["c"]]) {
        await Promise.all(
          batch.map(
            (id) =>
              new Promise<void>((resolve) =>
                c.writeThen(
                  write(id),
                  () => {
                    answers.push(`${id} written`);
                    resolve();
                  },
                  (err) => {
                    answers.push(`${id} ${err.name}`);
                    resolve();
                  },
                ),
              ),
          ),
        );
      }
    } finally {
      globalThis.setImmediate = real;
    }
    expect(answers).toEqual(["a written", "lost LeaseLostError", "b written", "c written"]);
    expect(immediates.length).toBe(3);
    expect(new Set(immediates).size).toBe(1);
    expect(reactions.length).toBe(3);
    expect(new Set(reactions.map((r) => r[0])).size).toBe(1);
    expect(new Set(reactions.map((r) => r[1])).size).toBe(1);
    expect(c.stats).toEqual({ batches: 3, writes: 4 });
  });
});
