// 13: release_runs, the releases of runs as ONE autocommit statement. A release without
// events (every release but a child's, whose result goes to its parent) was a transaction
// of five round trips (BEGIN, lock, UPDATE, pg_notify, COMMIT), and a transaction that
// NOTIFYs takes PostgreSQL's one notify lock at commit: 32 runs ending together committed
// one after another, each with its own flush. The releases a store is asked for in one turn
// of the event loop now travel together (grouped-releases.ts): one round trip, one commit.
//
// For each release, in run id order (two groups that share runs, say a zombie's stale
// release beside the new owner's, lock them in one order and never deadlock), the function
// locks the run row in one statement and decides and updates in the next, so under READ
// COMMITTED the update's look for an unconsumed event (a release to "waiting") takes its
// snapshot after the lock and sees an event whose sender held the lock before us
// (run-control.ts explains why one statement would not).
//
// p_releases: [{ run_id, epoch, status, reason, paused_for, output, error, ready_at,
// wake_at, waiting_for, failed_key, finished_hint, runnable_hint }], the fields as
// releaseRun computes them and the two hint payloads it may send (made by hintPayload in
// JS, so every hint has one format). p_may_have_committed: an earlier try of this very
// group may have committed; a run found no longer running at its epoch was released by it.
// Returns one row per release: the run as released (or as found, for a retried release
// that had committed), or a row with only the id (status NULL) when the epoch is not the
// caller's.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 13,
  statements: (t) => [
    `CREATE FUNCTION ${t.releaseRuns}(p_clock bigint, p_releases jsonb,
        p_may_have_committed boolean, p_channel text)
      RETURNS SETOF ${t.runs}
      LANGUAGE plpgsql
      AS $fn$
      DECLARE
        v jsonb;
        cur ${t.runs};
        v_row ${t.runs};
        v_status text;
        v_reason text;
        v_paused_for text;
        v_ready_at bigint;
        v_wake_at bigint;
        v_waiting_for text[];
        v_failed_key text;
        v_now bigint;
      BEGIN
        FOR v IN
          SELECT e.value FROM jsonb_array_elements(p_releases) AS e(value)
            ORDER BY e.value ->> 'run_id' COLLATE "C"
        LOOP
          SELECT * INTO cur FROM ${t.runs} WHERE id = v ->> 'run_id' FOR NO KEY UPDATE;
          IF NOT FOUND OR cur.epoch::numeric IS DISTINCT FROM (v ->> 'epoch')::numeric THEN
            v_row := NULL;
            v_row.id := v ->> 'run_id';
            RETURN NEXT v_row;
            CONTINUE;
          END IF;
          IF p_may_have_committed AND cur.status <> 'running' THEN
            RETURN NEXT cur;
            CONTINUE;
          END IF;
          v_status := v ->> 'status';
          v_reason := v ->> 'reason';
          v_failed_key := v ->> 'failed_key';
          IF cur.cancel_requested AND v_status IN ('pending', 'waiting', 'paused') THEN
            -- The owner stopped without honoring the cancel: it takes effect now, and the
            -- wait's fields are dropped unread (a timer too far off to store cannot fail it).
            v_status := 'canceled';
            v_reason := cur.reason;
            v_paused_for := NULL;
            v_ready_at := NULL;
            v_wake_at := NULL;
            v_waiting_for := '{}';
          ELSE
            IF v_status = 'canceled' AND v_reason IS NULL THEN
              v_reason := cur.reason;
            END IF;
            v_paused_for := v ->> 'paused_for';
            v_ready_at := (v ->> 'ready_at')::bigint;
            v_wake_at := (v ->> 'wake_at')::bigint;
            v_waiting_for := ARRAY(SELECT jsonb_array_elements_text(v -> 'waiting_for'));
          END IF;
          v_now := coalesce(p_clock,
            floor(extract(epoch from clock_timestamp()) * 1000)::bigint);
          UPDATE ${t.runs} r SET
              status = v_status, reason = v_reason, paused_for = v_paused_for,
              output = v ->> 'output', error = v ->> 'error',
              failed_calls = r.failed_calls || CASE
                WHEN v_status = 'failed' AND v_failed_key <> ''
                THEN jsonb_build_array(jsonb_build_object('key', v_failed_key,
                  'generation', cur.generation))
                ELSE '[]'::jsonb END,
              ready_at = CASE
                WHEN v_status = 'waiting' AND EXISTS (SELECT 1 FROM ${t.events} e
                  WHERE e.run_id = r.id AND e.consumed_by IS NULL
                    AND e.name = ANY(v_waiting_for))
                THEN v_now ELSE v_ready_at END,
              wake_at = v_wake_at, waiting_for = v_waiting_for,
              lease_owner = NULL, lease_until = NULL, updated_at = v_now
            WHERE r.id = cur.id
            RETURNING r.* INTO v_row;
          IF v_status IN ('completed', 'failed', 'canceled') THEN
            PERFORM pg_notify(p_channel, v ->> 'finished_hint');
          END IF;
          IF v_row.ready_at IS NOT NULL AND v_row.ready_at <= v_now THEN
            PERFORM pg_notify(p_channel, v ->> 'runnable_hint');
          END IF;
          RETURN NEXT v_row;
        END LOOP;
      END
      $fn$`,
  ],
};
