// Opening a SQLite file safely, running each verb in a transaction on it, and turning
// driver errors into StoreErrors that name it.
//
// A corrupted file or one written by a newer cairn must be refused WITHOUT being modified
// (the usual repair advice has made corruption worse: kolibri PR #5218). Setting WAL mode,
// creating a journal or migrating all write to the file, so every check runs first on a
// read-only connection; only a file that passes is opened read-write.

import { existsSync, mkdirSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import Database from "better-sqlite3";
import { CairnError, StoreError } from "../../errors.js";
import type { Clock } from "../../lib/clock.js";
import type { StoreHint } from "../store.js";
import { migrate, newerSchemaError, readSchemaVersion } from "./migrate.js";
import { SCHEMA_VERSION } from "./migrations/index.js";
import type { ReadTx, StoreContext, WriteTx } from "./sql.js";

export interface ConnectionOptions {
  synchronous: "full" | "normal";
  busyTimeoutMs: number;
  /** Refuse a file holding no cairn store (SqliteStoreOptions.mustExist). */
  mustExist?: boolean;
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

/** A file opened by a client that must not create a store, holding none. */
function notACairnStore(path: string): StoreError {
  return new StoreError(
    `No cairn store in SQLite file "${path}": it holds no cairn tables (an empty file, or another ` +
      "application's database). Check the path (--store / CAIRN_STORE), or start a worker with " +
      "it first (it creates the store); nothing was written to the file.",
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
    if (version === 0 && options.mustExist) throw notACairnStore(path);
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
    if (existsSync(path)) {
      // SQLite would report a directory as a disk I/O error.
      const stat = statSync(path);
      if (stat.isDirectory()) {
        throw new StoreError(
          `SQLite store "${path}" is a directory; give the path of a database file, e.g. "${join(path, "cairn.db")}".`,
        );
      }
      // Reading a FIFO's header blocks until something writes to it: the process hung for
      // ever, its timers stopped with it. A device or a socket is no database either.
      if (!stat.isFile()) {
        throw new StoreError(
          `SQLite store "${path}" is not a regular file (a FIFO, a socket or a device); give the path of a database file, e.g. ".cairn/cairn.db".`,
        );
      }
      checkExisting(path, options);
    } else if (options.mustExist) {
      // Refused before anything is made: its directory neither.
      throw new StoreError(
        `No cairn store at "${path}" (SQLite): the file does not exist. Check the path, or start a ` +
          "worker with it first (it creates the store); nothing was created.",
      );
    } else {
      try {
        mkdirSync(dirname(path), { recursive: true });
      } catch (err) {
        throw new StoreError(
          `SQLite store "${path}": cannot create its directory; check the path and permissions.`,
          { cause: err },
        );
      }
    }
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

const BUSY_RETRIES = 3;

/** The real setImmediate, taken when the module loads: a test's fake timers (which replace
 *  the global) must not hold a store's creates and releases back. */
const scheduleFlush: (fn: () => void) => void = setImmediate;

interface GroupedWrite {
  verb: string;
  fn: (tx: WriteTx) => unknown;
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
}

type GroupAnswer = { ok: true; value: unknown; hints: StoreHint[] } | { ok: false; error: unknown };

/** A better-sqlite3 transaction function that runs the function it is given. */
type RunInTransaction = (<T>(fn: () => T) => T) & {
  deferred<T>(fn: () => T): T;
  immediate<T>(fn: () => T): T;
};

/**
 * A store's file, opened by its first open() and closed by its last close(), and the one
 * way verbs reach it: a transaction. Every write transaction is BEGIN IMMEDIATE: it takes
 * the write lock before reading, so it never has to upgrade a read snapshot to a write
 * (the SQLITE_BUSY_SNAPSHOT trap of better-sqlite3 #1067). Waiting for the lock is the busy
 * timeout's job; a BUSY that still escapes is retried a few times, then reported as a
 * StoreError naming the file.
 */
export class Connection implements StoreContext {
  #db: Database.Database | undefined;
  #clock: Clock | undefined;
  #openers = 0;
  /** One transaction wrapper per connection, running the function it is given: building a
   *  wrapper per call showed in a per-step CPU profile. Called inside a transaction it is a
   *  SAVEPOINT, as any nested better-sqlite3 transaction is. */
  #transaction: RunInTransaction | undefined;
  readonly #statements = new Map<string, Database.Statement>();
  /** Writes waiting for the group transaction of this turn (writeGrouped). */
  #grouped: GroupedWrite[] = [];
  #flushArmed = false;
  /** The epoch floor as last read on this connection (WriteTx.floor): new files start at 0. */
  readonly #floor = { epoch: 0 };
  readonly #prepare = (sql: string): Database.Statement => {
    let s = this.#statements.get(sql);
    if (!s) {
      s = this.#connection().prepare(sql);
      this.#statements.set(sql, s);
    }
    return s;
  };

  constructor(
    private readonly path: string,
    private readonly options: ConnectionOptions,
    /** Hands the hints of a committed write to the store's subscribers. */
    private readonly emit: (hint: StoreHint) => void,
  ) {}

  open(clock: Clock): void {
    if (this.#openers === 0) {
      const db = openDatabase(this.path, this.options, clock.now());
      this.#db = db;
      this.#transaction = db.transaction((fn: () => unknown) => fn()) as RunInTransaction;
      this.#clock = clock;
      this.#statements.clear();
    }
    this.#openers += 1;
  }

  close(): void {
    if (this.#openers === 0) return;
    // Writes asked for before the close are written before it, as they would have been
    // had each been its own transaction.
    if (this.#openers === 1) this.#flushGrouped();
    this.#openers -= 1;
    if (this.#openers > 0) return;
    const db = this.#db;
    this.#db = undefined;
    this.#transaction = undefined;
    this.#statements.clear();
    try {
      db?.close();
    } catch (err) {
      throw storeErrorFor(this.path, "closing", err, this.options.busyTimeoutMs);
    }
  }

  pragma(name: string): unknown {
    return this.#connection().pragma(name, { simple: true });
  }

  now(): number {
    if (!this.#clock) throw this.#notOpen();
    return this.#clock.now();
  }

  /** Runs `fn` in one BEGIN IMMEDIATE transaction; hints are emitted after it commits. The
   *  first try runs at once (better-sqlite3 answers synchronously, and an async function
   *  per commit showed in profiles); only a BUSY goes on to the retries. */
  write<T>(verb: string, fn: (tx: WriteTx) => T): Promise<T> {
    try {
      return Promise.resolve(this.#writeOnce(fn));
    } catch (err) {
      if (isBusy(err)) return this.#writeAfterBusy(verb, fn);
      return Promise.reject(this.#writeFailure(verb, err));
    }
  }

  async #writeAfterBusy<T>(verb: string, fn: (tx: WriteTx) => T): Promise<T> {
    for (let retry = 1; ; retry++) {
      await jitteredPause(retry);
      try {
        return this.#writeOnce(fn);
      } catch (err) {
        if (isBusy(err) && retry < BUSY_RETRIES) continue;
        throw this.#writeFailure(verb, err);
      }
    }
  }

  /**
   * Group commit for the run transitions many runs make at once (32 runs started together
   * are 32 creates and, later, 32 releases): the writes asked for in one turn of the event
   * loop run in ONE transaction, one fsync, each in a SAVEPOINT of its own (a write alone
   * in its turn needs none: it is the whole transaction). A write that
   * throws undoes only its own changes and is answered with its own error, its hints
   * dropped; the others commit. Only if the transaction as a whole fails (BUSY past the
   * retries, an I/O error, a full disk) is every write of the group refused, and then none
   * of them landed.
   */
  writeGrouped<T>(verb: string, fn: (tx: WriteTx) => T): Promise<T> {
    // Refused now, as an ungrouped write is: queued, it would land if the store were
    // opened again before the flush.
    if (!this.#db) return Promise.reject(this.#notOpen());
    return new Promise<T>((resolve, reject) => {
      this.#grouped.push({ verb, fn, resolve: resolve as (value: unknown) => void, reject });
      if (!this.#flushArmed) {
        this.#flushArmed = true;
        scheduleFlush(() => {
          this.#flushArmed = false;
          this.#flushGrouped();
        });
      }
    });
  }

  #flushGrouped(): void {
    const group = this.#grouped;
    if (group.length === 0) return;
    this.#grouped = [];
    if (group.length === 1) {
      // Alone in its turn (runs started one after another): nothing else shares the
      // transaction, so a throw that rolls it all back undoes exactly this write, as its
      // SAVEPOINT would have; the SAVEPOINT and RELEASE were two of a create's or a
      // release's four statements. Answered as a write of its own is (write()).
      const g = group[0]!;
      void this.write(g.verb, g.fn).then(g.resolve, g.reject);
      return;
    }
    const verbs = [...new Set(group.map((g) => g.verb))].join(", ");
    let answers: GroupAnswer[] = [];
    this.write(verbs, (tx) => {
      // A BUSY retry runs the whole group again, from the start.
      answers = [];
      for (const g of group) {
        const hints: StoreHint[] = [];
        const own: WriteTx = { ...tx, hint: (h) => hints.push(h) };
        try {
          answers.push({ ok: true, value: tx.savepoint(() => g.fn(own))(undefined), hints });
        } catch (error) {
          // SQLite ends the whole transaction after some errors (a full disk, an I/O
          // error): then nothing of the group may be written, or answered as written.
          if (!this.#connection().inTransaction) throw error;
          answers.push({ ok: false, error });
        }
      }
      for (const a of answers) if (a.ok) for (const h of a.hints) tx.hint(h);
    }).then(
      () => {
        group.forEach((g, i) => {
          const a = answers[i]!;
          if (a.ok) g.resolve(a.value);
          else g.reject(this.#writeFailure(g.verb, a.error));
        });
      },
      (err: unknown) => {
        for (const g of group) g.reject(err as Error);
      },
    );
  }

  #writeOnce<T>(fn: (tx: WriteTx) => T): T {
    const hints: StoreHint[] = [];
    const transaction = this.#transactions();
    // Now is read once the write lock is ours: BEGIN IMMEDIATE may wait (the busy timeout)
    // for another process's write, and a time read before that wait judged, say, an
    // approval's answer by a moment before its deadline that had long passed.
    const result = transaction.immediate(() =>
      fn({
        prepare: this.#prepare,
        path: this.path,
        now: this.now(),
        hint: (h) => hints.push(h),
        savepoint: (inner) => (arg) => transaction(() => inner(arg)),
        floor: this.#floor,
      }),
    );
    for (const h of hints) this.emit(h);
    return result;
  }

  #writeFailure(verb: string, err: unknown): Error {
    if (err instanceof CairnError) return err;
    return storeErrorFor(this.path, verb, err, this.options.busyTimeoutMs);
  }

  /** Reads in one deferred transaction: one consistent snapshot, no write lock. */
  async read<T>(verb: string, fn: (tx: ReadTx) => T): Promise<T> {
    try {
      const tx: ReadTx = { prepare: this.#prepare, path: this.path };
      return this.#transactions().deferred(() => fn(tx));
    } catch (err) {
      if (err instanceof CairnError) throw err;
      throw storeErrorFor(this.path, verb, err, this.options.busyTimeoutMs);
    }
  }

  #transactions(): RunInTransaction {
    if (!this.#transaction) throw this.#notOpen();
    return this.#transaction;
  }

  #connection(): Database.Database {
    if (!this.#db) throw this.#notOpen();
    return this.#db;
  }

  #notOpen(): StoreError {
    return new StoreError(`SQLite store "${this.path}" is not open; call open() first.`);
  }
}

/** Backoff between retries of a transaction that hit BUSY despite the busy timeout. Real
 *  time on purpose: it paces contention between processes, not logical time. */
function jitteredPause(attempt: number): Promise<void> {
  const ms = 10 * 2 ** attempt * (0.5 + Math.random());
  return new Promise((resolve) => setTimeout(resolve, ms));
}
