// Durability of a synchronous="full" store, with the disk wait off the main thread when runs
// overlap.
//
// SQLite's own synchronous=FULL syncs the WAL inside each COMMIT, and better-sqlite3 makes
// the COMMIT a synchronous call: while one commit waits on the disk, no other run can
// prepare its records, and group commit only gathers what was ready before the wait. So the
// connection runs at synchronous=NORMAL (a commit writes its WAL frames to the OS, which
// keeps them through a crash of this process, and SQLite stays safe from corruption) and
// this file syncs the WAL itself before any write is answered: a write's promise resolves,
// and its hints go out, only once an fdatasync that began after its COMMIT has finished.
// That is the durability of FULL (the same fdatasync of the same file), answered later.
//
// One sync covers every commit made before it began, by any connection (the WAL is one
// file). How it runs adapts to the load:
// - inline (one run writing at a time): fdatasync on the main thread right after the
//   COMMIT, as FULL does; a thread hop per step would only add latency;
// - overlapped (several runs writing): on the thread pool, while the main thread goes on
//   preparing and committing other runs' records, which the next sync then covers.
// Every PROBE_EVERY-th inline commit is synced on the thread pool instead, to see whether
// other commits arrive meanwhile; a few calm overlapped syncs in a row go back to inline.
//
// What is new against FULL: another connection can read a commit before its sync ends.
// Only an OS crash or power loss in that window (one fdatasync) loses it, and then no write
// of this process was answered on it. A read that answers a run's end (getRun of a finished
// run) waits for a sync first (`syncNow`), so result() never returns an output that can
// still be lost.
//
// A failed fdatasync leaves the file's state on disk unknown (the kernel may drop the dirty
// pages it could not write), so the store stops: that write and every later one is refused
// with the error, as PostgreSQL stops on a failed fsync. Restarting the process reopens it.

import { closeSync, existsSync, fdatasync, fdatasyncSync, openSync } from "node:fs";

/** The file calls a WalSync makes; tests replace them. */
export interface SyncCalls {
  exists(path: string): boolean;
  open(path: string): number;
  syncNow(fd: number): void;
  syncLater(fd: number, done: (err: Error | null) => void): void;
  close(fd: number): void;
}

const nodeCalls: SyncCalls = {
  exists: (path) => existsSync(path),
  open: (path) => openSync(path, "r"),
  syncNow: (fd) => fdatasyncSync(fd),
  syncLater: (fd, done) => fdatasync(fd, done),
  close: (fd) => closeSync(fd),
};

/** How often an inline commit is synced on the thread pool to look for overlapping runs. */
const PROBE_EVERY = 32;
/** Overlapped syncs in a row with no commit during them before going back to inline. */
const CALM_TO_INLINE = 4;

interface Waiter {
  upTo: number;
  resolve: () => void;
  reject: (err: Error) => void;
}

export class WalSync {
  #fd: number | undefined;
  /** Commits made (and syncs asked for) on this connection, numbered from 1. */
  #asked = 0;
  /** Every commit numbered up to this is durable. */
  #durableUpTo = 0;
  #inFlight = false;
  #waiters: Waiter[] = [];
  #overlapped = false;
  #sinceProbe = 0;
  #calm = 0;
  #failure: Error | undefined;
  #closed = false;

  constructor(
    private readonly walPath: string,
    /** Turns a failed sync into the store's error (naming the file, saying what to do). */
    private readonly failureOf: (err: unknown) => Error,
    private readonly calls: SyncCalls = nodeCalls,
  ) {}

  /** Refuses writes once a sync failed. Call before a write transaction. */
  assertUsable(): void {
    if (this.#failure) throw this.#failure;
  }

  /** Called right after a write transaction committed. Answers undefined when the commit
   *  is already durable (synced inline), else a promise that resolves once it is. Throws
   *  (or rejects) when the sync failed. */
  committed(): Promise<void> | undefined {
    this.assertUsable();
    const upTo = ++this.#asked;
    if (!this.#overlapped && !this.#inFlight && ++this.#sinceProbe < PROBE_EVERY) {
      this.#syncInline();
      return undefined;
    }
    this.#sinceProbe = 0;
    return this.#waitFor(upTo);
  }

  /** Resolves once everything committed to the file before this call, by any connection,
   *  is durable: a sync that begins after the call. */
  syncNow(): Promise<void> {
    if (this.#failure) return Promise.reject(this.#failure);
    if (this.#fd === undefined && !this.calls.exists(this.walPath)) {
      // No WAL file: every commit is in the database file, synced by its checkpoint.
      return Promise.resolve();
    }
    const upTo = ++this.#asked;
    if (!this.#inFlight) {
      try {
        this.#syncInline();
      } catch (err) {
        return Promise.reject(err);
      }
      return Promise.resolve();
    }
    return this.#waitFor(upTo);
  }

  /** The connection closes: answers every waiting write now (one last inline sync) and
   *  closes the file once no sync uses it. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#answerWaitingInline();
    if (!this.#inFlight) this.#closeFile();
  }

  #answerWaitingInline(): void {
    if (this.#waiters.length === 0 || this.#failure) return;
    try {
      this.#syncInline();
    } catch {
      // #syncInline failed them all.
    }
  }

  #waitFor(upTo: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.#waiters.push({ upTo, resolve, reject });
      if (!this.#inFlight) this.#syncLater();
    });
  }

  #syncInline(): void {
    const upTo = this.#asked;
    try {
      this.calls.syncNow(this.#file());
    } catch (err) {
      throw this.#fail(err);
    }
    this.#settle(upTo);
  }

  #syncLater(): void {
    let fd: number;
    try {
      fd = this.#file();
    } catch (err) {
      this.#fail(err);
      return;
    }
    const upTo = this.#asked;
    this.#inFlight = true;
    this.calls.syncLater(fd, (err) => {
      this.#inFlight = false;
      if (err) {
        this.#fail(err);
        if (this.#closed) this.#closeFile();
        return;
      }
      const overlapping = this.#asked > upTo;
      this.#settle(upTo);
      if (overlapping) {
        this.#overlapped = true;
        this.#calm = 0;
      } else if (this.#overlapped && ++this.#calm >= CALM_TO_INLINE) {
        this.#overlapped = false;
        this.#calm = 0;
      }
      if (this.#closed) {
        // close() synced inline what was waiting then; anything left came after it.
        this.#answerWaitingInline();
        this.#closeFile();
      } else if (this.#waiters.length > 0) {
        this.#syncLater();
      }
    });
  }

  /** Answers every waiter whose commit the finished sync covered. */
  #settle(upTo: number): void {
    if (upTo > this.#durableUpTo) this.#durableUpTo = upTo;
    if (this.#waiters.length === 0) return;
    const still: Waiter[] = [];
    for (const w of this.#waiters) {
      if (w.upTo <= this.#durableUpTo) w.resolve();
      else still.push(w);
    }
    this.#waiters = still;
  }

  #fail(err: unknown): Error {
    const failure = this.#failure ?? this.failureOf(err);
    this.#failure = failure;
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w.reject(failure);
    return failure;
  }

  #file(): number {
    if (this.#fd === undefined) this.#fd = this.calls.open(this.walPath);
    return this.#fd;
  }

  #closeFile(): void {
    const fd = this.#fd;
    this.#fd = undefined;
    if (fd === undefined) return;
    try {
      this.calls.close(fd);
    } catch {
      // Closing a descriptor we only synced: nothing is lost if it fails.
    }
  }
}
