// 3: events may carry the sender's idempotency key, unique per run (a repeated send
// with the same key stores nothing).

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 3,
  sql: `
      ALTER TABLE events ADD COLUMN idempotency_key TEXT;
      CREATE UNIQUE INDEX events_run_idempotency_key ON events (run_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL;
    `,
};
