// 9: approvals. One row per approval call (run, key): the request, then the one answer.

import { featureTables } from "../feature-tables.js";
import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 9,
  statements: (t) => {
    const f = featureTables(t);
    return [
      `CREATE TABLE ${f.approvals} (
        seq bigint GENERATED ALWAYS AS IDENTITY,
        run_id text NOT NULL REFERENCES ${t.runs} (id) ON DELETE CASCADE,
        key text NOT NULL,
        name text NOT NULL,
        request text NOT NULL,
        requested_at bigint NOT NULL,
        deadline bigint,
        on_timeout text NOT NULL CHECK (on_timeout IN ('approve', 'reject')),
        status text NOT NULL CHECK (status IN ('pending', 'approved', 'rejected')),
        answered_at bigint,
        answered_by text,
        comment text,
        answer text,
        via text,
        token_id text,
        PRIMARY KEY (run_id, key)
      )`,
    ];
  },
};
