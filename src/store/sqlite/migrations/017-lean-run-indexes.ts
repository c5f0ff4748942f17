// 17: fewer index pages in a run's commits. A run created claimed (the engine's own worker
// serves it) was written into runs_ready (its ready_at is its lease end) and
// runs_lease_owner at its create, again at each lease renewal, and out of both at its
// release: four index pages of its two run-level commits, for queries that never read them
// so (EXPLAIN QUERY PLAN: the claim and markUnserved searched runs_status_created;
// removeWorker is as well served by status = 'running', the runs some worker leases).
// runs_ready_idle holds only the ready runs that are not running, the claim's search for
// runs to take (leases.ts); running runs whose lease ended are found by status.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 17,
  sql: `
      DROP INDEX runs_ready;
      DROP INDEX runs_lease_owner;
      CREATE INDEX runs_ready_idle ON runs (ready_at)
        WHERE ready_at IS NOT NULL AND status <> 'running';
    `,
};
