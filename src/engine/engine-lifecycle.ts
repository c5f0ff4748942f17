// The end of an engine's life, and its counters. close() refuses new calls at once, then
// stops in order: retention between batches, the worker (its executions drained and
// handed back within closeGraceMs), the records still queued, the store subscription and
// the result() waiters (which then throw EngineClosedError), and last the store.

import type { EngineMetrics } from "./engine.js";
import type { EngineInternals } from "./engine-internals.js";

export async function closeEngine(internals: EngineInternals): Promise<void> {
  if (internals.closed) return;
  internals.closed = true;
  try {
    await internals.opened;
  } catch {
    return;
  }
  await internals.retention?.stop();
  await internals.worker?.close(internals.config.closeGraceMs);
  await internals.committer.drain();
  internals.unsubscribe();
  internals.waiters.wakeAll();
  await internals.config.store.close();
}

export function engineMetrics(internals: EngineInternals): EngineMetrics {
  const { worker, committer } = internals;
  return {
    activeExecutions: worker?.active.size ?? 0,
    commitBatches: committer.stats.batches,
    commitWrites: committer.stats.writes,
    claimed: worker?.stats.claimed ?? 0,
  };
}
