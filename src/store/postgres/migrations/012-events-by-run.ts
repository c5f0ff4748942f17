// 12: every event of a run by run id (the existing index holds only unconsumed ones):
// deleting a run (retention) cascades to its events, and without it each deleted run
// scanned the whole events table.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 12,
  statements: (t) => [`CREATE INDEX events_run ON ${t.events} (run_id, seq)`],
};
