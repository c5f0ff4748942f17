// 12: a run paused while the crash of its worker was still to charge remembers it. markUnserved
// pauses a running run whose lease expired (its worker died, no live worker has its version);
// claimed later by a worker that serves the version, it was taken for an ordinary run: the
// calls the crash cut were charged nothing, and a step that kills its worker ran more often
// than its maxAttempts. The next claim takes such a run as recovered, and clears the mark.
// And what each claim found (claimed_from, as on PostgreSQL): a worker that never heard its
// claim's answer asks whether it took the run from a crashed worker (expireLease).

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 12,
  sql: `
      ALTER TABLE runs ADD COLUMN crash_unjudged INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE runs ADD COLUMN claimed_from TEXT;
    `,
};
