// 5: shared rate limits and run streams (cairn/ai). A limiter is a row that can be
// blocked (a provider's 429) plus its grants of the last minute; a run's stream is its
// chunks by offset. Neither is part of the journal: replay never reads them.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 5,
  sql: `
      CREATE TABLE rate_limiters (
        key           TEXT PRIMARY KEY,
        blocked_until INTEGER NOT NULL
      );
      CREATE TABLE rate_grants (
        key      TEXT NOT NULL,
        grant_id TEXT NOT NULL,
        at       INTEGER NOT NULL,
        tokens   INTEGER NOT NULL,
        PRIMARY KEY (key, grant_id)
      );
      CREATE INDEX rate_grants_at ON rate_grants (key, at);
      CREATE TABLE run_streams (
        run_id     TEXT NOT NULL,
        seq        INTEGER NOT NULL,
        data       TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (run_id, seq)
      );
    `,
};
