// 26: fewer index entries per run. Every UPDATE of a run that is not HOT (its status, its
// ready_at or its lease owner changes: the create, each lease renewal, the release) writes
// a new entry into every index of runs whose predicate the row meets. A run created claimed
// (the engine's own worker serves it) went into runs_lease_owner and runs_ready_at (a
// running run's ready_at is its lease end) at its create and again at each renewal, for
// queries that read neither so: removeWorker (and the claim's retry after a lost COMMIT)
// is as well served by runs_status_created (status = 'running', the runs some worker
// leases), and markUnserved reads the running runs by status too, the others by
// runs_ready_idle (ready runs that are not running). 9 -> 7 runs index entries per
// sequential 20-step run (pgstattuple), each renewal 6 -> 4. The claim keeps
// runs_claimable, which holds running runs: an ended lease is found by its ready_at.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 26,
  statements: (t) => [
    // An index lives in its table's schema: `"schema".runs` names it `"schema".<index>`.
    `DROP INDEX ${t.runs.slice(0, -"runs".length)}runs_lease_owner`,
    `DROP INDEX ${t.runs.slice(0, -"runs".length)}runs_ready_at`,
    `CREATE INDEX runs_ready_idle ON ${t.runs} (ready_at)
      WHERE ready_at IS NOT NULL AND status <> 'running'`,
  ],
};
