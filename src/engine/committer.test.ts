// The Committer turns each write's outcome into its own promise: one write the store
// cannot hold fails alone, with an error naming its run and key.

import { describe, expect, it } from "vitest";
import { LeaseLostError, SerializationError, WriteConflictError } from "../errors.js";
import type { RunWrite, Store, WriteOutcome } from "../store/store.js";
import { Committer } from "./committer.js";

/** A store whose appendRecords answers with the outcomes given per run id. */
function storeAnswering(byRun: Record<string, WriteOutcome>): { store: Store; batches: number[] } {
  const batches: number[] = [];
  const store = {
    async appendRecords(writes: RunWrite[]): Promise<WriteOutcome[]> {
      batches.push(writes.length);
      return writes.map((w) => byRun[w.runId] ?? { ok: true });
    },
  } as unknown as Store;
  return { store, batches };
}

describe("Committer", () => {
  it("rejects only the unstorable write of a batch, with a SerializationError naming run and key", async () => {
    const { store, batches } = storeAnswering({
      bad: {
        ok: false,
        reason: "unstorable",
        key: "step\u0000",
        message: 'step "x": name contains a NUL character (U+0000)',
      },
      lost: { ok: false, reason: "lease-lost" },
      clash: { ok: false, reason: "conflict", key: "k" },
    });
    const c = new Committer(store);
    const [good, bad, lost, clash] = await Promise.allSettled(
      ["good", "bad", "lost", "clash"].map((runId) => c.write({ runId, epoch: 1 })),
    );
    expect(batches).toEqual([4]);
    expect(good?.status).toBe("fulfilled");
    const err = (bad as PromiseRejectedResult).reason as SerializationError;
    expect(err).toBeInstanceOf(SerializationError);
    expect(err.code).toBe("SERIALIZATION");
    expect(err.message).toContain('Run "bad"');
    expect(err.message).toContain('"step\\u0000"');
    expect(err.message).toContain("name contains a NUL character");
    expect((lost as PromiseRejectedResult).reason).toBeInstanceOf(LeaseLostError);
    expect((clash as PromiseRejectedResult).reason).toBeInstanceOf(WriteConflictError);
  });
});
