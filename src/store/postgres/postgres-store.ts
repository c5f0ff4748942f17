// The PostgreSQL Store: any number of worker processes on any number of machines against
// one database (DESIGN.md, Scale-out). Claims use FOR UPDATE SKIP LOCKED, every journal
// write and release is fenced by the run's epoch under its row lock, time is the
// database's clock, and wake-ups travel by LISTEN/NOTIFY with polling as the truth.
//
// Retry policy per verb when the connection fails (see connection.ts for the mechanism).
// A failure before COMMIT is always retried: the server rolled the transaction back.
// A failure during COMMIT (outcome unknown) is retried only where a repeat is harmless:
// - reads (now, getRun, listRuns, loadJournal, listWorkers): trivially.
// - createRun: idempotent on id; a repeat of a create that did commit answers
//   created=false with the run it made (the same run the caller asked for).
// - claimRuns: fenced; a claim that committed but whose answer was lost leaves runs leased
//   to this worker, which never re-claims its own runs: they are recovered by another
//   worker when the lease expires (one lease of delay, never a double execution).
// - renewLeases, heartbeatWorker, registerWorker, removeWorker, markUnserved: idempotent.
// - appendRecords: idempotent by construction (journal-writes.ts).
// - releaseRun, resumeRun: detect their own earlier commit (run-control.ts).
// - requestCancel: idempotent (a repeat finds it canceled or already requested).
// - sendEvent, forkRun: NOT retried after an unknown commit (a second event would be
//   stored; a fork would answer created=false): a StoreError says the outcome is unknown.

import pg from "pg";
import { StoreError } from "../../errors.js";
import type { Clock } from "../../lib/clock.js";
import type {
  Amounts,
  CancelOutcome,
  ClaimedRun,
  Journal,
  NewEvent,
  NewRun,
  Release,
  ReleaseOutcome,
  ResumeOutcome,
  RunFilter,
  RunRecord,
  RunWrite,
  SendEventOutcome,
  Store,
  StoreHint,
  WorkerRecord,
  WriteOutcome,
} from "../store.js";
import { Database, IDLE_IN_TRANSACTION_TIMEOUT_MS, STATEMENT_TIMEOUT_MS } from "./connection.js";
import { appendRecords, loadJournal } from "./journal-writes.js";
import { migrate } from "./migrations.js";
import { channelFor, HintListener } from "./notify.js";
import { type RunRow, toRun, toWorker, type WorkerRow } from "./rows.js";
import {
  forkRun,
  markUnserved,
  releaseRun,
  requestCancel,
  resumeRun,
  sendEvent,
} from "./run-control.js";
import {
  hintPayload,
  insertRunSql,
  nowSql,
  publish,
  SCHEMA_NAME,
  type StoreContext,
  tablesIn,
} from "./sql.js";

export interface PostgresStoreOptions {
  /** Schema holding every table (created on first open). Default "cairn". */
  schema?: string;
  /** Connections in the pool the store creates from a URL. Default 10. Ignored for a pool. */
  poolSize?: number;
}

export function postgresStore(
  urlOrPool: string | pg.Pool,
  options: PostgresStoreOptions = {},
): Store {
  const schema = options.schema ?? "cairn";
  if (!SCHEMA_NAME.test(schema)) {
    throw new StoreError(
      `Invalid PostgreSQL schema name ${JSON.stringify(schema.slice(0, 80))}: use lowercase ` +
        "letters, digits and underscores, starting with a letter or underscore, at most 63 " +
        'characters (e.g. "cairn").',
    );
  }
  return new PostgresStore(urlOrPool, schema, options.poolSize ?? 10);
}

/** "host:port/database, schema "x"": for messages. Never includes credentials. */
function describe(urlOrPool: string | pg.Pool, schema: string): string {
  let where = "database";
  try {
    if (typeof urlOrPool === "string") {
      const u = new URL(urlOrPool);
      where = `${u.host}${u.pathname}`;
    } else {
      const o = urlOrPool.options;
      if (o.connectionString) {
        const u = new URL(o.connectionString);
        where = `${u.host}${u.pathname}`;
      } else {
        where = `${o.host ?? "localhost"}:${o.port ?? 5432}/${o.database ?? ""}`;
      }
    }
  } catch {
    // An unparsable URL: pg reports it on connect; keep the message generic here.
  }
  return `${where}, schema "${schema}"`;
}

class PostgresStore implements Store {
  readonly description: string;
  readonly #source: string | pg.Pool;
  readonly #schema: string;
  readonly #poolSize: number;
  readonly #ctx: StoreContext;
  #db: Database | undefined;
  #pool: pg.Pool | undefined;
  #clock: Clock | undefined;
  #opens = 0;
  #opening: Promise<void> | undefined;
  #listener: HintListener | undefined;

  constructor(source: string | pg.Pool, schema: string, poolSize: number) {
    this.#source = source;
    this.#schema = schema;
    this.#poolSize = poolSize;
    this.description = describe(source, schema);
    const database = () => this.#database();
    this.#ctx = {
      get db() {
        return database();
      },
      t: tablesIn(schema),
      offset: () => this.#offset(),
      channel: channelFor(schema),
    };
  }

  // ---- lifecycle ----

  async open(options: { clock: Clock }): Promise<void> {
    if (this.#opens === 0) {
      this.#clock = options.clock;
      this.#opening = this.#start();
    }
    this.#opens++;
    try {
      await this.#opening;
    } catch (err) {
      await this.close();
      throw err;
    }
  }

  async close(): Promise<void> {
    if (this.#opens > 0) {
      this.#opens--;
      if (this.#opens > 0) return;
      const opening = this.#opening;
      this.#opening = undefined;
      await opening?.catch(() => {});
    }
    await this.#stop();
  }

  async #start(): Promise<void> {
    let pool: pg.Pool;
    const owned = typeof this.#source === "string";
    if (typeof this.#source === "string") {
      pool = new pg.Pool({
        connectionString: this.#source,
        max: this.#poolSize,
        statement_timeout: STATEMENT_TIMEOUT_MS,
        idle_in_transaction_session_timeout: IDLE_IN_TRANSACTION_TIMEOUT_MS,
        connectionTimeoutMillis: 10_000,
        keepAlive: true,
        application_name: "cairn",
      });
    } else {
      pool = this.#source;
    }
    // An idle pooled client whose backend is terminated emits 'error' on the pool; without
    // a listener Node would crash the process. The pool drops that client by itself.
    pool.on("error", ignorePoolError);
    this.#pool = pool;
    const db = new Database(pool, this.description, owned);
    this.#db = db;
    try {
      await migrate(db, this.#schema, this.#ctx.t, this.description);
    } catch (err) {
      if (err instanceof StoreError) throw err;
      throw new StoreError(`Cannot open PostgreSQL (${this.description}): ${String(err)}`, {
        cause: err,
      });
    }
  }

  async #stop(): Promise<void> {
    const listener = this.#listener;
    this.#listener = undefined;
    await listener?.close();
    const pool = this.#pool;
    this.#pool = undefined;
    this.#db = undefined;
    if (!pool) return;
    if (pool === this.#source) {
      pool.removeListener("error", ignorePoolError);
    } else {
      await pool.end().catch(() => {});
      pool.removeListener("error", ignorePoolError);
    }
  }

  #database(): Database {
    if (!this.#db || this.#opens === 0) {
      throw new StoreError(
        `The PostgreSQL store (${this.description}) is not open: call open() before using it.`,
      );
    }
    return this.#db;
  }

  #offset(): number {
    return this.#clock ? offsetOf(this.#clock) : 0;
  }

  async now(): Promise<number> {
    const r = await this.#ctx.db.statement<{ now: string }>(
      "now",
      "idempotent",
      `SELECT ${nowSql(1)} AS now`,
      [this.#offset()],
    );
    return Number(r.rows[0]?.now);
  }

  // ---- runs ----

  async createRun(run: NewRun): Promise<{ run: RunRecord; created: boolean }> {
    const { db, t, channel } = this.#ctx;
    // One statement: the hint is queued by the insert itself, so it is sent iff the run
    // was created, and only when that commits.
    const ins = await db.statement<RunRow>(
      "createRun",
      "idempotent",
      `WITH ins AS (${insertRunSql(t)})
        SELECT ins.*, pg_notify($8, $9) AS notified FROM ins`,
      [
        this.#offset(),
        run.id,
        run.workflow,
        run.version,
        run.input,
        JSON.stringify(run.budgetLimit ?? {}),
        run.parentId ?? null,
        channel,
        hintPayload({ kind: "runnable", runId: run.id }),
      ],
    );
    const created = ins.rows[0];
    if (created) return { run: toRun(created), created: true };
    const existing = await this.getRun(run.id);
    if (!existing) {
      throw new StoreError(
        `createRun: run "${run.id}" exists per its id's unique key but could not be read ` +
          `back from PostgreSQL (${this.description}); it was probably deleted meanwhile. Retry.`,
      );
    }
    return { run: existing, created: false };
  }

  async getRun(id: string): Promise<RunRecord | undefined> {
    const { db, t } = this.#ctx;
    const r = await db.statement<RunRow>(
      "getRun",
      "idempotent",
      `SELECT * FROM ${t.runs} WHERE id = $1`,
      [id],
    );
    const row = r.rows[0];
    return row ? toRun(row) : undefined;
  }

  async listRuns(filter: RunFilter = {}): Promise<RunRecord[]> {
    const { db, t } = this.#ctx;
    const where: string[] = [];
    const params: unknown[] = [];
    const param = (v: unknown): string => {
      params.push(v);
      return `$${params.length}`;
    };
    if (filter.status !== undefined) {
      const statuses = Array.isArray(filter.status) ? filter.status : [filter.status];
      where.push(`status = ANY(${param(statuses)}::text[])`);
    }
    if (filter.workflow !== undefined) where.push(`workflow = ${param(filter.workflow)}`);
    if (filter.parentId !== undefined) where.push(`parent_id = ${param(filter.parentId)}`);
    if (filter.before !== undefined) {
      where.push(
        `(created_at, id) < (${param(Math.round(filter.before.createdAt))}::bigint, ${param(filter.before.id)}::text)`,
      );
    }
    let sql = `SELECT * FROM ${t.runs}`;
    if (where.length > 0) sql += ` WHERE ${where.join(" AND ")}`;
    sql += " ORDER BY created_at DESC, id DESC";
    if (filter.limit !== undefined) sql += ` LIMIT ${param(Math.max(0, Math.floor(filter.limit)))}`;
    const r = await db.statement<RunRow>("listRuns", "idempotent", sql, params);
    return r.rows.map(toRun);
  }

  // ---- execution ----

  async claimRuns(p: {
    workerId: string;
    workflows: string[];
    limit: number;
    leaseMs: number;
  }): Promise<ClaimedRun[]> {
    if (p.limit <= 0 || p.workflows.length === 0) return [];
    const { db, t } = this.#ctx;
    // SKIP LOCKED: concurrent claimers each take different rows and never wait on each
    // other; a row changed meanwhile is re-checked against the WHERE under its lock.
    // The epoch increments under the same lock every fenced write takes.
    const r = await db.statement<RunRow & { old_status: string }>(
      "claimRuns",
      "idempotent",
      `WITH c AS (SELECT ${nowSql(1)} AS now),
        cand AS (
          SELECT r.id, r.status AS old_status FROM ${t.runs} r, c
          WHERE r.ready_at <= c.now
            AND r.status IN ('pending', 'waiting', 'running', 'paused')
            AND (r.status <> 'paused' OR r.paused_for = 'version')
            AND (r.workflow || '@' || r.version) = ANY($3::text[])
            AND r.lease_owner IS DISTINCT FROM $2
          ORDER BY r.ready_at, r.id
          LIMIT $4
          FOR UPDATE OF r SKIP LOCKED
        )
      UPDATE ${t.runs} r SET
          status = 'running', lease_owner = $2,
          lease_until = c.now + $5::bigint, ready_at = c.now + $5::bigint,
          epoch = r.epoch + 1,
          reason = CASE WHEN r.cancel_requested THEN r.reason ELSE NULL END,
          paused_for = NULL, wake_at = NULL, waiting_for = '{}', updated_at = c.now
        FROM cand, c
        WHERE r.id = cand.id
        RETURNING r.*, cand.old_status`,
      [this.#offset(), p.workerId, p.workflows, Math.floor(p.limit), Math.round(p.leaseMs)],
    );
    return r.rows.map((row) => ({ run: toRun(row), recovered: row.old_status === "running" }));
  }

  async renewLeases(p: {
    workerId: string;
    runs: Array<{ runId: string; epoch: number }>;
    leaseMs: number;
  }): Promise<{ lost: string[]; cancelRequested: string[] }> {
    if (p.runs.length === 0) return { lost: [], cancelRequested: [] };
    const { db, t } = this.#ctx;
    // Locks taken in id order, as removeWorker does, so the two never deadlock.
    const r = await db.statement<{ id: string; cancel_requested: boolean }>(
      "renewLeases",
      "idempotent",
      `WITH c AS (SELECT ${nowSql(1)} AS now),
        l AS (
          SELECT r.id FROM ${t.runs} r
          JOIN unnest($2::text[], $3::bigint[]) AS u(id, epoch)
            ON r.id = u.id AND r.epoch = u.epoch
          WHERE r.status = 'running' AND r.lease_owner = $4
          ORDER BY r.id
          FOR NO KEY UPDATE OF r
        )
      UPDATE ${t.runs} r SET lease_until = c.now + $5::bigint, ready_at = c.now + $5::bigint
        FROM l, c WHERE r.id = l.id
        RETURNING r.id, r.cancel_requested`,
      [
        this.#offset(),
        p.runs.map((x) => x.runId),
        p.runs.map((x) => x.epoch),
        p.workerId,
        Math.round(p.leaseMs),
      ],
    );
    const held = new Set(r.rows.map((row) => row.id));
    return {
      lost: p.runs.filter((x) => !held.has(x.runId)).map((x) => x.runId),
      cancelRequested: r.rows.filter((row) => row.cancel_requested).map((row) => row.id),
    };
  }

  appendRecords(writes: RunWrite[]): Promise<WriteOutcome[]> {
    return appendRecords(this.#ctx, writes);
  }

  releaseRun(r: Release): Promise<ReleaseOutcome> {
    return releaseRun(this.#ctx, r);
  }

  loadJournal(runId: string): Promise<Journal> {
    return loadJournal(this.#ctx, runId);
  }

  // ---- events and control ----

  sendEvent(e: NewEvent): Promise<SendEventOutcome> {
    return sendEvent(this.#ctx, e);
  }

  requestCancel(runId: string, reason: string): Promise<CancelOutcome> {
    return requestCancel(this.#ctx, runId, reason);
  }

  resumeRun(runId: string, p: { budgetLimit?: Amounts }): Promise<ResumeOutcome> {
    return resumeRun(this.#ctx, runId, p);
  }

  forkRun(p: {
    sourceId: string;
    run: NewRun;
    beforeSeq: number;
  }): Promise<{ run: RunRecord; created: boolean }> {
    return forkRun(this.#ctx, p);
  }

  markUnserved(p: { served: string[]; graceMs: number }): Promise<number> {
    return markUnserved(this.#ctx, p);
  }

  // ---- workers ----

  async registerWorker(w: Omit<WorkerRecord, "startedAt" | "heartbeatAt">): Promise<void> {
    const { db, t } = this.#ctx;
    await db.statement(
      "registerWorker",
      "idempotent",
      `INSERT INTO ${t.workers} (id, host, pid, workflows, started_at, heartbeat_at)
        SELECT $2, $3, $4, $5::text[], c.now, c.now FROM (SELECT ${nowSql(1)} AS now) c
        ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid,
          workflows = EXCLUDED.workflows, started_at = EXCLUDED.started_at,
          heartbeat_at = EXCLUDED.heartbeat_at`,
      [this.#offset(), w.id, w.host, w.pid, w.workflows],
    );
  }

  async heartbeatWorker(id: string): Promise<void> {
    const { db, t } = this.#ctx;
    await db.statement(
      "heartbeatWorker",
      "idempotent",
      `UPDATE ${t.workers} SET heartbeat_at = ${nowSql(1)} WHERE id = $2`,
      [this.#offset(), id],
    );
  }

  async removeWorker(id: string): Promise<void> {
    const { db, t, channel } = this.#ctx;
    await db.transaction("removeWorker", "idempotent", async (tx) => {
      await tx.query(`DELETE FROM ${t.workers} WHERE id = $1`, [id]);
      // Its runs become claimable now (lease_until moves with ready_at, as for any running
      // run). The epoch is left alone: the next claim increments it, fencing the worker out
      // should it still be alive.
      const r = await tx.query(
        `WITH c AS (SELECT ${nowSql(1)} AS now),
          l AS (
            SELECT id FROM ${t.runs} WHERE lease_owner = $2 AND status = 'running'
            ORDER BY id FOR NO KEY UPDATE
          )
        UPDATE ${t.runs} r SET ready_at = c.now, lease_until = c.now, updated_at = c.now
          FROM l, c WHERE r.id = l.id`,
        [this.#offset(), id],
      );
      if ((r.rowCount ?? 0) > 0) {
        await publish(tx, channel, [{ kind: "runnable" }]);
      }
    });
  }

  async listWorkers(): Promise<WorkerRecord[]> {
    const { db, t } = this.#ctx;
    const r = await db.statement<WorkerRow>(
      "listWorkers",
      "idempotent",
      `SELECT * FROM ${t.workers} ORDER BY id`,
    );
    return r.rows.map(toWorker);
  }

  // ---- hints ----

  subscribe(listener: (hint: StoreHint) => void): () => void {
    if (!this.#listener) {
      const config: pg.ClientConfig =
        typeof this.#source === "string"
          ? { connectionString: this.#source, application_name: "cairn-listen" }
          : { ...this.#source.options };
      this.#listener = new HintListener(config, this.#ctx.channel);
    }
    return this.#listener.add(listener);
  }
}

/** The last offset computed per clock, with the clock reading it was computed at. */
const offsets = new WeakMap<Clock, { reading: number; offset: number }>();

/**
 * clock.now() - Date.now(): 0 for the real clock; moves the database's time for a virtual
 * one. Taken at each call so that moving a virtual clock takes effect at once, but reused
 * while the clock reads the same: otherwise, with a stopped virtual clock, the store's now
 * (database time at execution + offset taken at the call) would jitter by the varying
 * latency between the two readings and could step BACK a millisecond, so a run created
 * "now" would not yet be claimable "now". Reused, it advances with the database clock,
 * monotonic, within the real time a test takes of the virtual clock. Shared per clock
 * object, so stores sharing a clock agree.
 */
function offsetOf(clock: Clock): number {
  const reading = clock.now();
  const last = offsets.get(clock);
  if (last && last.reading === reading) return last.offset;
  const offset = Math.round(reading - Date.now());
  offsets.set(clock, { reading, offset });
  return offset;
}

function ignorePoolError(): void {
  // Only connection losses are expected here; the pool has already discarded the client
  // and the next verb opens a new connection (and retries if the server is still away).
}
