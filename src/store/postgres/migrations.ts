// Creates and upgrades the store's tables and functions in its schema. Many workers may
// start at once against a fresh database, so the whole check-and-migrate runs in one
// transaction under a transaction-scoped advisory lock keyed by the schema: the first one
// migrates, the others wait, then find the schema current and do nothing. A schema newer
// than this code is refused (invariant 9): nothing is changed and the error says what to do.
//
// A migration, once released, is never edited: add a new entry instead.

import { StoreError } from "../../errors.js";
import type { Database } from "./connection.js";
import type { Tables } from "./sql.js";

type Migration = (t: Tables) => string[];

const MIGRATIONS: Migration[] = [
  // 1: the initial schema. Times are bigint ms; every table is keyed by run id first so the
  // store can later be partitioned by run id (DESIGN.md, Scale-out).
  (t) => [
    `CREATE TABLE ${t.runs} (
      id text PRIMARY KEY,
      workflow text NOT NULL,
      version text NOT NULL,
      status text NOT NULL CHECK (status IN
        ('pending', 'running', 'waiting', 'paused', 'completed', 'failed', 'canceled')),
      reason text,
      paused_for text CHECK (paused_for IN ('version', 'budget')),
      input text NOT NULL,
      output text,
      error jsonb,
      budget_limit jsonb NOT NULL DEFAULT '{}',
      budget_spent jsonb NOT NULL DEFAULT '{}',
      parent_id text,
      ready_at bigint,
      wake_at bigint,
      waiting_for text[] NOT NULL DEFAULT '{}',
      lease_owner text,
      lease_until bigint,
      epoch bigint NOT NULL DEFAULT 0,
      generation integer NOT NULL DEFAULT 0,
      cancel_requested boolean NOT NULL DEFAULT false,
      created_at bigint NOT NULL,
      updated_at bigint NOT NULL,
      -- The last claim: a token of the claimRuns call, and the status it found (so a claim
      -- retried after a lost COMMIT finds its runs and whether they were recovered).
      claim_token text,
      claimed_from text
    )`,
    // markUnserved (and claimRuns) scan ready runs oldest-ready first; the claim index lets
    // a worker skip, without reading them, ready runs of versions it does not serve.
    `CREATE INDEX runs_ready_at ON ${t.runs} (ready_at) WHERE ready_at IS NOT NULL`,
    `CREATE INDEX runs_claimable ON ${t.runs} ((workflow || '@' || version), ready_at)
      WHERE ready_at IS NOT NULL`,
    `CREATE INDEX runs_created ON ${t.runs} (created_at DESC, id DESC)`,
    `CREATE INDEX runs_status_created ON ${t.runs} (status, created_at DESC, id DESC)`,
    `CREATE INDEX runs_parent ON ${t.runs} (parent_id) WHERE parent_id IS NOT NULL`,
    `CREATE INDEX runs_lease_owner ON ${t.runs} (lease_owner) WHERE lease_owner IS NOT NULL`,
    `CREATE TABLE ${t.steps} (
      run_id text NOT NULL REFERENCES ${t.runs} (id) ON DELETE CASCADE,
      key text NOT NULL,
      seq integer NOT NULL,
      name text NOT NULL,
      kind text NOT NULL,
      outcome text NOT NULL CHECK (outcome IN ('ok', 'error')),
      result text,
      error jsonb,
      spend jsonb NOT NULL DEFAULT '{}',
      attempt integer NOT NULL,
      started_at bigint NOT NULL,
      completed_at bigint NOT NULL,
      PRIMARY KEY (run_id, key)
    )`,
    `CREATE TABLE ${t.attempts} (
      run_id text NOT NULL REFERENCES ${t.runs} (id) ON DELETE CASCADE,
      key text NOT NULL,
      generation integer NOT NULL,
      attempt integer NOT NULL,
      started_at bigint NOT NULL,
      ended_at bigint NOT NULL,
      error jsonb NOT NULL,
      spend jsonb NOT NULL DEFAULT '{}',
      retry_at bigint,
      PRIMARY KEY (run_id, key, generation, attempt)
    )`,
    `CREATE TABLE ${t.intents} (
      run_id text NOT NULL REFERENCES ${t.runs} (id) ON DELETE CASCADE,
      key text NOT NULL,
      kind text NOT NULL,
      name text NOT NULL,
      data text NOT NULL,
      created_at bigint NOT NULL,
      PRIMARY KEY (run_id, key)
    )`,
    `CREATE TABLE ${t.events} (
      seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      run_id text NOT NULL REFERENCES ${t.runs} (id) ON DELETE CASCADE,
      name text NOT NULL,
      payload text NOT NULL,
      created_at bigint NOT NULL,
      consumed_by text
    )`,
    `CREATE INDEX events_unconsumed ON ${t.events} (run_id, seq) WHERE consumed_by IS NULL`,
    `CREATE TABLE ${t.workers} (
      id text PRIMARY KEY,
      host text NOT NULL,
      pid integer NOT NULL,
      workflows text[] NOT NULL,
      started_at bigint NOT NULL,
      heartbeat_at bigint NOT NULL
    )`,
  ],

  // 2: the group commit as one function, so appendRecords is ONE round trip whatever the
  // batch size (journal-writes.ts explains the semantics it keeps).
  (t) => [
    // JavaScript's addAmounts in SQL: float8 arithmetic, as the engine and the SQLite store
    // add amounts (0.1 + 0.2 is 0.30000000000000004 on every backend). extra_float_digits
    // >= 1 prints each float8 in its shortest exact form, so a sum reads back as the same
    // JavaScript number. A non-number amount, or a sum that is not finite, becomes null,
    // as JSON.stringify writes NaN and Infinity; a null already there counts as 0.
    // PL/pgSQL rather than SQL: its plans are cached per session, a SQL function called
    // from PL/pgSQL would be planned again in every transaction.
    `CREATE FUNCTION ${t.addAmounts}(p_into jsonb, p_add jsonb) RETURNS jsonb
      LANGUAGE plpgsql STABLE
      SET extra_float_digits = 1
      AS $fn$
      DECLARE
        v_name text;
        v_amount jsonb;
        v_total float8;
      BEGIN
        FOR v_name, v_amount IN SELECT a.key, a.value FROM jsonb_each(p_add) AS a LOOP
          v_total := coalesce((p_into ->> v_name)::float8, 0)
            + CASE WHEN jsonb_typeof(v_amount) = 'number' THEN v_amount::float8 END;
          p_into := p_into || jsonb_build_object(v_name,
            CASE WHEN v_total IN ('Infinity'::float8, '-Infinity'::float8, 'NaN'::float8)
              THEN NULL ELSE to_jsonb(v_total) END);
        END LOOP;
        RETURN p_into;
      END
      $fn$`,
    // p_writes: [{ run_id, epoch, steps?, attempts?, intents?, consume? }], records in their
    // tables' column names (consume as events rows: seq, consumed_by), already normalized.
    // p_clock: the nowSql parameter. Returns one outcome per write, in order.
    //
    // Each write: lock the run row and check the epoch; then find the first record that
    // differs from the row already under its key (or, with none there, from the first
    // record of its key in this write), and the first event it cannot consume; only when
    // there is none, insert (ON CONFLICT DO NOTHING), consume, and add the spend of the
    // rows actually inserted. Every statement after the lock takes a new snapshot and the
    // lock keeps other writers of the run out, so what the checks saw is what the writes
    // meet: a write that fails lands nothing, without a subtransaction.
    `CREATE FUNCTION ${t.appendRecords}(p_writes jsonb, p_clock bigint) RETURNS jsonb
      LANGUAGE plpgsql
      AS $fn$
      DECLARE
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
          IF v_write ? 'steps' THEN
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
          IF v_conflict IS NULL AND v_write ? 'attempts' THEN
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
          IF v_write ? 'steps' THEN
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
          IF v_write ? 'attempts' THEN
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
      $fn$`,
  ],
];

/** The schema version this code writes and understands. */
export const SCHEMA_VERSION = MIGRATIONS.length;

export async function migrate(
  db: Database,
  schema: string,
  t: Tables,
  description: string,
): Promise<void> {
  await db.transaction("open (migrate)", "idempotent", async (tx) => {
    // Two-key form: (class, schema hash), so cairn's lock cannot collide with an
    // application's single-key advisory locks.
    await tx.query("SELECT pg_advisory_xact_lock(1667330414, hashtext($1))", [schema]);
    const exists = await tx.query<{ present: boolean }>(
      "SELECT to_regclass($1) IS NOT NULL AS present",
      [t.schemaVersion],
    );
    let current = 0;
    if (exists.rows[0]?.present) {
      const v = await tx.query<{ version: number | null }>(
        `SELECT max(version) AS version FROM ${t.schemaVersion}`,
      );
      current = v.rows[0]?.version ?? 0;
    }
    if (current > SCHEMA_VERSION) {
      throw new StoreError(
        `PostgreSQL (${description}): schema "${schema}" is at version ${current}, newer than ` +
          `this cairn understands (version ${SCHEMA_VERSION}). Upgrade cairn, or point it at ` +
          "another schema; nothing was changed.",
      );
    }
    if (current === SCHEMA_VERSION) return;
    // Only reached when something must change, so a role without CREATE rights can open an
    // already migrated schema.
    await tx.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
    await tx.query(
      `CREATE TABLE IF NOT EXISTS ${t.schemaVersion} (
        version integer PRIMARY KEY,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`,
    );
    for (let v = current + 1; v <= SCHEMA_VERSION; v++) {
      for (const statement of MIGRATIONS[v - 1]?.(t) ?? []) await tx.query(statement);
      await tx.query(`INSERT INTO ${t.schemaVersion} (version) VALUES ($1)`, [v]);
    }
  });
}
