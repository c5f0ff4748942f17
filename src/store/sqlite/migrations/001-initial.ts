// 1: the initial schema: runs, the journal (steps, attempts, intents), events and workers.

import type { Migration } from "./index.js";

export const migration: Migration = {
  version: 1,
  sql: `
      CREATE TABLE runs (
        id               TEXT PRIMARY KEY,
        workflow         TEXT NOT NULL,
        version          TEXT NOT NULL,
        status           TEXT NOT NULL,
        reason           TEXT,
        paused_for       TEXT,
        input            TEXT NOT NULL,
        output           TEXT,
        error            TEXT,
        budget_limit     TEXT NOT NULL,
        budget_spent     TEXT NOT NULL,
        parent_id        TEXT,
        ready_at         INTEGER,
        wake_at          INTEGER,
        waiting_for      TEXT NOT NULL,
        lease_owner      TEXT,
        lease_until      INTEGER,
        epoch            INTEGER NOT NULL,
        generation       INTEGER NOT NULL,
        cancel_requested INTEGER NOT NULL,
        created_at       INTEGER NOT NULL,
        updated_at       INTEGER NOT NULL
      );
      -- claimRuns and markUnserved: the runs that are ready, oldest first.
      CREATE INDEX runs_ready ON runs (ready_at) WHERE ready_at IS NOT NULL;
      -- listRuns: newest first, optionally filtered by one column.
      CREATE INDEX runs_created ON runs (created_at, id);
      CREATE INDEX runs_status_created ON runs (status, created_at, id);
      CREATE INDEX runs_workflow_created ON runs (workflow, created_at, id);
      CREATE INDEX runs_parent_created ON runs (parent_id, created_at, id)
        WHERE parent_id IS NOT NULL;
      -- removeWorker: the runs a worker leases.
      CREATE INDEX runs_lease_owner ON runs (lease_owner) WHERE lease_owner IS NOT NULL;

      -- Insert-only: a step record is never updated or deleted while its run lives.
      CREATE TABLE steps (
        run_id       TEXT NOT NULL,
        key          TEXT NOT NULL,
        seq          INTEGER NOT NULL,
        name         TEXT NOT NULL,
        kind         TEXT NOT NULL,
        outcome      TEXT NOT NULL,
        result       TEXT,
        error        TEXT,
        spend        TEXT NOT NULL,
        attempt      INTEGER NOT NULL,
        started_at   INTEGER NOT NULL,
        completed_at INTEGER NOT NULL,
        UNIQUE (run_id, key)
      );
      CREATE INDEX steps_run_seq ON steps (run_id, seq);

      CREATE TABLE attempts (
        id          INTEGER PRIMARY KEY,
        run_id      TEXT NOT NULL,
        key         TEXT NOT NULL,
        attempt     INTEGER NOT NULL,
        generation  INTEGER NOT NULL,
        started_at  INTEGER NOT NULL,
        ended_at    INTEGER NOT NULL,
        error       TEXT NOT NULL,
        spend       TEXT NOT NULL,
        retry_at    INTEGER,
        UNIQUE (run_id, generation, key, attempt)
      );

      CREATE TABLE intents (
        id         INTEGER PRIMARY KEY,
        run_id     TEXT NOT NULL,
        key        TEXT NOT NULL,
        kind       TEXT NOT NULL,
        name       TEXT NOT NULL,
        data       TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        UNIQUE (run_id, key)
      );

      -- AUTOINCREMENT: a seq is never reused, so "in the order sent" survives deletions.
      CREATE TABLE events (
        seq         INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id      TEXT NOT NULL,
        name        TEXT NOT NULL,
        payload     TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        consumed_by TEXT
      );
      CREATE INDEX events_run_seq ON events (run_id, seq);
      CREATE INDEX events_unconsumed ON events (run_id, name) WHERE consumed_by IS NULL;

      CREATE TABLE workers (
        id           TEXT PRIMARY KEY,
        host         TEXT NOT NULL,
        pid          INTEGER NOT NULL,
        workflows    TEXT NOT NULL,
        started_at   INTEGER NOT NULL,
        heartbeat_at INTEGER NOT NULL
      );
    `,
};
