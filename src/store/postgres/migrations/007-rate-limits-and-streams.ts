// 7: shared rate limits and run streams (cairn/ai). A limiter is a row (locked by each
// acquirer, so all workers share one window; blocked_until is a provider's 429) plus its
// grants of the last minute. A run's stream is its chunks by offset; the heads row is
// locked by each append, so offsets are handed out in commit order. Neither is part of
// the journal.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 7,
  statements: (t) => [
    `CREATE TABLE ${t.rateLimiters} (
      key text PRIMARY KEY,
      blocked_until bigint NOT NULL DEFAULT 0
    )`,
    `CREATE TABLE ${t.rateGrants} (
      key text NOT NULL REFERENCES ${t.rateLimiters} (key) ON DELETE CASCADE,
      grant_id text NOT NULL,
      at bigint NOT NULL,
      tokens bigint NOT NULL,
      PRIMARY KEY (key, grant_id)
    )`,
    `CREATE INDEX rate_grants_at ON ${t.rateGrants} (key, at)`,
    `CREATE TABLE ${t.runStreamHeads} (
      run_id text PRIMARY KEY REFERENCES ${t.runs} (id) ON DELETE CASCADE,
      next_offset bigint NOT NULL
    )`,
    `CREATE TABLE ${t.runStreams} (
      run_id text NOT NULL REFERENCES ${t.runs} (id) ON DELETE CASCADE,
      seq bigint NOT NULL,
      data text NOT NULL,
      created_at bigint NOT NULL,
      PRIMARY KEY (run_id, seq)
    )`,
  ],
};
