// A SQLite file as an earlier cairn left it, for the tests of a migration: the migrations up
// to a version applied (and recorded in schema_version), open for rows to be put in by hand.

import Database from "better-sqlite3";
import { MIGRATIONS } from "../../src/store/sqlite/migrations/index.js";
import { tempDbPath } from "./sqlite.js";

/** A new file (in a temporary directory: `cleanup` removes it) in WAL mode, migrated up to
 *  `version`, each migration recorded as applied at `appliedAt`; `db` is open on it: close it
 *  before a store opens the file. */
export function sqliteFileAt(
  version: number,
  appliedAt: number,
): { path: string; db: Database.Database; cleanup: () => void } {
  const { path, cleanup } = tempDbPath();
  const db = new Database(path);
  db.pragma("journal_mode = WAL");
  db.exec("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)");
  for (const m of MIGRATIONS.filter((m) => m.version <= version)) {
    db.exec(m.sql);
    db.prepare("INSERT INTO schema_version VALUES (?, ?)").run(m.version, appliedAt);
  }
  return { path, db, cleanup };
}
