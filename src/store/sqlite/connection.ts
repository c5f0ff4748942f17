// Opening a SQLite file safely, and turning driver errors into StoreErrors that name it.
//
// A corrupted file or one written by a newer cairn must be refused WITHOUT being modified
// (the usual repair advice has made corruption worse: kolibri PR #5218). Setting WAL mode,
// creating a journal or migrating all write to the file, so every check runs first on a
// read-only connection; only a file that passes is opened read-write.

import { existsSync, mkdirSync } from "node:fs";
import { dirname } from "node:path";
import Database from "better-sqlite3";
import { StoreError } from "../../errors.js";
import { migrate, newerSchemaError, readSchemaVersion, SCHEMA_VERSION } from "./migrations.js";

export interface ConnectionOptions {
  synchronous: "full" | "normal";
  busyTimeoutMs: number;
}

const CORRUPTION_CODES = new Set(["SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_CORRUPT_INDEX"]);

function driverCode(err: unknown): string | undefined {
  if (err instanceof Database.SqliteError) return err.code;
  return undefined;
}

export function isBusy(err: unknown): boolean {
  const code = driverCode(err);
  return code !== undefined && (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED"));
}

function corruptedError(path: string, detail: string, cause?: unknown): StoreError {
  return new StoreError(
    `SQLite store "${path}" is corrupted (${detail}). cairn refuses to open it and has not ` +
      "modified it. Restore the file from a backup, or move it aside to start with an empty " +
      "store; keep the damaged copy for inspection rather than repairing it in place.",
    { cause },
  );
}

/** Maps a better-sqlite3 error to a StoreError that names the file and says what to do. */
export function storeErrorFor(
  path: string,
  doing: string,
  err: unknown,
  busyTimeoutMs: number,
): StoreError {
  if (err instanceof StoreError) return err;
  const code = driverCode(err) ?? "unknown";
  if (CORRUPTION_CODES.has(code)) return corruptedError(path, code, err);
  let advice: string;
  if (isBusy(err)) {
    advice =
      `another connection held the write lock longer than the busy timeout (${busyTimeoutMs} ms); ` +
      "raise busyTimeoutMs, or have fewer processes write to this file";
  } else if (code === "SQLITE_FULL") {
    advice = "the disk is full; committed records are intact, free space and retry";
  } else if (code.startsWith("SQLITE_READONLY") || code.startsWith("SQLITE_CANTOPEN")) {
    advice = "check that the file and its directory exist and are writable by this process";
  } else if (code.startsWith("SQLITE_IOERR")) {
    advice = "the disk reported an I/O error; check the disk and retry";
  } else {
    advice = "see the cause for details";
  }
  const message = err instanceof Error ? err.message : String(err);
  return new StoreError(
    `SQLite store "${path}": ${doing} failed with ${code} (${message}): ${advice}.`,
    { cause: err },
  );
}

/** Checks an existing file on a read-only connection: intact, and a schema we know. */
function checkExisting(path: string, options: ConnectionOptions): void {
  let db: Database.Database | undefined;
  try {
    db = new Database(path, {
      readonly: true,
      fileMustExist: true,
      timeout: options.busyTimeoutMs,
    });
    const rows = db.pragma("quick_check") as Array<{ quick_check: string }>;
    const problems = rows.map((r) => r.quick_check).filter((r) => r !== "ok");
    if (problems.length > 0) {
      // quick_check reports structure (pages, cells), never row contents.
      throw corruptedError(path, `quick_check: ${problems[0]}`);
    }
    const version = readSchemaVersion(db);
    if (version > SCHEMA_VERSION) throw newerSchemaError(path, version);
  } catch (err) {
    throw storeErrorFor(path, "opening", err, options.busyTimeoutMs);
  } finally {
    db?.close();
  }
}

/** Opens (creating if needed), checks, configures and migrates the file at `path`. */
export function openDatabase(
  path: string,
  options: ConnectionOptions,
  nowMs: number,
): Database.Database {
  const inMemory = path === ":memory:";
  if (!inMemory) {
    try {
      mkdirSync(dirname(path), { recursive: true });
    } catch (err) {
      throw new StoreError(
        `SQLite store "${path}": cannot create its directory; check the path and permissions.`,
        { cause: err },
      );
    }
    if (existsSync(path)) checkExisting(path, options);
  }
  let db: Database.Database | undefined;
  try {
    db = new Database(path, { timeout: options.busyTimeoutMs });
    db.pragma(`busy_timeout = ${options.busyTimeoutMs}`);
    db.pragma("journal_mode = WAL");
    db.pragma(`synchronous = ${options.synchronous === "normal" ? "NORMAL" : "FULL"}`);
    migrate(db, path, nowMs);
    return db;
  } catch (err) {
    db?.close();
    throw storeErrorFor(path, "opening", err, options.busyTimeoutMs);
  }
}
