// 14: a run released while a step body of it still runs in its worker (failed or paused
// past the body's abort grace, or suspended) is held from other workers until that worker's
// lease would have run out. Resumed by hand (or woken) at once, another worker claimed it
// and began the same call beside the body still running: one call executing twice at the
// same time. held_by: the releasing worker (it may claim the run: it keeps it unexecuted
// until the body ends); held_until: when other workers may claim it. Both cleared by the
// next claim or release.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 14,
  sql: `
      ALTER TABLE runs ADD COLUMN held_by TEXT;
      ALTER TABLE runs ADD COLUMN held_until INTEGER;
    `,
};
