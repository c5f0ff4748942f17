// Creates and upgrades the store's tables in its schema. Many workers may start at once
// against a fresh database, so the whole check-and-migrate runs in one transaction under a
// transaction-scoped advisory lock keyed by the schema: the first one migrates, the others
// wait, then find the schema current and do nothing. A schema newer than this code is
// refused (invariant 9): nothing is changed and the error says what to do.
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
