// The runs a store leases to one worker, for a worker that may hold leases it never heard
// of: a claim that committed on PostgreSQL while its answer was lost (and every retry
// failed) leased runs to it, and claimRuns never hands a worker its own runs again.

import type { Store } from "../store/store.js";
import { runCursorWalk } from "./run-cursor.js";

const PAGE = 500;

/** The running runs leased to `workerId`, by id, with the epoch of their lease. */
export async function runsLeasedTo(store: Store, workerId: string): Promise<Map<string, number>> {
  const leased = new Map<string, number>();
  const cursor = runCursorWalk(`the runs leased to worker ${JSON.stringify(workerId)}`);
  for (;;) {
    const before = cursor.before;
    const page = await store.listRuns({
      status: "running",
      limit: PAGE,
      ...(before && { before }),
    });
    for (const run of page) if (run.leaseOwner === workerId) leased.set(run.id, run.epoch);
    const last = page.at(-1);
    if (page.length < PAGE || last === undefined) return leased;
    cursor.advance(last);
  }
}
