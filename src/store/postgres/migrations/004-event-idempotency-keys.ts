// 4: events may carry the sender's idempotency key, unique per run (a repeated send with
// the same key stores nothing).

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 4,
  statements: (t) => [
    `ALTER TABLE ${t.events} ADD COLUMN idempotency_key text`,
    `CREATE UNIQUE INDEX events_run_idempotency_key ON ${t.events} (run_id, idempotency_key)
      WHERE idempotency_key IS NOT NULL`,
  ],
};
