// The Store interface: the ONLY seam between cairn and persistence. Every verb is one
// transaction. Plain records in and out; no driver types cross it. Both backends (SQLite,
// PostgreSQL) implement exactly these verbs and pass one contract suite
// (describeStoreContract in src/testing/store-contract.ts).
//
// Time: every time-dependent decision (lease expiry, ready_at, "now" stamps) is made by the
// store with its own notion of now. SQLite uses the Clock given to open(). PostgreSQL uses
// the database's clock (so workers with skewed clocks still agree on leases), except when
// the Clock is not the real one (a virtual test clock, more than 1 s from Date.now()): then
// the clock's own reading is passed into SQL, so tests move time on both backends.
//
// Fencing: every journal write and every release carries the writer's epoch and is applied
// only if the run's epoch still equals it, in the same transaction. claimRuns increments
// the epoch, so a worker that lost its lease can write nothing.

import type { Clock } from "../lib/clock.js";

export type RunStatus =
  | "pending"
  | "running"
  | "waiting"
  | "paused"
  | "completed"
  | "failed"
  | "canceled";

export const TERMINAL_STATUSES: ReadonlySet<RunStatus> = new Set([
  "completed",
  "failed",
  "canceled",
]);

/** Named amounts: { tokens: 1200, usd: 0.03 }. */
export type Amounts = Record<string, number>;

/** An error as recorded. `code` is a CairnError code when there is one. */
export interface ErrorRecord {
  name: string;
  code?: string | undefined;
  message: string;
  stack?: string | undefined;
}

export interface RunRecord {
  id: string;
  workflow: string;
  version: string;
  status: RunStatus;
  /** Why the run is paused/failed/canceled/not progressing, in words a user can act on. */
  reason: string | null;
  /** Machine-readable cause of `paused`. */
  pausedFor: "version" | "budget" | null;
  /** Encoded (codec) input. */
  input: string;
  /** Encoded output once completed. */
  output: string | null;
  error: ErrorRecord | null;
  budgetLimit: Amounts;
  /** Sum of the spend of every recorded step and attempt of this run. */
  budgetSpent: Amounts;
  parentId: string | null;
  /** When the run may next be claimed (ms). null: only an event or an action makes it ready.
   *  For a running run it equals leaseUntil, so an expired lease makes the run claimable. */
  readyAt: number | null;
  /** For a waiting run: when its timer fires (sleep end or wait timeout), if any. */
  wakeAt: number | null;
  /** Event names a waiting run waits for (an event with one of these names wakes it). */
  waitingFor: string[];
  leaseOwner: string | null;
  leaseUntil: number | null;
  epoch: number;
  /** Incremented by resumeRun of a failed run: attempts of older generations no longer count. */
  generation: number;
  /** Set by requestCancel while the run is running; the owner stops it. */
  cancelRequested: boolean;
  createdAt: number;
  updatedAt: number;
}

export interface NewRun {
  id: string;
  workflow: string;
  version: string;
  input: string;
  budgetLimit: Amounts;
  parentId?: string | null;
}

export type StepKind = "step" | "effect" | "sleep" | "wait" | "child" | "now" | "random" | "uuid";

/** A completed call: insert-only, unique on (runId, key), never updated or deleted. */
export interface StepRecord {
  runId: string;
  key: string;
  /** Call order within the run (0-based). */
  seq: number;
  name: string;
  kind: StepKind;
  /** "error": the call's final outcome was an error the workflow saw (recorded so that
   *  replay rethrows it instead of executing again). */
  outcome: "ok" | "error";
  /** Encoded value when outcome is "ok". */
  result: string | null;
  error: ErrorRecord | null;
  /** Spend of the attempt that completed the call. */
  spend: Amounts;
  /** The attempt number that completed the call (1-based). */
  attempt: number;
  startedAt: number;
  completedAt: number;
}

/** An attempt that did not complete its call: failed, timed out, or crashed its worker. */
export interface AttemptRecord {
  runId: string;
  key: string;
  attempt: number;
  generation: number;
  startedAt: number;
  endedAt: number;
  error: ErrorRecord;
  spend: Amounts;
  /** When the next attempt may start; null means no further attempt (the call failed). */
  retryAt: number | null;
}

/** A call begun but not completed: an effect's intent, a wait's deadline, a sleep's end,
 *  a child's id. Insert-only, unique on (runId, key). `data` is encoded by the engine. */
export interface IntentRecord {
  runId: string;
  key: string;
  kind: StepKind;
  name: string;
  data: string;
  createdAt: number;
}

export interface EventRecord {
  /** Store-assigned, increasing in the order events were sent. */
  seq: number;
  runId: string;
  name: string;
  /** Encoded payload. */
  payload: string;
  createdAt: number;
  /** The step key of the wait that consumed it, or null. */
  consumedBy: string | null;
}

export interface NewEvent {
  runId: string;
  name: string;
  payload: string;
}

/** Everything replay needs, read in ONE query. Events: only unconsumed ones, oldest first. */
export interface Journal {
  steps: StepRecord[];
  attempts: AttemptRecord[];
  intents: IntentRecord[];
  events: EventRecord[];
}

/** One run's share of a group commit. */
export interface RunWrite {
  runId: string;
  epoch: number;
  steps?: StepRecord[];
  attempts?: AttemptRecord[];
  intents?: IntentRecord[];
  /** Marks events consumed by a wait (by step key); each must still be unconsumed. */
  consume?: Array<{ eventSeq: number; key: string }>;
}

export type WriteOutcome =
  | { ok: true }
  | { ok: false; reason: "lease-lost" }
  /** A different record already exists under this key, or the event was already consumed. */
  | { ok: false; reason: "conflict"; key: string };

export interface ClaimedRun {
  /** The run as it is after the claim (status running, epoch incremented). */
  run: RunRecord;
  /** True when the run was taken from a lease that expired without a release (a crash). */
  recovered: boolean;
}

export interface Release {
  runId: string;
  epoch: number;
  status: Exclude<RunStatus, "running">;
  reason?: string | null;
  pausedFor?: "version" | "budget" | null;
  output?: string | null;
  error?: ErrorRecord | null;
  /** pending: usually now; waiting: the timer (or null for an event-only wait). */
  readyAt: number | null;
  wakeAt?: number | null;
  waitingFor?: string[];
  /** Inserted in the same transaction (e.g. a child's result for its parent). */
  events?: NewEvent[];
}

export type ReleaseOutcome = { ok: true; run: RunRecord } | { ok: false; reason: "lease-lost" };

export interface WorkerRecord {
  id: string;
  host: string;
  pid: number;
  /** "name@version" pairs this worker executes. */
  workflows: string[];
  startedAt: number;
  heartbeatAt: number;
}

export interface RunFilter {
  status?: RunStatus | RunStatus[];
  workflow?: string;
  parentId?: string;
  limit?: number;
  /** Only runs created strictly before this run (by createdAt, id): for paging. */
  before?: { createdAt: number; id: string };
}

/** A hint that something changed: runs may be claimable, a run finished, a cancel came.
 *  Hints may be lost or duplicated; polling stays the source of truth. */
export interface StoreHint {
  kind: "runnable" | "finished" | "cancel";
  runId?: string;
}

export type SendEventOutcome =
  | { ok: true; event: EventRecord }
  | { ok: false; reason: "not-found" }
  | { ok: false; reason: "finished"; status: RunStatus };

export type CancelOutcome =
  /** Done now (the run was not executing), or it already was canceled. */
  | { state: "canceled"; run: RunRecord }
  /** The run is executing: its owner stops it (status changes when it releases). */
  | { state: "requested"; run: RunRecord }
  | { state: "not-found" }
  | { state: "finished"; run: RunRecord };

export type ResumeOutcome =
  | { ok: true; run: RunRecord }
  | { ok: false; reason: "not-found" }
  | { ok: false; reason: "status"; run: RunRecord };

export interface Store {
  /** A name for messages: the file path or the database/schema. */
  readonly description: string;

  /** Opens (and migrates) the store; may be called by several engines, counted. */
  open(options: { clock: Clock }): Promise<void>;
  /** Closes once every opener has closed. */
  close(): Promise<void>;

  /** The store's current time (ms), as used for leases and timers. */
  now(): Promise<number>;

  // ---- runs ----
  /** Inserts a pending run (readyAt = now). Idempotent on id: returns the existing run
   *  with created=false and changes nothing if the id exists (whatever its workflow). */
  createRun(run: NewRun): Promise<{ run: RunRecord; created: boolean }>;
  getRun(id: string): Promise<RunRecord | undefined>;
  listRuns(filter?: RunFilter): Promise<RunRecord[]>;

  // ---- execution ----
  /** Claims up to `limit` runs whose readyAt <= now and whose "workflow@version" is in
   *  `workflows`, status pending/waiting/running(lease expired)/paused(for version);
   *  never a run whose leaseOwner is `workerId`. Sets status running, leaseOwner,
   *  leaseUntil = readyAt = now + leaseMs, epoch + 1. Uses SKIP LOCKED where it exists. */
  claimRuns(p: {
    workerId: string;
    workflows: string[];
    limit: number;
    leaseMs: number;
  }): Promise<ClaimedRun[]>;

  /** Extends the leases of runs this worker holds at the given epochs. Returns the runs
   *  whose lease is gone (epoch moved on or the run is no longer running) and the runs
   *  with a pending cancel request. */
  renewLeases(p: {
    workerId: string;
    runs: Array<{ runId: string; epoch: number }>;
    leaseMs: number;
  }): Promise<{ lost: string[]; cancelRequested: string[] }>;

  /** Group commit: applies each RunWrite atomically and all of them in one transaction
   *  where the backend can. Each write is fenced by its epoch. Writing a record identical
   *  to an existing one under the same key is a no-op (ok); a different one is a conflict.
   *  Step and attempt spend is added to the run's budgetSpent in the same transaction. */
  appendRecords(writes: RunWrite[]): Promise<WriteOutcome[]>;

  /** Ends an execution: sets the status and clears the lease, fenced by epoch. A release
   *  to waiting for which an unconsumed event with a name in waitingFor exists becomes
   *  ready now. A release to pending/waiting/paused of a run with cancelRequested becomes
   *  canceled (reason kept from the request). */
  releaseRun(r: Release): Promise<ReleaseOutcome>;

  /** Reads everything replay needs for a run, in one query. */
  loadJournal(runId: string): Promise<Journal>;

  // ---- events ----
  /** Stores an event durably. A waiting run becomes ready now. An event for an unknown or
   *  terminal run is refused. */
  sendEvent(e: NewEvent): Promise<SendEventOutcome>;

  // ---- control ----
  /** Cancels a run: at once if it is not executing, else sets cancelRequested. */
  requestCancel(runId: string, reason: string): Promise<CancelOutcome>;

  /** A paused or failed run becomes pending (ready now). A failed run gets generation + 1
   *  and its error cleared. budgetLimit entries given replace the named limits. */
  resumeRun(runId: string, p: { budgetLimit?: Amounts }): Promise<ResumeOutcome>;

  /** Creates `run` (as createRun) with copies of the source run's steps whose seq is below
   *  `beforeSeq` (and their attempts, of the source's current generation); budgetSpent is
   *  their spend. The source is not touched. Fails with created=false if the id exists. */
  forkRun(p: { sourceId: string; run: NewRun; beforeSeq: number }): Promise<{
    run: RunRecord;
    created: boolean;
  }>;

  /** Marks runs that are ready (readyAt <= now - graceMs) but whose "workflow@version" is
   *  not in `served` as paused (pausedFor "version", reason naming it). Returns how many. */
  markUnserved(p: { served: string[]; graceMs: number }): Promise<number>;

  // ---- workers ----
  /** Inserts or replaces a worker row (heartbeatAt = now). */
  registerWorker(w: Omit<WorkerRecord, "startedAt" | "heartbeatAt">): Promise<void>;
  heartbeatWorker(id: string): Promise<void>;
  /** Removes the row and makes every run it leases claimable now (readyAt = now). */
  removeWorker(id: string): Promise<void>;
  listWorkers(): Promise<WorkerRecord[]>;

  // ---- hints ----
  /** Subscribes to change hints (in-process for SQLite, LISTEN/NOTIFY for PostgreSQL). */
  subscribe(listener: (hint: StoreHint) => void): () => void;
}

/** The reason a backend records for a run no live worker can execute, in API.md's exact
 *  wording (the PostgreSQL backend builds the same text in SQL). */
export function unservedReason(workflowAtVersion: string): string {
  return `no live worker has ${workflowAtVersion}`;
}
