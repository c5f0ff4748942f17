// Records and runs for tests that drive a store's verbs directly (no engine): a step record
// of a run at a key, and a run created claimed by worker "w1".

import type { StepRecord, Store } from "../../src/store/store.js";

/** A completed step record of `runId` at `key`, call position `seq`, with `over` applied. */
export function stepOf(
  runId: string,
  key: string,
  seq: number,
  over: Partial<StepRecord> = {},
): StepRecord {
  return {
    runId,
    key,
    generation: 0,
    seq,
    name: `name-${key}`,
    kind: "step",
    outcome: "ok",
    result: `"result-${key}"`,
    error: null,
    spend: {},
    attempt: 1,
    startedAt: 1_700_000_000_000 + seq,
    completedAt: 1_700_000_000_001 + seq,
    delivery: seq,
    issuedAfter: seq,
    issuedLate: false,
    ...over,
  };
}

/** Run `id` of workflow alpha@1, created claimed by worker "w1" for a minute. */
export async function claimedRun(store: Store, id: string) {
  const { run } = await store.createRun({
    id,
    workflow: "alpha",
    version: "1",
    input: "{}",
    budgetLimit: {},
    claimBy: { workerId: "w1", leaseMs: 60_000 },
  });
  return run;
}
