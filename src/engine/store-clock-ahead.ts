// How far the store's clock is from this host's, as one claim tells it: a run's timers and
// ctx.now() read the store's clock (the database's on PostgreSQL), by which the store
// decides when the run is due (worker.ts shifts the execution's clock by this much).

import type { RunRecord } from "../store/store.js";

/** How far the store's clock is ahead of this host's (negative: behind), as far as one claim
 *  can tell: the store stamped the lease (its now + leaseMs) at some moment between
 *  `askedAt` and `answeredAt` by this host's clock, so only a stamp outside that window is
 *  skew, counted from the window's nearer edge. 0 when the store reads this host's clock
 *  (SQLite, a virtual clock). */
export function storeClockAhead(
  run: Pick<RunRecord, "leaseUntil">,
  leaseMs: number,
  askedAt: number,
  answeredAt: number,
): number {
  if (run.leaseUntil === null) return 0;
  const storeNow = run.leaseUntil - leaseMs;
  if (storeNow < askedAt) return storeNow - askedAt;
  if (storeNow > answeredAt) return storeNow - answeredAt;
  return 0;
}
