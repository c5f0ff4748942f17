// 3: ordered replay. A step record carries its place in the run's delivery order and in
// the call order, and a failed call's error is a step record too; resuming a run that
// such an error failed records that call again under the new generation, so the key
// becomes (run_id, key, generation). Existing records are generation 0. append_records
// is replaced to carry and compare the new columns.

import { appendRecordsSql } from "./append-records.js";
import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 3,
  statements: (t) => [
    `ALTER TABLE ${t.steps}
      ADD COLUMN generation integer NOT NULL DEFAULT 0,
      ADD COLUMN delivery integer,
      ADD COLUMN issued_after integer,
      ADD COLUMN issued_late boolean NOT NULL DEFAULT false`,
    `ALTER TABLE ${t.steps} DROP CONSTRAINT steps_pkey, ADD PRIMARY KEY (run_id, key, generation)`,
    `ALTER TABLE ${t.runs} ADD COLUMN failed_calls jsonb NOT NULL DEFAULT '[]'`,
    appendRecordsSql(t, 3),
  ],
};
