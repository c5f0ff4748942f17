// 7: approvals. One row per approval call (run, key): the request, then the one answer.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 7,
  sql: `
      CREATE TABLE approvals (
        id           INTEGER PRIMARY KEY,
        run_id       TEXT NOT NULL,
        key          TEXT NOT NULL,
        name         TEXT NOT NULL,
        request      TEXT NOT NULL,
        requested_at INTEGER NOT NULL,
        deadline     INTEGER,
        on_timeout   TEXT NOT NULL,
        status       TEXT NOT NULL,
        answered_at  INTEGER,
        answered_by  TEXT,
        comment      TEXT,
        answer       TEXT,
        via          TEXT,
        token_id     TEXT,
        UNIQUE (run_id, key)
      );
    `,
};
