// The release nearly every run executed alone ends with (completed, nothing else asked of
// it: no events, no wait, no timer) as ONE prepared, fenced UPDATE, instead of a call of
// release_runs (run-control.ts, migration 22). That call cost about twice the server CPU of
// the UPDATE (742 us against 394 to 414, medians on a loaded 2-core machine): a PL/pgSQL
// loop over a jsonb batch, each statement of it started anew, as single-step.ts found for
// appends.
//
// The UPDATE does what release_runs does for such a release, and nothing else:
// - Fencing: it updates the run only WHERE the epoch is the writer's and the status is
//   running (release_runs locks the row FOR NO KEY UPDATE and checks both; the UPDATE takes
//   the same lock). A claim that took the run over either committed first (the row is read
//   again as committed, the epoch differs, nothing is updated) or waits for this commit.
// - Completed: a cancel requested meanwhile does not turn it canceled (release_runs turns
//   only pending, waiting and paused), failed_calls are kept, the hold is cleared, the lease
//   ended, the "finished" hint published in the same statement (sent iff it commits). Its
//   now is read as the row is updated (after any wait for the row's lock), as release_runs
//   reads it after its lock.
// - No row updated (lease lost, the run not running, a retry after a commit whose answer
//   was lost): release_runs decides, in the same call (its may-have-committed rule).
//
// Prepared on the store's own pool only, as single-step.ts: a caller's pool keeps its
// sessions as they were, and goes to release_runs.

import { displayText } from "../../lib/text.js";
import { errorJson } from "../error-json.js";
import type { Release, ReleaseOutcome } from "../store.js";
import type { Tx } from "./connection.js";
import { RUN_COLUMNS_BUT_PAYLOADS, type RunRowButPayloads, toReleasedRun } from "./rows.js";
import { hintPayload, nowSql, type StoreContext } from "./sql.js";

/** Whether `r` is a release the UPDATE makes exactly as release_runs would. */
export function isLoneCompletion(r: Release): boolean {
  return (
    r.status === "completed" &&
    Number.isSafeInteger(r.epoch) &&
    r.readyAt === null &&
    r.wakeAt == null &&
    !r.waitingFor?.length &&
    r.pausedFor == null &&
    !r.events?.length &&
    !r.eventsIfCanceled?.length
  );
}

/** Completes the run if it is still the writer's and running: its outcome, or undefined
 *  when nothing was updated (release_runs must decide). */
export async function completeLone(
  tx: Tx,
  ctx: StoreContext,
  r: Release,
): Promise<ReleaseOutcome | undefined> {
  const res = await tx.query<RunRowButPayloads>(
    completeSql(ctx),
    [
      ctx.clockParam(),
      r.runId,
      r.epoch,
      // As releaseEntry (run-control.ts) sends them.
      r.reason == null ? null : displayText(r.reason),
      r.output ?? null,
      r.error == null ? null : errorJson(r.error),
      ctx.channel,
      hintPayload({ kind: "finished", runId: r.runId }),
    ],
    "cairn_complete_run",
  );
  const row = res.rows[0];
  // Its output is the one just written: not sent back (RUN_COLUMNS_BUT_PAYLOADS).
  return row === undefined ? undefined : { ok: true, run: toReleasedRun(row, r.output ?? null) };
}

const texts = new WeakMap<StoreContext["t"], string>();

function completeSql(ctx: StoreContext): string {
  const { t } = ctx;
  let sql = texts.get(t);
  if (sql === undefined) {
    sql = `WITH u AS (
        UPDATE ${t.runs} r SET status = 'completed', reason = $4::text, paused_for = NULL,
            output = $5::text, error = $6::text, ready_at = NULL, wake_at = NULL,
            waiting_for = '{}', crash_unjudged = false, held_by = NULL, held_until = NULL,
            lease_owner = NULL, lease_until = NULL, updated_at = ${nowSql(1)}
          WHERE r.id = $2::text AND r.epoch = $3::bigint AND r.status = 'running'
          RETURNING ${RUN_COLUMNS_BUT_PAYLOADS})
      SELECT u.*, pg_notify($7::text, $8::text) IS NULL AS notified FROM u`;
    texts.set(t, sql);
  }
  return sql;
}
