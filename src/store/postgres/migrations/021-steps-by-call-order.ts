// 21: a run's completed calls in call order (readJournalPage: the dashboard and the HTTP API
// page a run's steps by seq). The primary key (run_id, key, generation) does not give that
// order, so each page sorted every step of the run.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 21,
  statements: (t) => [`CREATE INDEX steps_run_seq ON ${t.steps} (run_id, seq, key)`],
};
