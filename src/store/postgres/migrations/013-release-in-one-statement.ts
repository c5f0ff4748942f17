// 13: release_run, the release of a run as ONE autocommit statement. A release without
// events (every release but a child's, whose result goes to its parent) was a transaction
// of five round trips (BEGIN, lock, UPDATE, pg_notify, COMMIT): on a local server about
// as long as four journal appends, once per run, holding a pooled connection throughout.
// The function keeps the steps apart that must stay apart: it locks the run row in one
// statement and updates it in the next, so under READ COMMITTED the update's look for an
// unconsumed event (a release to "waiting") takes its snapshot after the lock and sees an
// event whose sender held the lock before us (run-control.ts explains why one statement
// would not).
//
// Arguments: the store's clock ($p of nowSql), the run and the epoch the caller holds,
// whether an earlier try may have committed (then a run found no longer running at that
// epoch was released by it), the release's fields as releaseRun computes them, the
// NOTIFY channel and the two hint payloads it may send (made by hintPayload in JS, so
// every hint has one format). Returns the run row as released (or as found, for a
// retried release that had committed); no row when the epoch is not the caller's.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 13,
  statements: (t) => [
    `CREATE FUNCTION ${t.releaseRun}(p_clock bigint, p_run_id text, p_epoch bigint,
        p_may_have_committed boolean, p_status text, p_reason text, p_paused_for text,
        p_output text, p_error text, p_ready_at bigint, p_wake_at bigint,
        p_waiting_for text[], p_failed_key text, p_channel text, p_finished_hint text,
        p_runnable_hint text)
      RETURNS SETOF ${t.runs}
      LANGUAGE plpgsql
      AS $fn$
      DECLARE
        cur ${t.runs};
        v_row ${t.runs};
        v_status text := p_status;
        v_reason text := p_reason;
        v_paused_for text := p_paused_for;
        v_ready_at bigint := p_ready_at;
        v_wake_at bigint := p_wake_at;
        v_waiting_for text[] := p_waiting_for;
        v_now bigint;
      BEGIN
        SELECT * INTO cur FROM ${t.runs} WHERE id = p_run_id FOR NO KEY UPDATE;
        IF NOT FOUND OR cur.epoch IS DISTINCT FROM p_epoch THEN
          RETURN;
        END IF;
        IF p_may_have_committed AND cur.status <> 'running' THEN
          RETURN NEXT cur;
          RETURN;
        END IF;
        IF cur.cancel_requested AND p_status IN ('pending', 'waiting', 'paused') THEN
          -- The owner stopped without honoring the cancel: it takes effect now.
          v_status := 'canceled';
          v_reason := cur.reason;
        ELSIF p_status = 'canceled' AND p_reason IS NULL THEN
          v_reason := cur.reason;
        END IF;
        IF v_status = 'canceled' AND p_status <> 'canceled' THEN
          v_paused_for := NULL;
          v_ready_at := NULL;
          v_wake_at := NULL;
          v_waiting_for := '{}';
        END IF;
        v_now := coalesce(p_clock, floor(extract(epoch from clock_timestamp()) * 1000)::bigint);
        UPDATE ${t.runs} r SET
            status = v_status, reason = v_reason, paused_for = v_paused_for,
            output = p_output, error = p_error,
            failed_calls = r.failed_calls || CASE
              WHEN v_status = 'failed' AND p_failed_key <> ''
              THEN jsonb_build_array(jsonb_build_object('key', p_failed_key,
                'generation', cur.generation))
              ELSE '[]'::jsonb END,
            ready_at = CASE
              WHEN v_status = 'waiting' AND EXISTS (SELECT 1 FROM ${t.events} e
                WHERE e.run_id = r.id AND e.consumed_by IS NULL AND e.name = ANY(v_waiting_for))
              THEN v_now ELSE v_ready_at END,
            wake_at = v_wake_at, waiting_for = v_waiting_for,
            lease_owner = NULL, lease_until = NULL, updated_at = v_now
          WHERE r.id = p_run_id
          RETURNING r.* INTO v_row;
        IF v_status IN ('completed', 'failed', 'canceled') THEN
          PERFORM pg_notify(p_channel, p_finished_hint);
        END IF;
        IF v_row.ready_at IS NOT NULL AND v_row.ready_at <= v_now THEN
          PERFORM pg_notify(p_channel, p_runnable_hint);
        END IF;
        RETURN NEXT v_row;
      END
      $fn$`,
  ],
};
