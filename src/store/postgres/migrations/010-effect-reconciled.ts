// 10: an effect's record says whether reconcile found its value (true) or perform made it
// (false); NULL for other calls and for records from before. append_records is migration
// 3's with the column added to its insert of steps (a record differing only in it is not
// a conflict: one execution writes one value).

import { appendRecordsSql } from "./append-records.js";
import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 10,
  statements: (t) => [
    `ALTER TABLE ${t.steps} ADD COLUMN reconciled boolean`,
    appendRecordsSql(t, 10),
  ],
};
