// Bringing a SQLite file's schema up to date (migrations/), and refusing one that a newer
// cairn wrote. Migrating writes to the file, so connection.ts checks a file's version on a
// read-only connection first.

import type Database from "better-sqlite3";
import { StoreError } from "../../errors.js";
import { MIGRATIONS, SCHEMA_VERSION } from "./migrations/index.js";

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
