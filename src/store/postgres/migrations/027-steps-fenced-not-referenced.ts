// 27: steps lose their foreign key to runs. Its check ran on every step insert (an AFTER
// trigger queued per row and, at the statement's end, a read of the run's row through
// runs_pkey, FOR KEY SHARE, by SPI): a second read of a row every insert of a step has
// already read and locked. Each path that inserts steps holds the run's row first: the
// lone INSERT (single-step.ts) selects it FOR NO KEY UPDATE and inserts nothing without
// it, append_records locks it and answers "lease-lost" without it, and a fork inserts
// into the run it created in the same transaction. A run deleted meanwhile is either
// deleted after that insert commits (its lock waited) or leaves it nothing to insert into.
// What ON DELETE CASCADE did, the deletes of runs do (workspace.ts, deleteRunRows): they
// lock the runs first and delete their steps in a later statement, which sees every step
// committed before those locks were taken. Attempts, intents and the other tables keep
// their keys (written far less often than steps).

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 27,
  statements: (t) => [`ALTER TABLE ${t.steps} DROP CONSTRAINT steps_run_id_fkey`],
};
