// The embedded Store: one SQLite file, zero setup. better-sqlite3 is synchronous, so each
// verb runs its transaction to completion before another starts in this process; other
// processes on the same file are serialised by SQLite's write lock.
//
// Every write transaction is BEGIN IMMEDIATE: it takes the write lock before reading, so
// it never has to upgrade a read snapshot to a write (the SQLITE_BUSY_SNAPSHOT trap of
// better-sqlite3 #1067). Waiting for the lock is the busy timeout's job; a BUSY that still
// escapes is retried a few times, then reported as a StoreError naming the file.
//
// Time is the Clock given to open(): leases, readyAt and stamps all use clock.now().

import { EventEmitter } from "node:events";
import type Database from "better-sqlite3";
import { CairnError, RunNotFoundError, StoreError } from "../../errors.js";
import { addAmounts } from "../../lib/amounts.js";
import type { Clock } from "../../lib/clock.js";
import {
  type Amounts,
  type CancelOutcome,
  type ClaimedRun,
  type EventRecord,
  type Journal,
  type NewEvent,
  type NewRun,
  type Release,
  type ReleaseOutcome,
  type ResumeOutcome,
  type RunFilter,
  type RunRecord,
  type RunWrite,
  type SendEventOutcome,
  type Store,
  type StoreHint,
  TERMINAL_STATUSES,
  unservedReason,
  type WorkerRecord,
  type WriteOutcome,
} from "../store.js";
import { isBusy, openDatabase, storeErrorFor } from "./connection.js";
import {
  applyWrite,
  type EncodedWrite,
  encodeWrite,
  insertRow,
  WriteConflict,
} from "./journal-writes.js";
import {
  type AttemptRow,
  amountsJson,
  attemptFromRow,
  attemptToRow,
  type EventRow,
  errorJson,
  eventFromRow,
  type IntentRow,
  intentFromRow,
  parseAmounts,
  type RunRow,
  runFromRow,
  type StepRow,
  stepFromRow,
  stepToRow,
  type WorkerRow,
  workerFromRow,
} from "./rows.js";

export interface SqliteStoreOptions {
  /** "full" (default) survives power loss; "normal" may lose the last commits on power loss. */
  synchronous?: "full" | "normal";
  /** How long a write waits for another connection's write lock (default 5000). */
  busyTimeoutMs?: number;
}

/** The SQLite Store, plus diagnostics that only make sense for a file. */
export interface SqliteStore extends Store {
  readonly path: string;
  /** Reads a PRAGMA on the store's own connection (e.g. "synchronous", "journal_mode"). */
  pragma(name: "synchronous" | "journal_mode" | "busy_timeout"): unknown;
}

const BUSY_RETRIES = 3;

const RUN_COLUMNS =
  "id, workflow, version, status, reason, paused_for, input, output, error, budget_limit, " +
  "budget_spent, parent_id, ready_at, wake_at, waiting_for, lease_owner, lease_until, epoch, " +
  "generation, cancel_requested, created_at, updated_at";

export function sqliteStore(path = ".cairn/cairn.db", options?: SqliteStoreOptions): SqliteStore {
  const synchronous = options?.synchronous ?? "full";
  const busyTimeoutMs = options?.busyTimeoutMs ?? 5_000;
  if (synchronous !== "full" && synchronous !== "normal") {
    throw new StoreError(`SQLite store "${path}": synchronous must be "full" or "normal".`);
  }
  if (!Number.isSafeInteger(busyTimeoutMs) || busyTimeoutMs < 0) {
    throw new StoreError(`SQLite store "${path}": busyTimeoutMs must be a whole number >= 0.`);
  }
  return new SqliteStoreImpl(path, { synchronous, busyTimeoutMs });
}

class SqliteStoreImpl implements SqliteStore {
  readonly description: string;
  private db: Database.Database | undefined;
  private clock: Clock | undefined;
  private openers = 0;
  private readonly statements = new Map<string, Database.Statement>();
  private readonly hints = new EventEmitter();

  constructor(
    readonly path: string,
    private readonly options: { synchronous: "full" | "normal"; busyTimeoutMs: number },
  ) {
    this.description = path;
    this.hints.setMaxListeners(0);
  }

  // ---- lifecycle ----

  async open(p: { clock: Clock }): Promise<void> {
    if (this.openers === 0) {
      this.db = openDatabase(this.path, this.options, p.clock.now());
      this.clock = p.clock;
      this.statements.clear();
    }
    this.openers += 1;
  }

  async close(): Promise<void> {
    if (this.openers === 0) return;
    this.openers -= 1;
    if (this.openers > 0) return;
    const db = this.db;
    this.db = undefined;
    this.statements.clear();
    try {
      db?.close();
    } catch (err) {
      throw storeErrorFor(this.path, "closing", err, this.options.busyTimeoutMs);
    }
  }

  pragma(name: "synchronous" | "journal_mode" | "busy_timeout"): unknown {
    return this.connection().pragma(name, { simple: true });
  }

  async now(): Promise<number> {
    return this.time();
  }

  // ---- runs ----

  async createRun(run: NewRun): Promise<{ run: RunRecord; created: boolean }> {
    return this.write("createRun", (now, hint) => {
      const created = this.insertRun(run, now, "{}");
      if (created) hint({ kind: "runnable", runId: run.id });
      return { run: this.mustGetRun(run.id), created };
    });
  }

  async getRun(id: string): Promise<RunRecord | undefined> {
    return this.read("getRun", () => this.findRun(id));
  }

  async listRuns(filter: RunFilter = {}): Promise<RunRecord[]> {
    return this.read("listRuns", () => {
      const where: string[] = [];
      const params: Array<string | number> = [];
      if (filter.status !== undefined) {
        if (Array.isArray(filter.status)) {
          if (filter.status.length === 0) return [];
          where.push("status IN (SELECT value FROM json_each(?))");
          params.push(JSON.stringify(filter.status));
        } else {
          where.push("status = ?");
          params.push(filter.status);
        }
      }
      if (filter.workflow !== undefined) {
        where.push("workflow = ?");
        params.push(filter.workflow);
      }
      if (filter.parentId !== undefined) {
        where.push("parent_id = ?");
        params.push(filter.parentId);
      }
      if (filter.before !== undefined) {
        where.push("(created_at < ? OR (created_at = ? AND id < ?))");
        params.push(filter.before.createdAt, filter.before.createdAt, filter.before.id);
      }
      params.push(filter.limit ?? -1);
      // Only fixed fragments are concatenated; every value is a bound parameter.
      const sql =
        `SELECT ${RUN_COLUMNS} FROM runs` +
        (where.length > 0 ? ` WHERE ${where.join(" AND ")}` : "") +
        " ORDER BY created_at DESC, id DESC LIMIT ?";
      return (this.stmt(sql).all(...params) as RunRow[]).map(runFromRow);
    });
  }

  // ---- execution ----

  async claimRuns(p: {
    workerId: string;
    workflows: string[];
    limit: number;
    leaseMs: number;
  }): Promise<ClaimedRun[]> {
    if (p.workflows.length === 0 || p.limit <= 0) return [];
    return this.write("claimRuns", (now) => {
      // A running run is claimable once readyAt (= leaseUntil) has passed: its lease expired.
      const candidates = this.stmt(
        `SELECT id, status FROM runs
         WHERE ready_at <= ?
           AND status IN ('pending', 'waiting', 'running', 'paused')
           AND (status <> 'paused' OR paused_for = 'version')
           AND (lease_owner IS NULL OR lease_owner <> ?)
           AND (workflow || '@' || version) IN (SELECT value FROM json_each(?))
         ORDER BY ready_at, id
         LIMIT ?`,
      ).all(now, p.workerId, JSON.stringify(p.workflows), p.limit) as Array<{
        id: string;
        status: string;
      }>;
      const leaseUntil = now + p.leaseMs;
      const claim = this.stmt(
        `UPDATE runs SET status = 'running', lease_owner = ?, lease_until = ?, ready_at = ?,
           epoch = epoch + 1, wake_at = NULL, waiting_for = '[]',
           reason = CASE WHEN status = 'paused' THEN NULL ELSE reason END, paused_for = NULL,
           updated_at = ?
         WHERE id = ?`,
      );
      return candidates.map((c) => {
        claim.run(p.workerId, leaseUntil, leaseUntil, now, c.id);
        return { run: this.mustGetRun(c.id), recovered: c.status === "running" };
      });
    });
  }

  async renewLeases(p: {
    workerId: string;
    runs: Array<{ runId: string; epoch: number }>;
    leaseMs: number;
  }): Promise<{ lost: string[]; cancelRequested: string[] }> {
    if (p.runs.length === 0) return { lost: [], cancelRequested: [] };
    return this.write("renewLeases", (now) => {
      const lost: string[] = [];
      const cancelRequested: string[] = [];
      const leaseUntil = now + p.leaseMs;
      for (const { runId, epoch } of p.runs) {
        const renewed = this.stmt(
          `UPDATE runs SET lease_until = ?, ready_at = ?
           WHERE id = ? AND epoch = ? AND status = 'running' AND lease_owner = ?
           RETURNING cancel_requested`,
        ).get(leaseUntil, leaseUntil, runId, epoch, p.workerId) as
          | { cancel_requested: number }
          | undefined;
        if (!renewed) lost.push(runId);
        else if (renewed.cancel_requested !== 0) cancelRequested.push(runId);
      }
      return { lost, cancelRequested };
    });
  }

  async appendRecords(writes: RunWrite[]): Promise<WriteOutcome[]> {
    if (writes.length === 0) return [];
    // Encode before the transaction: a bad record fails the call without holding the lock.
    const encoded = writes.map(encodeWrite);
    return this.write("appendRecords", (now) => {
      const db = this.connection();
      // Nested better-sqlite3 transactions are SAVEPOINTs: a conflict undoes its own write.
      const prepare = (sql: string) => this.stmt(sql);
      const applyOne = db.transaction((e: EncodedWrite) => applyWrite(prepare, e, now));
      return encoded.map((e): WriteOutcome => {
        const run = this.stmt("SELECT epoch FROM runs WHERE id = ?").get(e.w.runId) as
          | { epoch: number }
          | undefined;
        if (!run || run.epoch !== e.w.epoch) return { ok: false, reason: "lease-lost" };
        try {
          applyOne(e);
          return { ok: true };
        } catch (err) {
          if (err instanceof WriteConflict) return { ok: false, reason: "conflict", key: err.key };
          throw err;
        }
      });
    });
  }

  async releaseRun(r: Release): Promise<ReleaseOutcome> {
    return this.write("releaseRun", (now, hint): ReleaseOutcome => {
      const row = this.findRow(r.runId);
      if (!row || row.epoch !== r.epoch || row.status !== "running") {
        return { ok: false, reason: "lease-lost" };
      }
      for (const e of r.events ?? []) {
        const target = this.findRow(e.runId);
        // An event for a run that is gone or finished has no reader: sendEvent refuses it too.
        if (!target || TERMINAL_STATUSES.has(target.status)) continue;
        this.insertEvent(e, now);
        if (e.runId !== r.runId && this.wakeForEvent(e.runId, e.name, now)) {
          hint({ kind: "runnable", runId: e.runId });
        }
      }
      let status = r.status;
      let reason = r.reason ?? null;
      let readyAt = r.readyAt;
      let wakeAt = r.wakeAt ?? null;
      let waitingFor = r.waitingFor ?? [];
      let pausedFor = r.pausedFor ?? null;
      const cancelable = status === "pending" || status === "waiting" || status === "paused";
      if (cancelable && row.cancel_requested !== 0) {
        status = "canceled";
        reason = row.reason;
      }
      if (TERMINAL_STATUSES.has(status)) {
        readyAt = null;
        wakeAt = null;
        waitingFor = [];
        pausedFor = null;
      } else if (status === "waiting" && this.hasAwaitedEvent(r.runId, waitingFor)) {
        readyAt = readyAt === null ? now : Math.min(readyAt, now);
      }
      this.stmt(
        `UPDATE runs SET status = ?, reason = ?, paused_for = ?, output = ?, error = ?,
           ready_at = ?, wake_at = ?, waiting_for = ?, lease_owner = NULL, lease_until = NULL,
           updated_at = ?
         WHERE id = ?`,
      ).run(
        status,
        reason,
        pausedFor,
        r.output ?? null,
        r.error ? errorJson(r.error) : null,
        readyAt,
        wakeAt,
        JSON.stringify(waitingFor),
        now,
        r.runId,
      );
      if (TERMINAL_STATUSES.has(status)) hint({ kind: "finished", runId: r.runId });
      else if (readyAt !== null && readyAt <= now) hint({ kind: "runnable", runId: r.runId });
      return { ok: true, run: this.mustGetRun(r.runId) };
    });
  }

  async loadJournal(runId: string): Promise<Journal> {
    return this.read("loadJournal", () => ({
      steps: (
        this.stmt("SELECT * FROM steps WHERE run_id = ? ORDER BY seq").all(runId) as StepRow[]
      ).map(stepFromRow),
      attempts: (
        this.stmt("SELECT * FROM attempts WHERE run_id = ? ORDER BY generation, id").all(
          runId,
        ) as AttemptRow[]
      ).map(attemptFromRow),
      intents: (
        this.stmt("SELECT * FROM intents WHERE run_id = ? ORDER BY id").all(runId) as IntentRow[]
      ).map(intentFromRow),
      events: (
        this.stmt("SELECT * FROM events WHERE run_id = ? AND consumed_by IS NULL ORDER BY seq").all(
          runId,
        ) as EventRow[]
      ).map(eventFromRow),
    }));
  }

  // ---- events ----

  async sendEvent(e: NewEvent): Promise<SendEventOutcome> {
    return this.write("sendEvent", (now, hint): SendEventOutcome => {
      const row = this.findRow(e.runId);
      if (!row) return { ok: false, reason: "not-found" };
      if (TERMINAL_STATUSES.has(row.status)) {
        return { ok: false, reason: "finished", status: row.status };
      }
      const event = this.insertEvent(e, now);
      if (this.wakeForEvent(e.runId, e.name, now)) hint({ kind: "runnable", runId: e.runId });
      return { ok: true, event };
    });
  }

  // ---- control ----

  async requestCancel(runId: string, reason: string): Promise<CancelOutcome> {
    return this.write("requestCancel", (now, hint): CancelOutcome => {
      const row = this.findRow(runId);
      if (!row) return { state: "not-found" };
      if (row.status === "canceled") return { state: "canceled", run: runFromRow(row) };
      if (TERMINAL_STATUSES.has(row.status)) return { state: "finished", run: runFromRow(row) };
      if (row.status === "running") {
        // The first request's reason is the one the run ends with.
        this.stmt(
          `UPDATE runs SET cancel_requested = 1, reason = ?, updated_at = ?
           WHERE id = ? AND cancel_requested = 0`,
        ).run(reason, now, runId);
        hint({ kind: "cancel", runId });
        return { state: "requested", run: this.mustGetRun(runId) };
      }
      this.stmt(
        `UPDATE runs SET status = 'canceled', reason = ?, paused_for = NULL, ready_at = NULL,
           wake_at = NULL, waiting_for = '[]', lease_owner = NULL, lease_until = NULL,
           updated_at = ?
         WHERE id = ?`,
      ).run(reason, now, runId);
      hint({ kind: "finished", runId });
      return { state: "canceled", run: this.mustGetRun(runId) };
    });
  }

  async resumeRun(runId: string, p: { budgetLimit?: Amounts }): Promise<ResumeOutcome> {
    return this.write("resumeRun", (now, hint): ResumeOutcome => {
      const row = this.findRow(runId);
      if (!row) return { ok: false, reason: "not-found" };
      if (row.status !== "paused" && row.status !== "failed") {
        return { ok: false, reason: "status", run: runFromRow(row) };
      }
      const limit = { ...parseAmounts(row.budget_limit), ...(p.budgetLimit ?? {}) };
      this.stmt(
        `UPDATE runs SET status = 'pending', reason = NULL, paused_for = NULL, error = NULL,
           ready_at = ?, wake_at = NULL, waiting_for = '[]', cancel_requested = 0,
           generation = generation + ?, budget_limit = ?, updated_at = ?
         WHERE id = ?`,
      ).run(
        now,
        row.status === "failed" ? 1 : 0,
        amountsJson(limit, `Budget limit of run "${runId}"`),
        now,
        runId,
      );
      hint({ kind: "runnable", runId });
      return { ok: true, run: this.mustGetRun(runId) };
    });
  }

  async forkRun(p: { sourceId: string; run: NewRun; beforeSeq: number }): Promise<{
    run: RunRecord;
    created: boolean;
  }> {
    return this.write("forkRun", (now, hint) => {
      const existing = this.findRun(p.run.id);
      if (existing) return { run: existing, created: false };
      const source = this.findRow(p.sourceId);
      if (!source) {
        throw new RunNotFoundError(
          `Cannot fork run "${p.sourceId}" into "${p.run.id}": run "${p.sourceId}" does not exist.`,
        );
      }
      const steps = this.stmt("SELECT * FROM steps WHERE run_id = ? AND seq < ? ORDER BY seq").all(
        p.sourceId,
        p.beforeSeq,
      ) as StepRow[];
      const keys = new Set(steps.map((s) => s.key));
      const attempts = (
        this.stmt("SELECT * FROM attempts WHERE run_id = ? AND generation = ? ORDER BY id").all(
          p.sourceId,
          source.generation,
        ) as AttemptRow[]
      ).filter((a) => keys.has(a.key));
      const spent: Amounts = {};
      for (const r of [...steps, ...attempts]) addAmounts(spent, parseAmounts(r.spend));
      this.insertRun(p.run, now, amountsJson(spent, `Budget spent of run "${p.run.id}"`));
      const forked = this.mustGetRun(p.run.id);
      const prepare = (sql: string) => this.stmt(sql);
      for (const s of steps) {
        insertRow(prepare, "steps", stepToRow({ ...stepFromRow(s), runId: p.run.id }));
      }
      for (const a of attempts) {
        const copy = { ...attemptFromRow(a), runId: p.run.id, generation: forked.generation };
        insertRow(prepare, "attempts", attemptToRow(copy));
      }
      hint({ kind: "runnable", runId: p.run.id });
      return { run: forked, created: true };
    });
  }

  async markUnserved(p: { served: string[]; graceMs: number }): Promise<number> {
    return this.write("markUnserved", (now) => {
      const served = new Set(p.served);
      // A running run is ready here only when its lease expired (readyAt = leaseUntil):
      // its worker is gone, and no live worker can take it over.
      const ready = this.stmt(
        `SELECT id, workflow, version, cancel_requested FROM runs
         WHERE ready_at <= ? AND status IN ('pending', 'waiting', 'running')`,
      ).all(now - p.graceMs) as Array<{
        id: string;
        workflow: string;
        version: string;
        cancel_requested: number;
      }>;
      let marked = 0;
      for (const r of ready) {
        const ref = `${r.workflow}@${r.version}`;
        if (served.has(ref)) continue;
        if (r.cancel_requested) {
          this.stmt(
            `UPDATE runs SET status = 'canceled', paused_for = NULL, ready_at = NULL,
               epoch = epoch + 1, lease_owner = NULL, lease_until = NULL, updated_at = ?
             WHERE id = ?`,
          ).run(now, r.id);
        } else {
          // readyAt is kept: a worker that serves the version later claims the run as it
          // is. The epoch moves on so a lost worker that comes back can write nothing.
          this.stmt(
            `UPDATE runs SET status = 'paused', paused_for = 'version', reason = ?,
               epoch = CASE WHEN status = 'running' THEN epoch + 1 ELSE epoch END,
               lease_owner = NULL, lease_until = NULL, updated_at = ?
             WHERE id = ?`,
          ).run(unservedReason(ref), now, r.id);
        }
        marked += 1;
      }
      return marked;
    });
  }

  // ---- workers ----

  async registerWorker(w: Omit<WorkerRecord, "startedAt" | "heartbeatAt">): Promise<void> {
    await this.write("registerWorker", (now) => {
      this.stmt(
        `INSERT INTO workers (id, host, pid, workflows, started_at, heartbeat_at)
         VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
           workflows = excluded.workflows, started_at = excluded.started_at,
           heartbeat_at = excluded.heartbeat_at`,
      ).run(w.id, w.host, w.pid, JSON.stringify(w.workflows), now, now);
    });
  }

  async heartbeatWorker(id: string): Promise<void> {
    await this.write("heartbeatWorker", (now) => {
      this.stmt("UPDATE workers SET heartbeat_at = ? WHERE id = ?").run(now, id);
    });
  }

  async removeWorker(id: string): Promise<void> {
    await this.write("removeWorker", (now, hint) => {
      this.stmt("DELETE FROM workers WHERE id = ?").run(id);
      // Expire the leases now: the runs become claimable, and a claim reports them recovered.
      const freed = this.stmt(
        `UPDATE runs SET ready_at = ?, lease_until = ?, updated_at = ?
         WHERE lease_owner = ? AND status = 'running'`,
      ).run(now, now, now, id);
      if (freed.changes > 0) hint({ kind: "runnable" });
    });
  }

  async listWorkers(): Promise<WorkerRecord[]> {
    return this.read("listWorkers", () =>
      (this.stmt("SELECT * FROM workers ORDER BY id").all() as WorkerRow[]).map(workerFromRow),
    );
  }

  // ---- hints ----

  subscribe(listener: (hint: StoreHint) => void): () => void {
    const guarded = (hint: StoreHint) => {
      try {
        listener(hint);
      } catch (err) {
        // Hints are advice about a write that already committed; a failing listener must
        // neither fail that write nor starve the other listeners.
        process.emitWarning(`cairn: a store hint listener threw: ${String(err)}`);
      }
    };
    this.hints.on("hint", guarded);
    return () => {
      this.hints.off("hint", guarded);
    };
  }

  // ---- internals ----

  private connection(): Database.Database {
    if (!this.db) {
      throw new StoreError(`SQLite store "${this.path}" is not open; call open() first.`);
    }
    return this.db;
  }

  private time(): number {
    if (!this.clock) {
      throw new StoreError(`SQLite store "${this.path}" is not open; call open() first.`);
    }
    return this.clock.now();
  }

  /** Prepared statements are cached by their SQL text, which is always a fixed template. */
  private stmt(sql: string): Database.Statement {
    let s = this.statements.get(sql);
    if (!s) {
      s = this.connection().prepare(sql);
      this.statements.set(sql, s);
    }
    return s;
  }

  /** Runs `fn` in one BEGIN IMMEDIATE transaction; hints are emitted after it commits. */
  private async write<T>(
    verb: string,
    fn: (now: number, hint: (h: StoreHint) => void) => T,
  ): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const hints: StoreHint[] = [];
      try {
        const db = this.connection();
        const now = this.time();
        const result = db.transaction(() => fn(now, (h) => hints.push(h))).immediate();
        for (const h of hints) this.hints.emit("hint", h);
        return result;
      } catch (err) {
        if (isBusy(err) && attempt <= BUSY_RETRIES) {
          await jitteredPause(attempt);
          continue;
        }
        if (err instanceof CairnError) throw err;
        throw storeErrorFor(this.path, verb, err, this.options.busyTimeoutMs);
      }
    }
  }

  /** Reads in one deferred transaction: one consistent snapshot, no write lock. */
  private async read<T>(verb: string, fn: () => T): Promise<T> {
    try {
      return this.connection().transaction(fn).deferred();
    } catch (err) {
      if (err instanceof CairnError) throw err;
      throw storeErrorFor(this.path, verb, err, this.options.busyTimeoutMs);
    }
  }

  private findRow(id: string): RunRow | undefined {
    return this.stmt(`SELECT ${RUN_COLUMNS} FROM runs WHERE id = ?`).get(id) as RunRow | undefined;
  }

  private findRun(id: string): RunRecord | undefined {
    const row = this.findRow(id);
    return row ? runFromRow(row) : undefined;
  }

  private mustGetRun(id: string): RunRecord {
    const run = this.findRun(id);
    if (!run) throw new StoreError(`SQLite store "${this.path}": run "${id}" vanished mid-write.`);
    return run;
  }

  /** Inserts a pending run, ready now; false if the id exists (then nothing changes). */
  private insertRun(run: NewRun, now: number, budgetSpent: string): boolean {
    const limit = amountsJson(run.budgetLimit, `Budget limit of run "${run.id}"`);
    const inserted = this.stmt(
      `INSERT INTO runs (${RUN_COLUMNS}) VALUES
         (?, ?, ?, 'pending', NULL, NULL, ?, NULL, NULL, ?, ?, ?, ?, NULL, '[]', NULL, NULL,
          0, 0, 0, ?, ?)
       ON CONFLICT (id) DO NOTHING`,
    ).run(
      run.id,
      run.workflow,
      run.version,
      run.input,
      limit,
      budgetSpent,
      run.parentId ?? null,
      now,
      now,
      now,
    );
    return inserted.changes === 1;
  }

  private insertEvent(e: NewEvent, now: number): EventRecord {
    const row = this.stmt(
      `INSERT INTO events (run_id, name, payload, created_at, consumed_by)
       VALUES (?, ?, ?, ?, NULL) RETURNING *`,
    ).get(e.runId, e.name, e.payload, now) as EventRow;
    return eventFromRow(row);
  }

  /** A waiting run that waits for `name` becomes ready now (an earlier timer is kept). */
  private wakeForEvent(runId: string, name: string, now: number): boolean {
    const woke = this.stmt(
      `UPDATE runs SET ready_at = CASE WHEN ready_at IS NULL OR ready_at > ? THEN ? ELSE ready_at END,
         updated_at = ?
       WHERE id = ? AND status = 'waiting'
         AND EXISTS (SELECT 1 FROM json_each(runs.waiting_for) WHERE value = ?)`,
    ).run(now, now, now, runId, name);
    return woke.changes > 0;
  }

  private hasAwaitedEvent(runId: string, names: string[]): boolean {
    if (names.length === 0) return false;
    return (
      this.stmt(
        `SELECT 1 FROM events WHERE run_id = ? AND consumed_by IS NULL
           AND name IN (SELECT value FROM json_each(?)) LIMIT 1`,
      ).get(runId, JSON.stringify(names)) !== undefined
    );
  }
}

/** Backoff between retries of a transaction that hit BUSY despite the busy timeout. Real
 *  time on purpose: it paces contention between processes, not logical time. */
function jitteredPause(attempt: number): Promise<void> {
  const ms = 10 * 2 ** attempt * (0.5 + Math.random());
  return new Promise((resolve) => setTimeout(resolve, ms));
}
