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
    await closeAfterFailedOpen(internals);
    return;
  }
  await internals.retention?.stop();
  await internals.worker?.close(internals.config.closeGraceMs);
  await internals.committer.drain();
  internals.unsubscribe();
  internals.waiters.wakeAll();
  await internals.config.store.close();
}

/** Opening failed after the store opened (the worker could not register or sweep): stop
 *  what did start (the worker's heartbeat, the subscriptions) and close the store, which
 *  would otherwise stay open (on PostgreSQL its pool and LISTEN socket keep the process
 *  alive). Best effort: the store may be what failed, and close() reported nothing then
 *  either (the failure surfaced on the engine's first call). */
async function closeAfterFailedOpen(internals: EngineInternals): Promise<void> {
  const { config, worker } = internals;
  if (!internals.storeOpened()) return;
  await internals.retention?.stop();
  await worker
    ?.close(0)
    .catch((err) => config.log("close(): stopping a worker that failed to start", err));
  internals.unsubscribe();
  internals.waiters.wakeAll();
  await config.store
    .close()
    .catch((err) => config.log("close(): closing the store after a failed start", err));
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
