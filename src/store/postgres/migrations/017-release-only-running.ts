// 17: release_runs releases only a run still running. Migration 13 fenced a release by the
// run's epoch alone, so a second release under the same epoch (a hand-back arriving after
// the release that ended the run: close() past its grace, a hand-back after a store error
// whose release had in fact committed) rewrote a finished run: a completed run went back to
// pending and was executed again. SQLite always refused it (status must be 'running').
// The function is migration 16's text with one fence added after the may-have-committed
// check (a retry of a release that committed still finds its own release done).

import type { Tables } from "../sql.js";
import { migration as severalFailedCalls } from "./016-several-failed-calls.js";
import type { Migration } from "./index.js";

const MAY_HAVE_COMMITTED = `IF p_may_have_committed AND cur.status <> 'running' THEN
            RETURN NEXT cur;
            CONTINUE;
          END IF;`;

const ONLY_RUNNING = `${MAY_HAVE_COMMITTED}
          IF cur.status <> 'running' THEN
            v_row := NULL;
            v_row.id := v ->> 'run_id';
            RETURN NEXT v_row;
            CONTINUE;
          END IF;`;

function releaseRunsOnlyRunning(t: Tables): string {
  const [replaced] = severalFailedCalls.statements(t);
  if (
    !replaced?.startsWith("CREATE OR REPLACE FUNCTION") ||
    !replaced.includes(MAY_HAVE_COMMITTED)
  ) {
    throw new Error("migration 17: migration 16's release_runs is not the text it replaces");
  }
  return replaced.replace(MAY_HAVE_COMMITTED, ONLY_RUNNING);
}

export const migration: Migration = {
  version: 17,
  statements: (t) => [releaseRunsOnlyRunning(t)],
};
