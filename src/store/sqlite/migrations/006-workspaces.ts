// 6: workspace checkpoints. Content-addressed objects (file contents and directory
// listings), stored once whoever holds them, and the runs that hold each one (deleteRun
// prunes the objects no run holds any more).

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 6,
  sql: `
      CREATE TABLE workspace_objects (
        hash       TEXT PRIMARY KEY,
        kind       TEXT NOT NULL,
        size       INTEGER NOT NULL,
        data       BLOB NOT NULL,
        created_at INTEGER NOT NULL
      );
      CREATE TABLE workspace_refs (
        run_id TEXT NOT NULL,
        hash   TEXT NOT NULL,
        PRIMARY KEY (run_id, hash)
      ) WITHOUT ROWID;
      -- deleteRun: is an object still held by any run?
      CREATE INDEX workspace_refs_hash ON workspace_refs (hash);
    `,
};
