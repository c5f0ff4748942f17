// 8: workspace checkpoints. Content-addressed objects (file contents and directory
// listings), stored once whoever holds them, and the runs that hold each one (deleteRun
// prunes the objects no run holds any more). A ref's object must exist: the foreign key
// makes "refer to a stored object" and "delete an object nobody refers to" exclusive.

import { featureTables } from "../feature-tables.js";
import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 8,
  statements: (t) => {
    const f = featureTables(t);
    return [
      `CREATE TABLE ${f.workspaceObjects} (
        hash text PRIMARY KEY,
        kind text NOT NULL CHECK (kind IN ('blob', 'tree')),
        size bigint NOT NULL,
        data bytea NOT NULL,
        created_at bigint NOT NULL
      )`,
      `CREATE TABLE ${f.workspaceRefs} (
        run_id text NOT NULL REFERENCES ${t.runs} (id) ON DELETE CASCADE,
        hash text NOT NULL REFERENCES ${f.workspaceObjects} (hash),
        PRIMARY KEY (run_id, hash)
      )`,
      `CREATE INDEX workspace_refs_hash ON ${f.workspaceRefs} (hash)`,
    ];
  },
};
