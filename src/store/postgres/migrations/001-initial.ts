// 1: the initial schema. Times are bigint ms; every table is keyed by run id first so the
// store can later be partitioned by run id across databases.

import type { Tables } from "../sql.js";
import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 1,
  statements: (t) => [...runs(t), ...journalAndWorkers(t)],
};

/** The runs table and the indexes its verbs scan. */
function runs(t: Tables): string[] {
  return [
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
  ];
}

/** A run's journal (steps, attempts, intents), its events, and the workers. */
function journalAndWorkers(t: Tables): string[] {
  return [
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
  ];
}
