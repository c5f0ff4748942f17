// The end of an engine's life, and its counters. close() refuses new calls at once, then
// stops in order: an open under way (waited for within a bound), retention between batches, the worker (its executions drained and
// handed back within closeGraceMs), the records still queued, the store subscription and
// the result() waiters (which then throw EngineClosedError), and last the store.

import { settlesWithin, waitAtMost } from "../lib/timers.js";
import type { EngineMetrics } from "./engine.js";
import type { EngineInternals } from "./engine-internals.js";

export function closeEngine(internals: EngineInternals): Promise<void> {
  // A second close() (concurrent, or later) settles when the first one has: never before
  // the store is closed.
  if (internals.closing !== undefined) return internals.closing;
  internals.closed = true;
  internals.closing = closeOnce(internals);
  return internals.closing;
}

async function closeOnce(internals: EngineInternals): Promise<void> {
  // No open is tried after this; one under way is waited for, but not on a store that does
  // not answer (a silent network holds PostgreSQL's open for a minute and more): past the
  // bound, what that open starts is closed once it settles, and close() does not wait.
  const stopped = internals.opening.stop();
  const bound = Math.max(internals.config.closeGraceMs, 2_000);
  if (!(await settlesWithin(stopped, bound))) {
    internals.config.log(
      "close(): the store is still opening (it does not answer); it is closed once that open ends",
    );
    internals.lateWork.push(
      stopped
        .then(() => closeStarted(internals))
        .catch((err: unknown) => internals.config.log("close(): closing after a late open", err)),
    );
    return;
  }
  await closeStarted(internals);
}

/** close() once no open is under way. */
async function closeStarted(internals: EngineInternals): Promise<void> {
  if (!internals.opening.isOpen()) {
    await closeAfterFailedOpen(internals);
    return;
  }
  // Retention stops between batches, but a batch under way may take long (or hang on the
  // store): the worker must stop claiming meanwhile, so both stop together.
  const retentionStopped = internals.retention?.stop();
  // gc() calls stop between batches too; the batch in flight is waited for below.
  internals.collections.stop.abort();
  // A store error of the worker's close() (removing its row) is close()'s, but only once the
  // rest is closed: stopping here left the store open (on PostgreSQL its pool and LISTEN
  // socket keep the process alive).
  const workerClosed = await settledAs(internals.worker?.close(internals.config.closeGraceMs));
  const handingBackLate = internals.worker?.afterClose();
  if (retentionStopped !== undefined) {
    const ended = await settlesWithin(retentionStopped, internals.config.closeGraceMs);
    if (!ended)
      internals.config.log(
        "close(): a retention batch is still running; closing the store under it",
      );
  }
  const collecting = [...internals.collections.running];
  if (
    collecting.length > 0 &&
    !(await settlesWithin(Promise.all(collecting), internals.config.closeGraceMs))
  ) {
    internals.config.log("close(): a gc() batch is still running; closing the store under it");
  }
  // The worker's close() has drained the records (or given up on a store that hangs, and
  // said so): waiting for them again would only add its bound to a close() in a partition.
  if (
    !internals.worker &&
    !(await settlesWithin(
      internals.committer.drain(),
      Math.max(internals.config.closeGraceMs, 2_000),
    ))
  ) {
    internals.config.log("close(): queued records not written in time; the store hangs");
  }
  internals.opening.unsubscribe();
  internals.waiters.wakeAll();
  if (handingBackLate !== undefined) {
    // A claim or a create still unanswered when the worker's bound ended: the runs it
    // leases are handed back as it answers, which needs the store, so the store closes
    // after that, and close() does not wait (as for an open that outlasts its bound). But
    // at most one lease: on a store that never answers, the store (a PostgreSQL pool and
    // its LISTEN socket) would stay open for ever; a run whose hand-back never lands is
    // taken over once its lease ends, as a crashed worker's is.
    const { leaseMs, log } = internals.config;
    internals.lateWork.push(
      settlesWithin(handingBackLate, leaseMs)
        .then((answered) => {
          if (!answered) {
            log(
              `close(): a claim or a create is still unanswered ${leaseMs} ms (leaseMs) after close(); closing the store under it (the runs it leases are taken over once their leases end)`,
            );
          }
          return closeStoreWithin(internals);
        })
        .catch((err: unknown) => log("close(): closing after late hand-backs", err)),
    );
  } else {
    await closeStoreWithin(internals);
  }
  if (!workerClosed.ok) throw workerClosed.error;
}

/** Closes the store, but waits for it no longer than the grace (at least
 *  STORE_CLOSE_MIN_MS, engine-config.ts; storeCloseMinMs in cairn's tests): a store whose close() never answers (one that died under the
 *  engine, a custom store on a silent network) held close() for ever. Past the bound its
 *  close goes on unwaited (lateWork, which `cairn worker` waits for) and its error is
 *  logged; within it, its error is close()'s. */
async function closeStoreWithin(internals: EngineInternals): Promise<void> {
  const { closeGraceMs, storeCloseMinMs, log, store } = internals.config;
  // Promise.resolve: a custom store's close() written without async may return nothing.
  const closed = Promise.resolve(store.close());
  const bound = Math.max(closeGraceMs, storeCloseMinMs);
  if (await settlesWithin(closed, bound)) return closed;
  log(`close(): the store did not close within ${bound} ms; not waiting for it any longer`);
  internals.lateWork.push(
    closed.catch((err: unknown) => log("close(): closing the store after close() ended", err)),
  );
}

/** How `p` settled, without throwing. */
async function settledAs(
  p: Promise<void> | undefined,
): Promise<{ ok: true } | { ok: false; error: unknown }> {
  try {
    await p;
    return { ok: true };
  } catch (error) {
    return { ok: false, error };
  }
}

/** Opening failed, or had not succeeded when close() was called. If the store did open (the
 *  worker could not register or sweep): stop
 *  what did start (the worker's heartbeat, the subscriptions) and close the store, which
 *  would otherwise stay open (on PostgreSQL its pool and LISTEN socket keep the process
 *  alive). Best effort: the store may be what failed, and close() reported nothing then
 *  either (the failure surfaced on the engine's first call). */
async function closeAfterFailedOpen(internals: EngineInternals): Promise<void> {
  const { config, worker } = internals;
  if (!internals.opening.storeOpened()) return;
  const retentionStopped = internals.retention?.stop();
  if (retentionStopped !== undefined) await waitAtMost(retentionStopped, config.closeGraceMs);
  await worker
    ?.close(0)
    .catch((err) => config.log("close(): stopping a worker that failed to start", err));
  internals.opening.unsubscribe();
  internals.waiters.wakeAll();
  await closeStoreWithin(internals).catch((err) =>
    config.log("close(): closing the store after a failed start", err),
  );
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
