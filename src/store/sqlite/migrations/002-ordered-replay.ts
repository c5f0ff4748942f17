// 2: ordered replay. A step record carries its place in the run's delivery order and in
// the call order, and a failed call's error is a step record too; resuming a run that
// such an error failed records the call again under a new generation. The unique key
// therefore becomes (run_id, key, generation): SQLite cannot alter a constraint, so the
// table is rebuilt, every existing record kept as generation 0.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 2,
  sql: `
      CREATE TABLE steps_v2 (
        run_id       TEXT NOT NULL,
        key          TEXT NOT NULL,
        generation   INTEGER NOT NULL,
        seq          INTEGER NOT NULL,
        name         TEXT NOT NULL,
        kind         TEXT NOT NULL,
        outcome      TEXT NOT NULL,
        result       TEXT,
        error        TEXT,
        spend        TEXT NOT NULL,
        attempt      INTEGER NOT NULL,
        started_at   INTEGER NOT NULL,
        completed_at INTEGER NOT NULL,
        delivery     INTEGER,
        issued_after INTEGER,
        issued_late  INTEGER NOT NULL,
        UNIQUE (run_id, key, generation)
      );
      INSERT INTO steps_v2 (run_id, key, generation, seq, name, kind, outcome, result, error,
          spend, attempt, started_at, completed_at, delivery, issued_after, issued_late)
        SELECT run_id, key, 0, seq, name, kind, outcome, result, error, spend, attempt,
            started_at, completed_at, NULL, NULL, 0
          FROM steps;
      DROP TABLE steps;
      ALTER TABLE steps_v2 RENAME TO steps;
      CREATE INDEX steps_run_seq ON steps (run_id, seq);
      ALTER TABLE runs ADD COLUMN failed_calls TEXT NOT NULL DEFAULT '[]';
    `,
};
