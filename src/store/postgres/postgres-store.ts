// The PostgreSQL Store: any number of worker processes on any number of machines against
// one database (runs are independent, so every query is keyed by run id). Claims use FOR UPDATE SKIP LOCKED, every journal
// write and release is fenced by the run's epoch under its row lock, time is the
// database's clock, and wake-ups travel by LISTEN/NOTIFY with polling as the truth.
//
// Retry policy per verb when the connection fails (see connection.ts for the mechanism).
// A failure before COMMIT is always retried: the server rolled the transaction back.
// A failure during COMMIT (outcome unknown) is retried only where a repeat is harmless:
// - reads (now, getRun, listRuns, loadJournal, listEvents, listWorkers): trivially.
// - createRun: idempotent on id; a repeat of a create that did commit finds the run by the
//   token it wrote (create_token, which a claim does not overwrite) and answers
//   created=true, as the lost try would have (runs.ts).
// - claimRuns: a retry first looks for the runs its lost try claimed (by a token of the
//   call) and returns those; otherwise they would stay leased to this worker, which never
//   claims its own runs again (leases.ts).
// - renewLeases, expireLease, heartbeatWorker, registerWorker, removeWorker, markUnserved: idempotent.
// - appendRecords: idempotent by construction (journal-writes.ts).
// - releaseRun, resumeRun: detect their own earlier commit (run-control.ts).
// - requestCancel: idempotent (a repeat finds it canceled or already requested).
// - sendEvent, forkRun, appendStream: a repeat would store a second event or the chunks
//   twice, or answer a fork created=false; each writes a token of its call with its rows
//   (send_token, create_token, append_token), and a retry first looks for its own
//   (run-control.ts, ai-state.ts).

import pg from "pg";
import { runNotFound, StoreError } from "../../errors.js";
import type { Clock } from "../../lib/clock.js";
import { describeArgument } from "../../lib/text.js";
import { settlesWithin } from "../../lib/timers.js";
import type {
  AnswerApprovalOutcome,
  ApprovalRecord,
  ApprovalVerbs,
  RequestApprovalOutcome,
} from "../approval-records.js";
import { readCancelReason, runsNamedAsChildren } from "../cancel-texts.js";
import { checkEventHeadsPage, checkPageArguments, journalEvents } from "../journal-page.js";
import {
  PlainPayloadGuard,
  plainInApprovalAnswer,
  plainInApprovalRequest,
  plainInCancel,
  plainInEvents,
  plainInNewRun,
  plainInObjects,
  plainInReleaseOf,
  plainInStream,
  plainInWrites,
} from "../plain-payloads.js";
import type {
  AcquireRateOutcome,
  AppendStreamOutcome,
  CancelOutcome,
  ClaimedRun,
  EventHead,
  EventHeadsPage,
  EventPayload,
  EventRecord,
  Journal,
  JournalPage,
  LoadJournalOptions,
  NewEvent,
  NewRun,
  PendingEventsOptions,
  RateLimits,
  Release,
  ReleaseOutcome,
  RenewLeases,
  ResumeOptions,
  ResumeOutcome,
  RunFilter,
  RunRecord,
  RunWrite,
  SendEventOutcome,
  Store,
  StoreHint,
  StreamChunk,
  WorkerRecord,
  WriteOutcome,
} from "../store.js";
import {
  childrenOfCanceledProblem,
  claimRunsProblem,
  createRunProblem,
  listRunsProblem,
  readStreamProblem,
  releaseProblem,
} from "../verb-arguments.js";
import type {
  DeleteRunOutcome,
  DeleteRunsOptions,
  DeleteRunsOutcome,
  PutWorkspaceOutcome,
  WorkspaceObject,
  WorkspaceVerbs,
} from "../workspace-records.js";
import { checkDeleteRunsIds } from "../workspace-records.js";
import * as aiState from "./ai-state.js";
import * as approvals from "./approvals.js";
import { listChildrenOfCanceled } from "./children-of-canceled.js";
import {
  Database,
  dropSocket,
  IDLE_IN_TRANSACTION_TIMEOUT_MS,
  STATEMENT_TIMEOUT_MS,
} from "./connection.js";
import { pendingEventHeadsOfNames } from "./event-heads-of-names.js";
import { loadJournal } from "./journal-load.js";
import { readEvents, readJournalPage } from "./journal-pages.js";
import {
  appendRecords,
  eventPayloads,
  pendingEventHeads,
  pendingEventHeadsNamed,
  pendingEvents,
} from "./journal-writes.js";
import { claimRuns, expireLease, renewLeases } from "./leases.js";
import { migrate } from "./migrate.js";
import { channelFor, HintListener } from "./notify.js";
import type { GuardBuild } from "./plain-triggers.js";
import {
  forkRun,
  hasNoEvents,
  markUnserved,
  releaseGroup,
  releaseRun,
  requestCancel,
  resumeRun,
  sendEvent,
} from "./run-control.js";
import { createGroup, getRun, listEvents, listRuns } from "./runs.js";
import { clockParamOf, nowSql, type StoreContext, schemaNameProblem, tablesIn } from "./sql.js";
import {
  isMarkedEncrypted,
  isMarkedEncryptedAtOpen,
  markEncrypted,
  parentsOf,
  unmarkEncrypted,
} from "./store-marks.js";
import { TurnBatch } from "./turn-batch.js";
import { heartbeatWorker, listWorkers, registerWorker, removeWorker } from "./workers.js";
import * as workspace from "./workspace.js";

export interface PostgresStoreOptions {
  /** Schema holding every table (created on first open). Default "cairn". */
  schema?: string;
  /** Connections in the pool the store creates from a URL. Default 10. Ignored for a pool. */
  poolSize?: number;
  /** Refuse a schema that holds no cairn store rather than create one (a reader given a
   *  mistyped schema would otherwise create it and see no runs). Default false. */
  mustExist?: boolean;
}

export function postgresStore(
  urlOrPool: string | pg.Pool,
  options: PostgresStoreOptions = {},
): Store {
  if (
    typeof urlOrPool !== "string" &&
    typeof (urlOrPool as { connect?: unknown })?.connect !== "function"
  ) {
    throw new StoreError(
      `postgresStore(): the first argument must be a connection URL such as "postgres://user@host:5432/db" or a pg.Pool, not ${describeArgument(urlOrPool)}. Options go second: postgresStore(url, { schema, poolSize }).`,
    );
  }
  const schema = options.schema ?? "cairn";
  const problem = schemaNameProblem(schema);
  if (problem !== undefined) throw new StoreError(`postgresStore(): ${problem}`);
  return new PostgresStore(
    urlOrPool,
    schema,
    options.poolSize ?? 10,
    options.mustExist ?? false,
    (options as InternalPostgresStoreOptions).guardBuild,
  );
}

/** Options of cairn's own tests, in no public type nor in docs/API.md. `guardBuild`: the
 *  build whose plain-payload triggers the store installs (plain-triggers.ts), to play two
 *  builds of a rolling deploy; absent, this build's. */
export interface InternalPostgresStoreOptions extends PostgresStoreOptions {
  guardBuild?: GuardBuild;
}

/** "host:port/database, schema "x"": for messages. Never includes credentials. */
function describe(urlOrPool: string | pg.Pool, schema: string): string {
  let where = "database";
  try {
    if (typeof urlOrPool === "string") {
      where = describeUrl(new URL(urlOrPool));
    } else {
      const o = urlOrPool.options;
      if (o.connectionString) {
        where = describeUrl(new URL(o.connectionString));
      } else {
        where = `${o.host ?? "localhost"}:${o.port ?? 5432}/${o.database ?? ""}`;
      }
    }
  } catch {
    // An unparsable URL: pg reports it on connect; keep the message generic here.
  }
  return `${where}, schema "${schema}"`;
}

/** host:port/database of a URL. A password with an unencoded "/" ("ann:1/pw@host/db")
 *  makes the URL parse with host "ann" and the path "/pw@host/db": the path then holds the
 *  password, and is not shown. */
function describeUrl(u: URL): string {
  if (!u.pathname.includes("@")) return `${u.host}${u.pathname}`;
  return `${u.host}/... (the URL's path holds "@": a "/" in the password must be written %2F)`;
}

/** A query with no answer for this long is given up on by the client. */
const QUERY_TIMEOUT_MS = STATEMENT_TIMEOUT_MS + 5_000;

class PostgresStore implements Store {
  readonly description: string;
  readonly #source: string | pg.Pool;
  readonly #schema: string;
  readonly #poolSize: number;
  /** Refuse a schema without cairn's tables at open (postgresStore's mustExist). */
  readonly #mustExist: boolean;
  readonly #ctx: StoreContext;
  /** The grouped writes' context: it may still reach the database while the last close()
   *  sends what was asked for before it, when #ctx refuses (a verb asked for after close()
   *  is refused, as on SQLite, however long the drain takes). */
  readonly #drainCtx: StoreContext;
  #db: Database | undefined;
  #pool: pg.Pool | undefined;
  #clock: Clock | undefined;
  /** Refuses a plain payload once the store is marked encrypted (plain-payloads.ts). */
  readonly #guard: PlainPayloadGuard;
  #opens = 0;
  #opening: Promise<void> | undefined;
  #listener: HintListener | undefined;
  /** Every subscribe()r, open or not: the LISTEN connection (#listen) exists only while the
   *  store is open, and a subscriber stays through a close and the next open. */
  readonly #subscribers = new Set<(hint: StoreHint) => void>();
  /** The own pool's clients whose socket is open (close() drops those that stay open). */
  readonly #ownClients = new Set<pg.ClientBase>();
  /** The last close() is sending what was asked for before it (the pool is still open). */
  #draining = false;
  /** The last close(), while it runs: a close() meanwhile waits for it. */
  #closing: Promise<void> | undefined;
  /** Creates asked for in one turn: one statement (createGroup). */
  readonly #creates = new TurnBatch<NewRun, { run: RunRecord; created: boolean }>((runs) =>
    createGroup(this.#drainCtx, runs),
  );
  /** Releases without events asked for in one turn: one statement (releaseGroup). */
  readonly #releases = new TurnBatch<Release, ReleaseOutcome>((rs) =>
    releaseGroup(this.#drainCtx, rs),
  );

  constructor(
    source: string | pg.Pool,
    schema: string,
    poolSize: number,
    mustExist: boolean,
    guardBuild: GuardBuild | undefined,
  ) {
    this.#source = source;
    this.#schema = schema;
    this.#poolSize = poolSize;
    this.#mustExist = mustExist;
    this.description = describe(source, schema);
    const context = (draining: boolean): StoreContext => {
      const database = () => this.#database(draining);
      return {
        get db() {
          return database();
        },
        description: this.description,
        t: tablesIn(schema),
        clockParam: () => clockParamOf(this.#clock),
        channel: channelFor(schema),
        ...(guardBuild !== undefined && { guardBuild }),
      };
    };
    this.#ctx = context(false);
    this.#drainCtx = context(true);
    this.#guard = new PlainPayloadGuard(
      this.description,
      () => isMarkedEncrypted(this.#ctx),
      () => (this.#clock ? this.#clock.now() : Number.NaN),
    );
  }

  // ---- lifecycle ----

  async open(options: { clock: Clock }): Promise<void> {
    // An open while the last close() sends its writes and ends the pool: after it, anew.
    while (this.#closing !== undefined) await this.#closing.catch(() => {});
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
    if (this.#opens > 0) this.#listen();
    await this.#guard.opened(() => isMarkedEncryptedAtOpen(this.#ctx));
  }

  async close(): Promise<void> {
    if (this.#opens > 0) {
      this.#opens--;
      if (this.#opens > 0) return;
      const closing = this.#closeLast();
      this.#closing = closing;
      try {
        await closing;
      } finally {
        if (this.#closing === closing) this.#closing = undefined;
      }
      return;
    }
    // Already closed, or being closed by the last close(): done when that is.
    if (this.#closing !== undefined) return this.#closing;
    await this.#stop();
  }

  async #closeLast(): Promise<void> {
    // The creates and releases asked for before the last close() are sent first, while the
    // pool is still there.
    this.#draining = true;
    try {
      await this.#creates.drain();
      await this.#releases.drain();
    } finally {
      this.#draining = false;
    }
    const opening = this.#opening;
    this.#opening = undefined;
    await opening?.catch(() => {});
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
        // The client's own bound: statement_timeout is the server's, and a server that
        // cannot be heard (a network partition) answers nothing, so a query (and close(),
        // which ends the pool once its clients are back) would wait for TCP keepalive.
        query_timeout: QUERY_TIMEOUT_MS,
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
    // A NEW client can be terminated in the very read that makes it ready (a restart or
    // pg_terminate_backend at that moment): pg emits 'error' before `await pool.connect()`
    // resumes and before pg-pool's idle listener is back, and an unheard 'error' kills the
    // process. 'connect' fires synchronously before the client is handed out, so a
    // listener attached here is always in place; the failed query rejects on its own.
    pool.on("connect", onNewClient);
    if (owned) {
      pool.on("connect", readCommitted);
      ownClients(pool, this.#ownClients);
    }
    this.#pool = pool;
    const db = new Database(pool, this.description, owned);
    this.#db = db;
    try {
      await migrate(db, this.#schema, this.#ctx.t, this.description, {
        mustExist: this.#mustExist,
      });
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
    // At the same time as the pool: against a silent server each waits out its bound.
    const listenerClosed = listener?.close();
    const pool = this.#pool;
    const db = this.#db;
    this.#pool = undefined;
    this.#db = undefined;
    // Verbs asked for before the close get their answers first (connection.ts, settled()).
    await db?.settled(POOL_END_WAIT_MS);
    await this.#endPool(pool);
    await listenerClosed;
  }

  async #endPool(pool: pg.Pool | undefined): Promise<void> {
    if (!pool) return;
    if (pool === this.#source) {
      pool.removeListener("error", ignorePoolError);
      pool.removeListener("connect", onNewClient);
    } else {
      // Our own pool keeps its listeners: end() resolves once every client has been asked
      // to end, before their sockets close. A backend terminated meanwhile (DROP DATABASE
      // ... WITH (FORCE), a server shutting down) still answers with a FATAL error, which
      // pg-pool re-emits as 'error' on the pool; with no listener that is an uncaught
      // exception. The pool is dropped here, listeners and all.
      await endOwnPool(pool, this.#ownClients);
    }
  }

  /** A grouped verb asked for while the store is closed is refused now, as any other verb
   *  is: queued, it would land if the store were opened again before the turn's flush. */
  #notOpenNow(): StoreError | undefined {
    try {
      this.#database();
      return undefined;
    } catch (err) {
      return err as StoreError;
    }
  }

  /** The answer for a call keyed by text no row can hold (noSuchText), once the store is
   *  open: a closed store refuses it as it refuses any verb. */
  async #nothing<T>(answer: T): Promise<T> {
    this.#database();
    return answer;
  }

  /** `draining`: for the grouped writes asked for before the last close(), which it sends
   *  before it ends the pool; any other call is refused once that close() has begun. */
  #database(draining = false): Database {
    if (!this.#db || (this.#opens === 0 && !(draining && this.#draining))) {
      throw new StoreError(
        `The PostgreSQL store (${this.description}) is not open: call open() before using it.`,
      );
    }
    return this.#db;
  }

  async now(): Promise<number> {
    const r = await this.#ctx.db.statement<{ now: string }>(
      "now",
      "idempotent",
      `SELECT ${nowSql(1)} AS now`,
      [clockParamOf(this.#clock)],
    );
    return Number(r.rows[0]?.now);
  }

  async markEncrypted(): Promise<void> {
    await markEncrypted(this.#ctx);
    this.#guard.saw(true);
  }

  async isMarkedEncrypted(): Promise<boolean> {
    const marked = await isMarkedEncrypted(this.#ctx);
    this.#guard.saw(marked);
    return marked;
  }

  async unmarkEncrypted(): Promise<void> {
    await unmarkEncrypted(this.#ctx);
    this.#guard.saw(false);
  }

  // ---- runs ----

  createRun(run: NewRun): Promise<{ run: RunRecord; created: boolean }> {
    const bad = createRunProblem(run) ?? this.#notOpenNow();
    if (bad) return Promise.reject(bad);
    return this.#guard.admit(
      () => plainInNewRun(run),
      () => this.#creates.ask(run),
    );
  }

  getRun(id: string): Promise<RunRecord | undefined> {
    if (noSuchText(id)) return this.#nothing(undefined);
    return getRun(this.#ctx, id);
  }

  listRuns(filter: RunFilter = {}): Promise<RunRecord[]> {
    const bad = listRunsProblem(filter);
    if (bad) return Promise.reject(bad);
    const f = filter;
    const statuses = f.status === undefined ? [] : [f.status].flat();
    const texts = [f.workflow, f.version, f.parentId, f.idContains, f.waitingForEventPrefix];
    if (noSuchText(...texts, ...statuses, f.before?.id)) return this.#nothing([]);
    return listRuns(this.#ctx, filter);
  }

  // ---- execution ----

  claimRuns(p: {
    workerId: string;
    workflows: string[];
    limit: number;
    leaseMs: number;
  }): Promise<ClaimedRun[]> {
    const bad = claimRunsProblem(p);
    if (bad) return Promise.reject(bad);
    return claimRuns(this.#ctx, p);
  }

  renewLeases(p: RenewLeases): Promise<{ lost: string[]; cancelRequested: string[] }> {
    return renewLeases(this.#ctx, p);
  }

  expireLease(p: { runId: string; epoch: number; onlyIfRecovered?: boolean }): Promise<{
    ok: boolean;
  }> {
    return expireLease(this.#ctx, p);
  }

  appendRecords(writes: RunWrite[]): Promise<WriteOutcome[]> {
    return this.#guard.admit(
      () => plainInWrites(writes),
      () => appendRecords(this.#ctx, writes),
    );
  }

  releaseRun(r: Release): Promise<ReleaseOutcome> {
    const bad = releaseProblem(r) ?? this.#notOpenNow();
    if (bad) return Promise.reject(bad);
    return this.#guard.admit(
      () => plainInReleaseOf(r),
      () => (hasNoEvents(r) ? this.#releases.ask(r) : releaseRun(this.#ctx, r)),
    );
  }

  loadJournal(runId: string, options?: LoadJournalOptions): Promise<Journal> {
    const events = journalEvents(options);
    const heads = events === "heads";
    if (noSuchText(runId)) {
      return this.#nothing({
        steps: [],
        attempts: [],
        intents: [],
        events: [],
        ...(heads && { eventHeads: [] }),
      });
    }
    return loadJournal(this.#ctx, runId, events);
  }

  async readJournalPage(p: { runId: string; from: number; limit: number }): Promise<JournalPage> {
    checkPageArguments(
      "readJournalPage",
      p.runId,
      { name: "from", value: p.from, min: 0 },
      p.limit,
    );
    if (noSuchText(p.runId)) {
      return this.#nothing({ steps: [], attempts: [], intents: [], more: false });
    }
    return readJournalPage(this.#ctx, p);
  }

  pendingEvents(runId: string, options?: PendingEventsOptions): Promise<EventRecord[]> {
    if (noSuchText(runId)) return this.#nothing([]);
    return pendingEvents(this.#ctx, runId, options?.settled === true);
  }

  pendingEventHeads(runId: string, options?: PendingEventsOptions): Promise<EventHead[]> {
    if (noSuchText(runId)) return this.#nothing([]);
    return pendingEventHeads(this.#ctx, runId, options?.settled === true);
  }

  pendingEventHeadsNamed(
    runId: string,
    page: EventHeadsPage,
    options?: PendingEventsOptions,
  ): Promise<EventHead[]> {
    try {
      checkEventHeadsPage(runId, page);
    } catch (err) {
      return Promise.reject(err);
    }
    if (noSuchText(runId) || noSuchText(page.name)) return this.#nothing([]);
    return pendingEventHeadsNamed(this.#ctx, runId, page, options?.settled === true);
  }

  pendingEventHeadsOfNames(
    runId: string,
    pages: readonly EventHeadsPage[],
    options?: PendingEventsOptions,
  ): Promise<EventHead[]> {
    try {
      for (const page of pages) checkEventHeadsPage(runId, page);
    } catch (err) {
      return Promise.reject(err);
    }
    if (noSuchText(runId)) return this.#nothing([]);
    const named = pages.filter((p) => !noSuchText(p.name));
    if (named.length === 0) return this.#nothing([]);
    return pendingEventHeadsOfNames(this.#ctx, runId, named, options?.settled === true);
  }

  eventPayloads(runId: string, seqs: readonly number[]): Promise<EventPayload[]> {
    if (noSuchText(runId)) return this.#nothing([]);
    return eventPayloads(this.#ctx, runId, seqs);
  }

  // ---- events and control ----

  sendEvent(e: NewEvent): Promise<SendEventOutcome> {
    if (noSuchText(e.runId)) return this.#nothing({ ok: false, reason: "not-found" });
    return this.#guard.admit(
      () => plainInEvents([e]),
      () => sendEvent(this.#ctx, e),
    );
  }

  listEvents(runId: string): Promise<EventRecord[]> {
    if (noSuchText(runId)) return this.#nothing([]);
    return listEvents(this.#ctx, runId);
  }

  async readEvents(p: { runId: string; after: number; limit: number }): Promise<EventRecord[]> {
    checkPageArguments("readEvents", p.runId, { name: "after", value: p.after, min: 0 }, p.limit);
    if (noSuchText(p.runId)) return this.#nothing([]);
    return readEvents(this.#ctx, p);
  }

  requestCancel(
    runId: string,
    reason: string,
    p?: { parentEvent?: { name: string; payload: string } },
  ): Promise<CancelOutcome> {
    if (noSuchText(runId)) return this.#nothing({ state: "not-found" });
    const read = readCancelReason(runId, reason);
    const cancel = (parents: ReadonlyMap<string, string | null>) =>
      this.#guard.admit(
        () => plainInCancel(read, p, (id) => parents.get(id)),
        () => requestCancel(this.#ctx, runId, reason, p),
      );
    // A cascade's reason names parents: read before the guard looks, if it will.
    const named = runsNamedAsChildren(read);
    if (named.length === 0 || this.#guard.believedUnmarked()) return cancel(new Map());
    return parentsOf(this.#ctx, named).then(cancel);
  }

  resumeRun(runId: string, p: ResumeOptions): Promise<ResumeOutcome> {
    if (noSuchText(runId)) return this.#nothing({ ok: false, reason: "not-found" });
    return resumeRun(this.#ctx, runId, p);
  }

  forkRun(p: {
    sourceId: string;
    run: NewRun;
    copy: Array<{ key: string; generation: number; unordered?: boolean; since?: number }>;
  }): Promise<{ run: RunRecord; created: boolean }> {
    if (noSuchText(p.sourceId)) {
      return this.#nothing(undefined).then(() => {
        throw runNotFound(p.sourceId, "nothing to fork");
      });
    }
    return this.#guard.admit(
      () => plainInNewRun(p.run),
      () => forkRun(this.#ctx, p),
    );
  }

  markUnserved(p: Parameters<Store["markUnserved"]>[0]): Promise<number> {
    return markUnserved(this.#ctx, p);
  }

  listChildrenOfCanceled(p: {
    limit: number;
  }): Promise<Array<{ runId: string; parentId: string }>> {
    const bad = childrenOfCanceledProblem(p);
    if (bad) return Promise.reject(bad);
    return listChildrenOfCanceled(this.#ctx, p);
  }

  // ---- workers ----

  registerWorker(w: Omit<WorkerRecord, "startedAt" | "heartbeatAt">): Promise<void> {
    return registerWorker(this.#ctx, w);
  }

  heartbeatWorker(id: string): Promise<void> {
    return heartbeatWorker(this.#ctx, id);
  }

  removeWorker(id: string, options?: { expireLeases?: boolean }): Promise<void> {
    return removeWorker(this.#ctx, id, options);
  }

  listWorkers(): Promise<WorkerRecord[]> {
    return listWorkers(this.#ctx);
  }

  // ---- shared rate limits and run streams (cairn/ai; ai-state.ts) ----

  acquireRate(p: {
    key: string;
    grantId: string;
    tokens: number;
    limits: RateLimits;
  }): Promise<AcquireRateOutcome> {
    return aiState.acquireRate(this.#ctx, p);
  }

  settleRate(p: { key: string; grantId: string; tokens: number }): Promise<void> {
    return aiState.settleRate(this.#ctx, p);
  }

  blockRate(p: { key: string; forMs: number }): Promise<void> {
    return aiState.blockRate(this.#ctx, p);
  }

  appendStream(p: { runId: string; chunks: string[] }): Promise<AppendStreamOutcome> {
    if (noSuchText(p.runId)) return this.#nothing({ ok: false, reason: "not-found" });
    return this.#guard.admit(
      () => plainInStream(p),
      () => aiState.appendStream(this.#ctx, p),
    );
  }

  readStream(p: { runId: string; from: number; limit?: number }): Promise<StreamChunk[]> {
    const bad = readStreamProblem(p);
    if (bad) return Promise.reject(bad);
    if (noSuchText(p.runId)) return this.#nothing([]);
    return aiState.readStream(this.#ctx, p);
  }

  // ---- workspace objects and retention (workspace.ts) ----

  missingWorkspaceObjects(hashes: string[]): Promise<string[]> {
    return workspace.missingObjects(this.#ctx, hashes);
  }

  putWorkspaceObjects(
    p: Parameters<WorkspaceVerbs["putWorkspaceObjects"]>[0],
  ): Promise<PutWorkspaceOutcome> {
    return this.#guard.admit(
      () => plainInObjects(p),
      () => workspace.putObjects(this.#ctx, p),
    );
  }

  getWorkspaceObjects(hashes: string[]): Promise<WorkspaceObject[]> {
    return workspace.getObjects(this.#ctx, hashes);
  }

  heldWorkspaceObjects(runId: string, hashes: string[]): Promise<string[]> {
    if (noSuchText(runId)) return this.#nothing([]);
    return workspace.heldObjects(this.#ctx, runId, hashes);
  }

  deleteRun(runId: string): Promise<DeleteRunOutcome> {
    if (noSuchText(runId)) return this.#nothing({ deleted: false, reason: "not-found" });
    return workspace.deleteRun(this.#ctx, runId);
  }

  async deleteRuns(runIds: string[], options?: DeleteRunsOptions): Promise<DeleteRunsOutcome> {
    checkDeleteRunsIds(runIds, options);
    // Ids no run can have are not among those deleted, as on SQLite.
    return workspace.deleteRuns(
      this.#ctx,
      runIds.filter((id) => !noSuchText(id)),
      options,
    );
  }

  // ---- approvals (approvals.ts) ----

  requestApproval(
    p: Parameters<ApprovalVerbs["requestApproval"]>[0],
  ): Promise<RequestApprovalOutcome> {
    return this.#guard.admit(
      () => plainInApprovalRequest(p),
      () => approvals.requestApproval(this.#ctx, p),
    );
  }

  answerApproval(
    p: Parameters<ApprovalVerbs["answerApproval"]>[0],
  ): Promise<AnswerApprovalOutcome> {
    if (noSuchText(p.runId, p.key)) return this.#nothing({ ok: false, reason: "not-found" });
    return this.#guard.admit(
      () => plainInApprovalAnswer(p),
      () => approvals.answerApproval(this.#ctx, p),
    );
  }

  listApprovals(runId: string): Promise<ApprovalRecord[]> {
    if (noSuchText(runId)) return this.#nothing([]);
    return approvals.listApprovals(this.#ctx, runId);
  }

  // ---- hints ----

  subscribe(listener: (hint: StoreHint) => void): () => void {
    this.#subscribers.add(listener);
    // Not while closed (or closing): a LISTEN connection made then was never closed, and it
    // kept the process alive, reconnecting for ever. The next open() starts it.
    if (this.#opens > 0) this.#listen();
    return () => {
      this.#subscribers.delete(listener);
    };
  }

  /** Starts the LISTEN connection if someone subscribed and there is none. */
  #listen(): void {
    if (this.#listener || this.#subscribers.size === 0) return;
    const config: pg.ClientConfig =
      typeof this.#source === "string"
        ? { connectionString: this.#source, application_name: "cairn-listen" }
        : { ...this.#source.options };
    this.#listener = new HintListener(config, this.#ctx.channel);
    this.#listener.add((hint) => {
      for (const subscriber of [...this.#subscribers]) {
        try {
          subscriber(hint);
        } catch {
          // A subscriber's bug must not stop the others from hearing hints.
        }
      }
    });
  }
}

/**
 * True when one of `texts` holds a NUL. PostgreSQL text cannot, so no stored id, name or
 * key has one (createRun refuses it): a read or a transition keyed by such text finds
 * nothing, as on SQLite, instead of failing as a store error ("cannot store a value given
 * to getRun") for a run that simply does not exist.
 */
function noSuchText(...texts: Array<string | undefined | null>): boolean {
  return texts.some((t) => typeof t === "string" && t.includes("\u0000"));
}

/** How long close() waits for the server to answer its clients' goodbye before it drops
 *  their sockets: a server gone silent (a network partition) never answers, and the
 *  half-closed sockets would keep the process alive. */
const POOL_END_WAIT_MS = 2_000;

/** Ends the store's own pool: politely, then, for clients whose socket has not closed
 *  within POOL_END_WAIT_MS, by dropping it. pg-pool's end() resolves once its clients are
 *  asked to end; each client emits 'end' when its socket has closed. `clients` holds the
 *  pool's connected clients until then (ownClients). */
async function endOwnPool(pool: pg.Pool, clients: Set<pg.ClientBase>): Promise<void> {
  const open = [...clients];
  const closed = Promise.all(
    open.map((c) => new Promise<void>((resolve) => c.once("end", () => resolve()))),
  );
  // Not awaited alone: end() resolves once every client is back, and one held by a verb
  // under way (a row lock held elsewhere, a silent server) came back only at the statement
  // timeout, holding close() 30 s past its bound.
  const ended = pool.end().catch(() => {});
  if (!(await settlesWithin(Promise.all([ended, closed]), POOL_END_WAIT_MS))) {
    for (const c of clients) dropSocket(c);
  }
}

/** Keeps `clients` as the set of `pool`'s clients whose socket is open. */
function ownClients(pool: pg.Pool, clients: Set<pg.ClientBase>): void {
  pool.on("connect", (client) => {
    clients.add(client);
    client.once("end", () => clients.delete(client));
  });
}

function ignorePoolError(): void {
  // Only connection losses are expected here; the pool has already discarded the client
  // and the next verb opens a new connection (and retries if the server is still away).
}

function onNewClient(client: pg.PoolClient): void {
  client.on("error", ignoreClientError);
}

/**
 * The store's own sessions run READ COMMITTED whatever the server's default: its verbs lock
 * a run's row and then read other rows in a later statement, which sees what was committed
 * meanwhile only with a snapshot per statement (under REPEATABLE READ, an event sent while
 * a release waited for the lock went unseen and the run waited forever). Transactions on a
 * caller's pool say so in their BEGIN instead (connection.ts). Queued before the client is
 * handed out, so it runs before any verb's statement; should it fail, the connection is
 * broken and so is that statement.
 */
function readCommitted(client: pg.PoolClient): void {
  client
    .query("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED")
    .catch(ignoreClientError);
}

function ignoreClientError(): void {
  // The query in flight (if any) rejects with this error and is handled by the verb's
  // retry rules; an idle client is dropped by the pool.
}
