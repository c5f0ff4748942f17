// 18: a run paused while the crash of its worker was still to charge remembers it. markUnserved
// pauses a running run whose lease expired (its worker died, no live worker has its version),
// and a worker pauses a run it took over from a crashed worker when it meets a payload it
// cannot read before its replay charged that crash; resumed or claimed later, such a run was
// taken for an ordinary one: the calls the crash cut were charged nothing, and a step that
// kills its worker ran more often than its maxAttempts. The next claim takes a marked run as
// recovered, and clears the mark. release_runs is migration 17's text with the mark set from
// the release ('crash_unjudged', for a paused run; absent from an older worker: cleared).

import type { Tables } from "../sql.js";
import { migration as releaseOnlyRunning } from "./017-release-only-running.js";
import type { Migration } from "./index.js";

const UNMARKED = "lease_owner = NULL, lease_until = NULL, updated_at = v_now";

const MARKED = `crash_unjudged = (v_status = 'paused'
                AND coalesce((v ->> 'crash_unjudged')::boolean, false)),
              ${UNMARKED}`;

function releaseRunsMarking(t: Tables): string {
  const [replaced] = releaseOnlyRunning.statements(t);
  if (
    !replaced?.startsWith("CREATE OR REPLACE FUNCTION") ||
    replaced.split(UNMARKED).length !== 2
  ) {
    throw new Error("migration 18: migration 17's release_runs is not the text it replaces");
  }
  return replaced.replace(UNMARKED, MARKED);
}

export const migration: Migration = {
  version: 18,
  statements: (t) => [
    `ALTER TABLE ${t.runs} ADD COLUMN crash_unjudged boolean NOT NULL DEFAULT false`,
    releaseRunsMarking(t),
  ],
};
