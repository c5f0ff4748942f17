// The SQLite schema, as an ordered list of migrations. A file records every migration it
// has applied in `schema_version`; the highest row is its version. Migrations only ever
// get appended here: an applied one is never edited, or files already migrated by it
// would silently differ from new ones.

import type Database from "better-sqlite3";
import { StoreError } from "../../errors.js";

export interface Migration {
  version: number;
  sql: string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
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
  },
];

/** The schema version this code writes; a file with a higher one is refused. */
export const SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

/** The file's schema version: 0 for a file cairn never migrated (e.g. a new, empty one). */
export function readSchemaVersion(db: Database.Database): number {
  const table = db
    .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'")
    .get();
  if (!table) return 0;
  const row = db.prepare("SELECT MAX(version) AS v FROM schema_version").get() as {
    v: number | null;
  };
  return row.v ?? 0;
}

export function newerSchemaError(path: string, found: number): StoreError {
  return new StoreError(
    `SQLite store "${path}" has schema version ${found}, but this cairn knows versions up to ` +
      `${SCHEMA_VERSION}: it was written by a newer cairn. Upgrade cairn to open it, or use ` +
      "another file. The file was not modified.",
  );
}

/** Brings the schema up to SCHEMA_VERSION in one write transaction (all or nothing). */
export function migrate(db: Database.Database, path: string, nowMs: number): void {
  db.transaction(() => {
    db.exec(
      "CREATE TABLE IF NOT EXISTS schema_version " +
        "(version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
    );
    // Read inside the write transaction: another process may have migrated meanwhile.
    const current = readSchemaVersion(db);
    if (current > SCHEMA_VERSION) throw newerSchemaError(path, current);
    const record = db.prepare("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)");
    for (const m of MIGRATIONS) {
      if (m.version <= current) continue;
      db.exec(m.sql);
      record.run(m.version, nowMs);
    }
  }).immediate();
}
