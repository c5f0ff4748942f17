// 22: a run released while a step body of it still runs in its worker (failed or paused
// past the body's abort grace, or suspended) is held from other workers until that worker's
// lease would have run out. Resumed by hand (or woken) at once, another worker claimed it
// and began the same call beside the body still running: one call executing twice at the
// same time. held_by: the releasing worker (it may claim the run: it keeps it unexecuted
// until the body ends); held_until: when other workers may claim it. Both cleared by the
// next claim or release. release_runs is migration 18's text with the hold set from the
// release ('held_by', 'held_ms'; absent from an older worker: no hold), never for a run
// that ends completed or canceled.

import type { Tables } from "../sql.js";
import { migration as crashUnjudged } from "./018-crash-unjudged.js";
import type { Migration } from "./index.js";

const UNHELD = "lease_owner = NULL, lease_until = NULL, updated_at = v_now";

const HELD = `held_by = CASE WHEN v_status IN ('completed', 'canceled') THEN NULL
                ELSE v ->> 'held_by' END,
              held_until = CASE WHEN v_status IN ('completed', 'canceled')
                  OR v ->> 'held_by' IS NULL THEN NULL
                ELSE v_now + (v ->> 'held_ms')::bigint END,
              ${UNHELD}`;

function releaseRunsHolding(t: Tables): string {
  const [replaced] = crashUnjudged.statements(t).slice(1);
  if (!replaced?.startsWith("CREATE OR REPLACE FUNCTION") || replaced.split(UNHELD).length !== 2) {
    throw new Error("migration 22: migration 18's release_runs is not the text it replaces");
  }
  return replaced.replace(UNHELD, HELD);
}

export const migration: Migration = {
  version: 22,
  statements: (t) => [
    `ALTER TABLE ${t.runs} ADD COLUMN held_by text, ADD COLUMN held_until bigint`,
    releaseRunsHolding(t),
  ],
};
