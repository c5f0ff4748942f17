// The embedded Store: one SQLite file, zero setup. better-sqlite3 is synchronous, so each
// verb runs its transaction to completion before another starts in this process; other
// processes on the same file are serialised by SQLite's write lock (connection.ts).
//
// Time is the Clock given to open(): leases, readyAt and stamps all use clock.now().
//
// This file is the facade: each verb is one transaction in the file of its group, named as
// the PostgreSQL store's are (runs, leases, journal-writes, run-control, workers,
// ai-state, workspace, approvals).

import { StoreError } from "../../errors.js";
import type { Clock } from "../../lib/clock.js";
import { describeArgument } from "../../lib/text.js";
import type {
  AnswerApprovalOutcome,
  ApprovalRecord,
  ApprovalVerbs,
  RequestApprovalOutcome,
} from "../approval-records.js";
import { parentsRead, readCancelReason, runsNamedAsChildren } from "../cancel-texts.js";
import { checkEventHeadsPage, journalEvents } from "../journal-page.js";
import {
  type PlainPayload,
  PlainPayloadGuard,
  plainInApprovalAnswer,
  plainInApprovalRequest,
  plainInCancel,
  plainInEvents,
  plainInNewRun,
  plainInObjects,
  plainInRelease,
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
  RunEnd,
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
import { Connection, type ConnectionOptions } from "./connection.js";
import { readEvents, readJournalPage } from "./journal-pages.js";
import {
  appendRecords,
  eventPayloads,
  loadJournal,
  pendingEventHeads,
  pendingEventHeadsNamed,
  pendingEventHeadsOfNames,
  pendingEvents,
} from "./journal-writes.js";
import { claimRuns, expireLease, renewLeases } from "./leases.js";
import { Hints } from "./notify.js";
import {
  forkRun,
  markUnserved,
  releaseRun,
  requestCancel,
  resumeRun,
  sendEvent,
} from "./run-control.js";
import { createReleasedRun, createRun, getRun, listEvents, listRuns } from "./runs.js";
import type { ReadTx, StoreContext } from "./sql.js";
import {
  checkedContext,
  isMarkedEncrypted,
  markEncrypted,
  markedIn,
  parentsIn,
  unmarkEncrypted,
} from "./store-marks.js";
import { heartbeatWorker, listWorkers, registerWorker, removeWorker } from "./workers.js";
import * as workspace from "./workspace.js";

export interface SqliteStoreOptions {
  /** "full" (default) survives power loss; "normal" may lose the last commits on power loss. */
  synchronous?: "full" | "normal";
  /** How long a write waits for another connection's write lock (default 5000). */
  busyTimeoutMs?: number;
  /** Refuse a file that holds no cairn store (it does not exist, is empty, or is another
   *  application's database) rather than create one in it: for clients that only read or
   *  steer runs (the CLI's read-only commands). Default false: a worker creates its store. */
  mustExist?: boolean;
}

/** The SQLite Store, plus diagnostics that only make sense for a file. */
export interface SqliteStore extends Store {
  readonly path: string;
  /** Reads a PRAGMA on the store's own connection (e.g. "synchronous", "journal_mode"). */
  pragma(name: "synchronous" | "journal_mode" | "busy_timeout"): unknown;
}

export function sqliteStore(path = ".cairn/cairn.db", options?: SqliteStoreOptions): SqliteStore {
  if (typeof path !== "string") {
    throw new StoreError(
      `sqliteStore(): the path must be a string such as ".cairn/cairn.db", not ${describeArgument(path)}. Options go second: sqliteStore(path, { synchronous, busyTimeoutMs }).`,
    );
  }
  if (path.trim() === "") {
    // SQLite reads "" as "a temporary database", deleted on close: every run would be lost.
    throw new StoreError(
      `SQLite store path ${JSON.stringify(path)} is empty: SQLite would use a temporary database that is deleted when it closes, losing every run. Give a file path such as ".cairn/cairn.db" (or ":memory:" for a store that lives only in this process).`,
    );
  }
  const synchronous = options?.synchronous ?? "full";
  const busyTimeoutMs = options?.busyTimeoutMs ?? 5_000;
  if (synchronous !== "full" && synchronous !== "normal") {
    throw new StoreError(`SQLite store "${path}": synchronous must be "full" or "normal".`);
  }
  if (!Number.isSafeInteger(busyTimeoutMs) || busyTimeoutMs < 0) {
    throw new StoreError(`SQLite store "${path}": busyTimeoutMs must be a whole number >= 0.`);
  }
  const mustExist = options?.mustExist === true;
  return new SqliteStoreImpl(path, { synchronous, busyTimeoutMs, mustExist });
}

class SqliteStoreImpl implements SqliteStore {
  readonly description: string;
  readonly #hints = new Hints();
  readonly #ctx: Connection;
  /** Refuses a plain payload once the store is marked encrypted (plain-payloads.ts). */
  readonly #guard: PlainPayloadGuard;

  constructor(
    readonly path: string,
    options: ConnectionOptions,
  ) {
    this.description = path;
    this.#ctx = new Connection(path, options, (hint) => this.#hints.emit(hint));
    this.#guard = new PlainPayloadGuard(
      path,
      () => isMarkedEncrypted(this.#ctx),
      () => this.#ctx.now(),
    );
  }

  // ---- lifecycle ----

  async open(p: { clock: Clock }): Promise<void> {
    this.#ctx.open(p.clock);
    await this.#guard.opened();
  }

  async close(): Promise<void> {
    this.#ctx.close();
  }

  pragma(name: "synchronous" | "journal_mode" | "busy_timeout"): unknown {
    return this.#ctx.pragma(name);
  }

  async now(): Promise<number> {
    return this.#ctx.now();
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

  /** A verb that writes payloads: refused when it carries one in plain text and the store
   *  is marked encrypted, the mark read inside its own transaction while the store is
   *  believed unmarked (plain-payloads.ts), so a mark another process wrote since this
   *  store opened counts at once. */
  #admit<T>(
    find: (tx?: ReadTx) => PlainPayload | undefined,
    verb: (ctx: StoreContext) => Promise<T>,
  ): Promise<T> {
    return this.#guard.admitInTransaction(find, markedIn, (check) =>
      verb(check === undefined ? this.#ctx : checkedContext(this.#ctx, check)),
    );
  }

  // ---- runs ----

  async createRun(run: NewRun): Promise<{ run: RunRecord; created: boolean }> {
    const bad = createRunProblem(run);
    if (bad) throw bad;
    // The check goes to the insert itself, which reads the mark in its statement while the
    // store is believed unmarked (sql.ts, insertNewRow).
    return this.#guard.admitInTransaction(
      () => plainInNewRun(run),
      markedIn,
      (check) => createRun(this.#ctx, run, check),
    );
  }

  // Not async: the guard's (or the write's) promise is the answer, with no wrapper around it
  // (a hop through the promise hooks of every 0-step run).
  createReleasedRun(
    run: NewRun & { claimBy: NonNullable<NewRun["claimBy"]> },
    end: () => RunEnd | undefined,
  ): Promise<{ run: RunRecord; created: boolean }> {
    const bad = createRunProblem(run);
    if (bad) return Promise.reject(bad);
    const guard = this.#guard;
    let release: RunEnd | undefined;
    return guard.admitInTransaction(
      // Inside the transaction (the check, after the insert found the store marked) the
      // release is known: its payloads are looked at too.
      () => plainInNewRun(run) ?? (release && plainInRelease(run.id, release)),
      markedIn,
      (check) =>
        createReleasedRun(
          this.#ctx,
          run,
          (tx) => {
            release = end();
            // A release refused (a non-finite time, a lone surrogate) fails the create with
            // it: nothing is written, and start() says why.
            const refused = release && releaseProblem({ ...release, runId: run.id, epoch: 1 });
            if (refused) throw refused;
            // A store not believed unmarked (then no check goes to the insert) reads the mark
            // here before it refuses a plain payload (a mark another process removed counts
            // at once).
            const plain = release && !guard.believedUnmarked() && plainInRelease(run.id, release);
            if (plain) {
              const marked = markedIn(tx);
              guard.saw(marked);
              if (marked) throw guard.refusal(plain);
            }
            return release;
          },
          check,
        ),
    );
  }

  async getRun(id: string): Promise<RunRecord | undefined> {
    return getRun(this.#ctx, id);
  }

  async listRuns(filter: RunFilter = {}): Promise<RunRecord[]> {
    const bad = listRunsProblem(filter);
    if (bad) throw bad;
    return listRuns(this.#ctx, filter);
  }

  // ---- execution ----

  async claimRuns(p: {
    workerId: string;
    workflows: string[];
    limit: number;
    leaseMs: number;
  }): Promise<ClaimedRun[]> {
    const bad = claimRunsProblem(p);
    if (bad) throw bad;
    return claimRuns(this.#ctx, p);
  }

  async renewLeases(p: RenewLeases): Promise<{ lost: string[]; cancelRequested: string[] }> {
    return renewLeases(this.#ctx, p);
  }

  async expireLease(p: { runId: string; epoch: number; onlyIfRecovered?: boolean }): Promise<{
    ok: boolean;
  }> {
    return expireLease(this.#ctx, p);
  }

  // Not async (one promise less per commit), but a throw is still a rejection.
  appendRecords(writes: RunWrite[]): Promise<WriteOutcome[]> {
    try {
      // The check goes to appendRecords itself, which reads the mark in the insert of a
      // lone step (journal-writes.ts) rather than in a statement of its own.
      return this.#guard.admitInTransaction(
        () => plainInWrites(writes),
        markedIn,
        (check) => appendRecords(this.#ctx, writes, check),
      );
    } catch (err) {
      return Promise.reject(err);
    }
  }

  async releaseRun(r: Release): Promise<ReleaseOutcome> {
    const bad = releaseProblem(r);
    if (bad) throw bad;
    // The check goes to the release itself, which reads the mark in its read of the run's
    // row (sql.ts, findRowChecked) rather than in a statement of its own.
    return this.#guard.admitInTransaction(
      () => plainInReleaseOf(r),
      markedIn,
      (check) => releaseRun(this.#ctx, r, check),
    );
  }

  async loadJournal(runId: string, options?: LoadJournalOptions): Promise<Journal> {
    return loadJournal(this.#ctx, runId, journalEvents(options));
  }

  async readJournalPage(p: { runId: string; from: number; limit: number }): Promise<JournalPage> {
    return readJournalPage(this.#ctx, p);
  }

  async pendingEvents(runId: string, options?: PendingEventsOptions): Promise<EventRecord[]> {
    return pendingEvents(this.#ctx, runId, options?.settled === true);
  }

  async pendingEventHeads(runId: string, options?: PendingEventsOptions): Promise<EventHead[]> {
    return pendingEventHeads(this.#ctx, runId, options?.settled === true);
  }

  async pendingEventHeadsNamed(
    runId: string,
    page: EventHeadsPage,
    options?: PendingEventsOptions,
  ): Promise<EventHead[]> {
    checkEventHeadsPage(runId, page);
    return pendingEventHeadsNamed(this.#ctx, runId, page, options?.settled === true);
  }

  async pendingEventHeadsOfNames(
    runId: string,
    pages: readonly EventHeadsPage[],
    options?: PendingEventsOptions,
  ): Promise<EventHead[]> {
    for (const page of pages) checkEventHeadsPage(runId, page);
    return pendingEventHeadsOfNames(this.#ctx, runId, pages, options?.settled === true);
  }

  async eventPayloads(runId: string, seqs: readonly number[]): Promise<EventPayload[]> {
    return eventPayloads(this.#ctx, runId, seqs);
  }

  // ---- events and control ----

  async sendEvent(e: NewEvent): Promise<SendEventOutcome> {
    return this.#admit(
      () => plainInEvents([e]),
      (ctx) => sendEvent(ctx, e),
    );
  }

  async listEvents(runId: string): Promise<EventRecord[]> {
    return listEvents(this.#ctx, runId);
  }

  async readEvents(p: { runId: string; after: number; limit: number }): Promise<EventRecord[]> {
    return readEvents(this.#ctx, p);
  }

  async requestCancel(
    runId: string,
    reason: string,
    p?: { parentEvent?: { name: string; payload: string } },
  ): Promise<CancelOutcome> {
    // A cascade's reason names parents: read inside the write's transaction while the store
    // is believed unmarked (the check there), else before the guard looks.
    const read = readCancelReason(runId, reason);
    const named = runsNamedAsChildren(read);
    const parents =
      named.length === 0 || this.#guard.believedUnmarked()
        ? undefined
        : await this.#ctx.read("requestCancel", (tx) => parentsRead(parentsIn(tx), named));
    return this.#admit(
      (tx) => plainInCancel(read, p, tx ? parentsIn(tx) : (id) => parents?.get(id)),
      (ctx) => requestCancel(ctx, runId, reason, p),
    );
  }

  async resumeRun(runId: string, p: ResumeOptions): Promise<ResumeOutcome> {
    return resumeRun(this.#ctx, runId, p);
  }

  async forkRun(p: {
    sourceId: string;
    run: NewRun;
    copy: Array<{ key: string; generation: number; unordered?: boolean; since?: number }>;
  }): Promise<{ run: RunRecord; created: boolean }> {
    return this.#admit(
      () => plainInNewRun(p.run),
      (ctx) => forkRun(ctx, p),
    );
  }

  async markUnserved(p: Parameters<Store["markUnserved"]>[0]): Promise<number> {
    return markUnserved(this.#ctx, p);
  }

  async listChildrenOfCanceled(p: {
    limit: number;
  }): Promise<Array<{ runId: string; parentId: string }>> {
    const bad = childrenOfCanceledProblem(p);
    if (bad) throw bad;
    return listChildrenOfCanceled(this.#ctx, p);
  }

  // ---- workers ----

  async registerWorker(w: Omit<WorkerRecord, "startedAt" | "heartbeatAt">): Promise<void> {
    return registerWorker(this.#ctx, w);
  }

  async heartbeatWorker(id: string): Promise<void> {
    return heartbeatWorker(this.#ctx, id);
  }

  async removeWorker(id: string, options?: { expireLeases?: boolean }): Promise<void> {
    return removeWorker(this.#ctx, id, options);
  }

  async listWorkers(): Promise<WorkerRecord[]> {
    return listWorkers(this.#ctx);
  }

  // ---- shared rate limits and run streams (cairn/ai; ai-state.ts) ----

  async acquireRate(p: {
    key: string;
    grantId: string;
    tokens: number;
    limits: RateLimits;
  }): Promise<AcquireRateOutcome> {
    return aiState.acquireRate(this.#ctx, p);
  }

  async settleRate(p: { key: string; grantId: string; tokens: number }): Promise<void> {
    return aiState.settleRate(this.#ctx, p);
  }

  async blockRate(p: { key: string; forMs: number }): Promise<void> {
    return aiState.blockRate(this.#ctx, p);
  }

  async appendStream(p: { runId: string; chunks: string[] }): Promise<AppendStreamOutcome> {
    return this.#admit(
      () => plainInStream(p),
      (ctx) => aiState.appendStream(ctx, p),
    );
  }

  async readStream(p: { runId: string; from: number; limit?: number }): Promise<StreamChunk[]> {
    const bad = readStreamProblem(p);
    if (bad) throw bad;
    return aiState.readStream(this.#ctx, p);
  }

  // ---- workspace objects and retention (workspace.ts) ----

  async missingWorkspaceObjects(hashes: string[]): Promise<string[]> {
    return workspace.missingObjects(this.#ctx, hashes);
  }

  async putWorkspaceObjects(
    p: Parameters<WorkspaceVerbs["putWorkspaceObjects"]>[0],
  ): Promise<PutWorkspaceOutcome> {
    return this.#admit(
      () => plainInObjects(p),
      (ctx) => workspace.putObjects(ctx, p),
    );
  }

  async getWorkspaceObjects(hashes: string[]): Promise<WorkspaceObject[]> {
    return workspace.getObjects(this.#ctx, hashes);
  }

  async heldWorkspaceObjects(runId: string, hashes: string[]): Promise<string[]> {
    return workspace.heldObjects(this.#ctx, runId, hashes);
  }

  async deleteRun(runId: string): Promise<DeleteRunOutcome> {
    return workspace.deleteRun(this.#ctx, runId);
  }

  async deleteRuns(runIds: string[], options?: DeleteRunsOptions): Promise<DeleteRunsOutcome> {
    checkDeleteRunsIds(runIds, options);
    return workspace.deleteRuns(this.#ctx, runIds, options);
  }

  // ---- approvals (approvals.ts) ----

  async requestApproval(
    p: Parameters<ApprovalVerbs["requestApproval"]>[0],
  ): Promise<RequestApprovalOutcome> {
    return this.#admit(
      () => plainInApprovalRequest(p),
      (ctx) => approvals.requestApproval(ctx, p),
    );
  }

  async answerApproval(
    p: Parameters<ApprovalVerbs["answerApproval"]>[0],
  ): Promise<AnswerApprovalOutcome> {
    return this.#admit(
      () => plainInApprovalAnswer(p),
      (ctx) => approvals.answerApproval(ctx, p),
    );
  }

  async listApprovals(runId: string): Promise<ApprovalRecord[]> {
    return approvals.listApprovals(this.#ctx, runId);
  }

  // ---- hints ----

  subscribe(listener: (hint: StoreHint) => void): () => void {
    return this.#hints.subscribe(listener);
  }
}
