// 18: a run paused while the crash of its worker was still to charge remembers it. markUnserved
// pauses a running run whose lease expired (its worker died, no live worker has its version);
// claimed later by a worker that serves the version, it was taken for an ordinary run: the
// calls the crash cut were charged nothing, and a step that kills its worker ran more often
// than its maxAttempts. The next claim takes such a run as recovered, and clears the mark.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 18,
  statements: (t) => [
    `ALTER TABLE ${t.runs} ADD COLUMN crash_unjudged boolean NOT NULL DEFAULT false`,
  ],
};
