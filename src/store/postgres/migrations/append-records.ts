// The text of append_records, the PL/pgSQL function behind appendRecords (journal-writes.ts
// explains the semantics it keeps), as the migrations that create it wrote it: 2 made it,
// 3 replaced it to carry step generations and their place in the delivery order, 5 created
// 3's again unchanged, 10 added the reconciled flag to its insert of steps, 14 inserts a
// write of steps alone first (stepsOnlyInsertedFirst). Split into its
// parts so those versions share what they share; the text each migration runs is frozen
// (migrations.test.ts pins it): a change to the function is a new migration with a new
// variant here, never an edit of a part an applied migration uses.
//
// What it does: p_writes is [{ run_id, epoch, steps?, attempts?, intents?, consume? }],
// records in their tables' column names (consume as events rows: seq, consumed_by), already
// normalized; p_clock is the nowSql parameter. It returns one outcome per write, in order.
// Each write: lock the run row and check the epoch; then find the first record that
// differs from the row already under its key (or, with none there, from the first record
// of its key in this write), and the first event it cannot consume; only when there is
// none, insert (ON CONFLICT DO NOTHING), consume, and add the spend of the rows actually
// inserted. Every statement after the lock takes a new snapshot and the lock keeps other
// writers of the run out, so what the checks saw is what the writes meet: a write that
// fails lands nothing, without a subtransaction.

import type { Tables } from "../sql.js";

/** The migration whose append_records to write. */
export type AppendRecordsVersion = 2 | 3 | 10 | 14;

export function appendRecordsSql(t: Tables, version: AppendRecordsVersion): string {
  const create = version === 2 ? "CREATE FUNCTION" : "CREATE OR REPLACE FUNCTION";
  const stepsFirst = version === 14;
  return (
    head(t, create, stepsFirst) +
    (stepsFirst ? stepsOnlyInsertedFirst(t) : "") +
    (version === 2 ? stepsCheckByKey(t) : stepsCheckByGeneration(t)) +
    otherChecks(t) +
    (version === 2 ? insertStepsByKey(t) : insertStepsByGeneration(t, version >= 10)) +
    insertOthers(t)
  );
}

/** Declarations, the loop over the writes, and each write's lock and epoch check
 *  (`stepsFirst`: with the variables of stepsOnlyInsertedFirst). */
function head(t: Tables, create: string, stepsFirst: boolean): string {
  const more = stepsFirst
    ? `
        v_key text;
        v_generation integer;
        v_inserted_keys text[];
        v_inserted_generations integer[];`
    : "";
  return `${create} ${t.appendRecords}(p_writes jsonb, p_clock bigint) RETURNS jsonb
      LANGUAGE plpgsql
      AS $fn$
      DECLARE${more}
        v_write jsonb;
        v_run_id text;
        v_epoch bigint;
        v_budget_spent jsonb;
        v_conflict text;
        v_spend jsonb;
        v_spent jsonb;
        v_outcomes jsonb[] := '{}';
      BEGIN
        FOR v_write IN
          SELECT w.value FROM jsonb_array_elements(p_writes) WITH ORDINALITY AS w(value, ord)
            ORDER BY w.ord
        LOOP
          v_run_id := v_write ->> 'run_id';
          -- FOR NO KEY UPDATE: conflicts with a claim, a release and other writers of this
          -- run, not with the FOR KEY SHARE of the inserts' foreign-key checks.
          SELECT r.epoch, r.budget_spent INTO v_epoch, v_budget_spent
            FROM ${t.runs} r WHERE r.id = v_run_id FOR NO KEY UPDATE;
          IF NOT FOUND OR v_epoch::numeric IS DISTINCT FROM (v_write ->> 'epoch')::numeric THEN
            v_outcomes := array_append(v_outcomes, '{"ok": false, "reason": "lease-lost"}'::jsonb);
            CONTINUE;
          END IF;

          v_conflict := NULL;
`;
}

/** Migration 14's way for a write of steps alone (nearly every write: a step's result):
 *  insert first, and compare only when some record found its key taken. Every record is
 *  then compared with the row under its key, which is either an earlier write's or the
 *  first record of that key in this write (inserted just now): the same comparisons, in
 *  the same order, as the checks below make before inserting. A conflict deletes the rows
 *  this write inserted, so it lands nothing, as before. */
function stepsOnlyInsertedFirst(t: Tables): string {
  return `          IF NOT (v_write ? 'attempts' OR v_write ? 'intents' OR v_write ? 'consume') THEN
            v_spent := '{}';
            v_inserted_keys := '{}';
            v_inserted_generations := '{}';
            IF v_write ? 'steps' THEN
              FOR v_key, v_generation, v_spend IN
                INSERT INTO ${t.steps} (run_id, key, generation, seq, name, kind, outcome,
                    result, error, spend, attempt, started_at, completed_at, delivery,
                    issued_after, issued_late, reconciled)
                  SELECT v_run_id, x.key, x.generation, x.seq, x.name, x.kind, x.outcome,
                      x.result, x.error, x.spend, x.attempt, x.started_at, x.completed_at,
                      x.delivery, x.issued_after, x.issued_late, x.reconciled
                    FROM jsonb_populate_recordset(NULL::${t.steps}, v_write -> 'steps') AS x
                  ON CONFLICT (run_id, key, generation) DO NOTHING
                  RETURNING key, generation, spend
              LOOP
                v_inserted_keys := v_inserted_keys || v_key;
                v_inserted_generations := v_inserted_generations || v_generation;
                IF v_spend <> '{}'::jsonb THEN v_spent := ${t.addAmounts}(v_spent, v_spend); END IF;
              END LOOP;
              IF cardinality(v_inserted_keys) < jsonb_array_length(v_write -> 'steps') THEN
                SELECT x.key INTO v_conflict
                  FROM jsonb_populate_recordset(NULL::${t.steps}, v_write -> 'steps')
                      WITH ORDINALITY AS x
                    JOIN ${t.steps} s ON s.run_id = v_run_id AND s.key = x.key
                      AND s.generation = x.generation
                  WHERE (x.seq, x.name, x.kind, x.outcome, x.result, x.error, x.spend,
                      x.attempt, x.started_at, x.completed_at, x.delivery, x.issued_after,
                      x.issued_late)
                    IS DISTINCT FROM (s.seq, s.name, s.kind, s.outcome, s.result, s.error,
                      s.spend, s.attempt, s.started_at, s.completed_at, s.delivery,
                      s.issued_after, s.issued_late)
                  ORDER BY x.ordinality LIMIT 1;
                IF v_conflict IS NOT NULL THEN
                  DELETE FROM ${t.steps} s
                    USING unnest(v_inserted_keys, v_inserted_generations) AS i(key, generation)
                    WHERE s.run_id = v_run_id AND s.key = i.key AND s.generation = i.generation;
                  v_outcomes := array_append(v_outcomes,
                    jsonb_build_object('ok', false, 'reason', 'conflict', 'key', v_conflict));
                  CONTINUE;
                END IF;
              END IF;
            END IF;
            IF v_spent <> '{}'::jsonb THEN
              UPDATE ${t.runs} SET budget_spent = ${t.addAmounts}(v_budget_spent, v_spent),
                  updated_at = coalesce(p_clock,
                    floor(extract(epoch from clock_timestamp()) * 1000)::bigint)
                WHERE id = v_run_id;
            END IF;
            v_outcomes := array_append(v_outcomes, '{"ok": true}'::jsonb);
            CONTINUE;
          END IF;
`;
}

/** Migration 2's check of steps: one record per (run, key). */
function stepsCheckByKey(t: Tables): string {
  return `          IF v_write ? 'steps' THEN
            WITH x AS (
              SELECT * FROM jsonb_populate_recordset(NULL::${t.steps}, v_write -> 'steps')
                WITH ORDINALITY)
            SELECT x.key INTO v_conflict
              FROM x LEFT JOIN LATERAL (SELECT * FROM ${t.steps} s
                  WHERE s.run_id = v_run_id AND s.key = x.key LIMIT 1) s ON true
              WHERE CASE WHEN s.key IS NOT NULL
                THEN (x.seq, x.name, x.kind, x.outcome, x.result, x.error, x.spend, x.attempt,
                    x.started_at, x.completed_at)
                  IS DISTINCT FROM (s.seq, s.name, s.kind, s.outcome, s.result, s.error,
                    s.spend, s.attempt, s.started_at, s.completed_at)
                ELSE EXISTS (SELECT FROM x f
                  WHERE f.key = x.key AND f.ordinality < x.ordinality
                    AND (f.seq, f.name, f.kind, f.outcome, f.result, f.error, f.spend,
                        f.attempt, f.started_at, f.completed_at)
                      IS DISTINCT FROM (x.seq, x.name, x.kind, x.outcome, x.result, x.error,
                        x.spend, x.attempt, x.started_at, x.completed_at))
                END
              ORDER BY x.ordinality LIMIT 1;
          END IF;
`;
}

/** Migration 3's check of steps: one record per (run, key, generation), and the place in
 *  the delivery order compared too. */
function stepsCheckByGeneration(t: Tables): string {
  return `          IF v_write ? 'steps' THEN
            WITH x AS (
              SELECT * FROM jsonb_populate_recordset(NULL::${t.steps}, v_write -> 'steps')
                WITH ORDINALITY)
            SELECT x.key INTO v_conflict
              FROM x LEFT JOIN LATERAL (SELECT * FROM ${t.steps} s
                  WHERE s.run_id = v_run_id AND s.key = x.key
                    AND s.generation = x.generation LIMIT 1) s ON true
              WHERE CASE WHEN s.key IS NOT NULL
                THEN (x.seq, x.name, x.kind, x.outcome, x.result, x.error, x.spend, x.attempt,
                    x.started_at, x.completed_at, x.delivery, x.issued_after, x.issued_late)
                  IS DISTINCT FROM (s.seq, s.name, s.kind, s.outcome, s.result, s.error,
                    s.spend, s.attempt, s.started_at, s.completed_at, s.delivery,
                    s.issued_after, s.issued_late)
                ELSE EXISTS (SELECT FROM x f
                  WHERE f.key = x.key AND f.generation = x.generation
                    AND f.ordinality < x.ordinality
                    AND (f.seq, f.name, f.kind, f.outcome, f.result, f.error, f.spend,
                        f.attempt, f.started_at, f.completed_at, f.delivery, f.issued_after,
                        f.issued_late)
                      IS DISTINCT FROM (x.seq, x.name, x.kind, x.outcome, x.result, x.error,
                        x.spend, x.attempt, x.started_at, x.completed_at, x.delivery,
                        x.issued_after, x.issued_late))
                END
              ORDER BY x.ordinality LIMIT 1;
          END IF;
`;
}

/** The checks of attempts, intents and events to consume; a conflict's outcome. */
function otherChecks(t: Tables): string {
  return `          IF v_conflict IS NULL AND v_write ? 'attempts' THEN
            WITH x AS (
              SELECT * FROM jsonb_populate_recordset(NULL::${t.attempts}, v_write -> 'attempts')
                WITH ORDINALITY)
            SELECT x.key INTO v_conflict
              FROM x LEFT JOIN LATERAL (SELECT * FROM ${t.attempts} a
                  WHERE a.run_id = v_run_id AND a.key = x.key
                    AND a.generation = x.generation AND a.attempt = x.attempt LIMIT 1) a ON true
              WHERE CASE WHEN a.key IS NOT NULL
                THEN (x.started_at, x.ended_at, x.error, x.spend, x.retry_at)
                  IS DISTINCT FROM (a.started_at, a.ended_at, a.error, a.spend, a.retry_at)
                ELSE EXISTS (SELECT FROM x f
                  WHERE f.key = x.key AND f.generation = x.generation
                    AND f.attempt = x.attempt AND f.ordinality < x.ordinality
                    AND (f.started_at, f.ended_at, f.error, f.spend, f.retry_at)
                      IS DISTINCT FROM (x.started_at, x.ended_at, x.error, x.spend, x.retry_at))
                END
              ORDER BY x.ordinality LIMIT 1;
          END IF;
          IF v_conflict IS NULL AND v_write ? 'intents' THEN
            WITH x AS (
              SELECT * FROM jsonb_populate_recordset(NULL::${t.intents}, v_write -> 'intents')
                WITH ORDINALITY)
            SELECT x.key INTO v_conflict
              FROM x LEFT JOIN LATERAL (SELECT * FROM ${t.intents} i
                  WHERE i.run_id = v_run_id AND i.key = x.key LIMIT 1) i ON true
              WHERE CASE WHEN i.key IS NOT NULL
                THEN (x.kind, x.name, x.data, x.created_at)
                  IS DISTINCT FROM (i.kind, i.name, i.data, i.created_at)
                ELSE EXISTS (SELECT FROM x f
                  WHERE f.key = x.key AND f.ordinality < x.ordinality
                    AND (f.kind, f.name, f.data, f.created_at)
                      IS DISTINCT FROM (x.kind, x.name, x.data, x.created_at))
                END
              ORDER BY x.ordinality LIMIT 1;
          END IF;
          -- An event must be this run's, and unconsumed (then the first entry naming it in
          -- this write takes it) or consumed by the same key (a retried write).
          IF v_conflict IS NULL AND v_write ? 'consume' THEN
            WITH x AS (
              SELECT * FROM jsonb_populate_recordset(NULL::${t.events}, v_write -> 'consume')
                WITH ORDINALITY)
            SELECT x.consumed_by INTO v_conflict
              FROM x LEFT JOIN LATERAL (SELECT * FROM ${t.events} e
                  WHERE e.seq = x.seq AND e.run_id = v_run_id LIMIT 1) e ON true
              WHERE e.seq IS NULL
                OR coalesce(e.consumed_by, (SELECT f.consumed_by FROM x f
                    WHERE f.seq = x.seq ORDER BY f.ordinality LIMIT 1))
                  IS DISTINCT FROM x.consumed_by
              ORDER BY x.ordinality LIMIT 1;
          END IF;
          IF v_conflict IS NOT NULL THEN
            v_outcomes := array_append(v_outcomes,
              jsonb_build_object('ok', false, 'reason', 'conflict', 'key', v_conflict));
            CONTINUE;
          END IF;

          v_spent := '{}';
`;
}

/** Migration 2's insert of steps. */
function insertStepsByKey(t: Tables): string {
  return `          IF v_write ? 'steps' THEN
            FOR v_spend IN
              INSERT INTO ${t.steps} (run_id, key, seq, name, kind, outcome, result, error,
                  spend, attempt, started_at, completed_at)
                SELECT v_run_id, x.key, x.seq, x.name, x.kind, x.outcome, x.result, x.error,
                    x.spend, x.attempt, x.started_at, x.completed_at
                  FROM jsonb_populate_recordset(NULL::${t.steps}, v_write -> 'steps') AS x
                ON CONFLICT (run_id, key) DO NOTHING
                RETURNING spend
            LOOP
              IF v_spend <> '{}'::jsonb THEN v_spent := ${t.addAmounts}(v_spent, v_spend); END IF;
            END LOOP;
          END IF;
`;
}

/** Migration 3's insert of steps (with `reconciled`: migration 10's). */
function insertStepsByGeneration(t: Tables, reconciled: boolean): string {
  if (reconciled) {
    return `          IF v_write ? 'steps' THEN
            FOR v_spend IN
              INSERT INTO ${t.steps} (run_id, key, generation, seq, name, kind, outcome,
                  result, error, spend, attempt, started_at, completed_at, delivery,
                  issued_after, issued_late, reconciled)
                SELECT v_run_id, x.key, x.generation, x.seq, x.name, x.kind, x.outcome,
                    x.result, x.error, x.spend, x.attempt, x.started_at, x.completed_at,
                    x.delivery, x.issued_after, x.issued_late, x.reconciled
                  FROM jsonb_populate_recordset(NULL::${t.steps}, v_write -> 'steps') AS x
                ON CONFLICT (run_id, key, generation) DO NOTHING
                RETURNING spend
            LOOP
              IF v_spend <> '{}'::jsonb THEN v_spent := ${t.addAmounts}(v_spent, v_spend); END IF;
            END LOOP;
          END IF;
`;
  }
  return `          IF v_write ? 'steps' THEN
            FOR v_spend IN
              INSERT INTO ${t.steps} (run_id, key, generation, seq, name, kind, outcome,
                  result, error, spend, attempt, started_at, completed_at, delivery,
                  issued_after, issued_late)
                SELECT v_run_id, x.key, x.generation, x.seq, x.name, x.kind, x.outcome,
                    x.result, x.error, x.spend, x.attempt, x.started_at, x.completed_at,
                    x.delivery, x.issued_after, x.issued_late
                  FROM jsonb_populate_recordset(NULL::${t.steps}, v_write -> 'steps') AS x
                ON CONFLICT (run_id, key, generation) DO NOTHING
                RETURNING spend
            LOOP
              IF v_spend <> '{}'::jsonb THEN v_spent := ${t.addAmounts}(v_spent, v_spend); END IF;
            END LOOP;
          END IF;
`;
}

/** The inserts of attempts and intents, consuming events, adding the spend; the outcome. */
function insertOthers(t: Tables): string {
  return `          IF v_write ? 'attempts' THEN
            FOR v_spend IN
              INSERT INTO ${t.attempts} (run_id, key, generation, attempt, started_at, ended_at,
                  error, spend, retry_at)
                SELECT v_run_id, x.key, x.generation, x.attempt, x.started_at, x.ended_at,
                    x.error, x.spend, x.retry_at
                  FROM jsonb_populate_recordset(NULL::${t.attempts}, v_write -> 'attempts') AS x
                ON CONFLICT (run_id, key, generation, attempt) DO NOTHING
                RETURNING spend
            LOOP
              IF v_spend <> '{}'::jsonb THEN v_spent := ${t.addAmounts}(v_spent, v_spend); END IF;
            END LOOP;
          END IF;
          IF v_write ? 'intents' THEN
            INSERT INTO ${t.intents} (run_id, key, kind, name, data, created_at)
              SELECT v_run_id, x.key, x.kind, x.name, x.data, x.created_at
                FROM jsonb_populate_recordset(NULL::${t.intents}, v_write -> 'intents') AS x
              ON CONFLICT (run_id, key) DO NOTHING;
          END IF;
          IF v_write ? 'consume' THEN
            UPDATE ${t.events} e SET consumed_by = x.consumed_by
              FROM jsonb_populate_recordset(NULL::${t.events}, v_write -> 'consume') AS x
              WHERE e.seq = x.seq AND e.run_id = v_run_id AND e.consumed_by IS NULL;
          END IF;
          IF v_spent <> '{}'::jsonb THEN
            -- updated_at: the store's now (nowSql in sql.ts), p_clock being its parameter.
            UPDATE ${t.runs} SET budget_spent = ${t.addAmounts}(v_budget_spent, v_spent),
                updated_at = coalesce(p_clock,
                  floor(extract(epoch from clock_timestamp()) * 1000)::bigint)
              WHERE id = v_run_id;
          END IF;
          v_outcomes := array_append(v_outcomes, '{"ok": true}'::jsonb);
        END LOOP;
        RETURN to_jsonb(v_outcomes);
      END
      $fn$`;
}
