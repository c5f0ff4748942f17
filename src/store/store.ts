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
import { MAX_DURATION_MS } from "../lib/duration.js";
import type { ApprovalVerbs } from "./approval-records.js";
import type { WorkspaceVerbs } from "./workspace-records.js";

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

/** Whether a run of `status` keeps an event another run's transition sends it (a child's
 *  end for its parent, Release's events, requestCancel's parentEvent): an unfinished run,
 *  and a failed one, which a resume executes again. Dropped for a failed parent, a child's
 *  end was lost once the child was deleted (retention, deleteRun): the resumed parent
 *  created the child again, and its steps ran a second time, when the failed execution had
 *  not recorded the call. sendEvent still refuses every finished run. */
export function keepsSentEnds(status: RunStatus): boolean {
  return status === "failed" || !TERMINAL_STATUSES.has(status);
}

export interface PendingEventsOptions {
  /** Wait for an event write under way (see Store.pendingEvents). */
  settled?: boolean;
}

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
  /** Every call whose error failed the run, with the generation that recorded it. After a
   *  resume (a later generation) such a call executes again; a failure the workflow caught
   *  is never in this list, so it replays as recorded. */
  failedCalls: Array<{ key: string; generation: number }>;
  /** The W3C traceparent of the start() call that created the run (OpenTelemetry), or null:
   *  each execution's span joins that trace. */
  traceContext: string | null;
  /** A child run's: the digest of the input its parent's ctx.child handed in (before the
   *  child's input schema), as NewRun gave it; null for other runs and for runs created
   *  before cairn kept it (absent from a store that does not keep it). */
  handedInputDigest?: string | null;
  /** A run released while a step body of it still ran in its worker (Release's heldFor):
   *  that worker, and until when (ms, the store's time) no other worker claims the run.
   *  Both null when no hold was set since the last claim or release, or the hold was ended;
   *  a heldUntil past means the hold has run out (absent from a store that does not keep
   *  them). */
  heldBy?: string | null;
  heldUntil?: number | null;
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
  /** A W3C traceparent (at most 256 characters), stored as given. */
  traceContext?: string | null;
  /** For a child run: a digest of the input as its parent's call handed it in, stored as
   *  given. A parent that crashed between the child's create and its own record of the call
   *  compares its replayed call with it (a schema's output, stored as the input, cannot be). */
  handedInputDigest?: string | null;
  /** Create the run already claimed by this worker (status running, epoch 1, leased for
   *  leaseMs), in the same transaction: the engine whose own worker serves the workflow
   *  executes it at once, with no claim round and no journal read (it is empty). Only a
   *  created run is claimed; an existing id is returned untouched. */
  claimBy?: { workerId: string; leaseMs: number };
}

export type StepKind =
  | "step"
  | "effect"
  | "sleep"
  | "wait"
  | "child"
  | "now"
  | "random"
  | "uuid"
  | "approval";

/** A completed call: its outcome, a value or the final error the workflow saw. Insert-only,
 *  unique on (runId, key, generation), never updated or deleted. A key holds a record of a
 *  later generation only when the earlier one is an error that failed the run (see
 *  RunRecord.failedCalls) and the run was resumed. */
export interface StepRecord {
  runId: string;
  key: string;
  /** The run generation that recorded this outcome. */
  generation: number;
  /** Call order within the run (0-based). */
  seq: number;
  name: string;
  kind: StepKind;
  /** "error": the call's final outcome was an error the workflow saw (recorded so that
   *  replay rethrows it instead of executing again). */
  outcome: "ok" | "error";
  /** Position of this outcome in the run's delivery order: a replay hands recorded outcomes
   *  to the workflow one at a time in this order, as the first run received them. null for
   *  ctx.now/random/uuid (they deliver nothing) and for records from before ordered replay. */
  delivery: number | null;
  /** How many outcomes the run had delivered when this call was made (null on records from
   *  before ordered replay). */
  issuedAfter: number | null;
  /** The call was made outside any delivery's cascade: after the workflow awaited something
   *  that is not a recorded call (a timer, a file). Its position among calls is timing. */
  issuedLate: boolean;
  /** Encoded value when outcome is "ok". */
  result: string | null;
  error: ErrorRecord | null;
  /** Spend of the attempt that completed the call. */
  spend: Amounts;
  /** The attempt number that completed the call (1-based). */
  attempt: number;
  startedAt: number;
  completedAt: number;
  /** An effect's value: true when `reconcile` found it (perform was not called by the
   *  attempt that completed it), false when `perform` made it. Absent for other calls and
   *  for records written before cairn recorded it. */
  reconciled?: boolean;
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
  /** The sender's idempotency key, if it gave one (unique per run). */
  idempotencyKey: string | null;
}

/** An unconsumed event without its payload (Store.pendingEventHeads, and loadJournal's
 *  `eventHeads` when asked with `eventPayloads: false`): what an execution needs to know of
 *  events it may never wait for. Its payload is read by Store.eventPayloads when a wait
 *  takes it. */
export type EventHead = Omit<EventRecord, "payload">;

/** An unconsumed event as an execution holds it: whole, or its head until a wait takes it
 *  and its payload is read (Store.eventPayloads). */
export type PendingEvent = EventHead & { payload?: string };

/** An event's payload by its seq (Store.eventPayloads). */
export interface EventPayload {
  seq: number;
  payload: string;
}

export interface LoadJournalOptions {
  /** false: the unconsumed events come without their payloads, as `eventHeads` (`events`
   *  is then empty). A store without `eventPayloads` ignores it. */
  eventPayloads?: boolean;
  /** false: no unconsumed event is read (`events` empty, no `eventHeads`): the caller reads
   *  them by name (Store.pendingEventHeadsNamed), or needs none (fork, inspection). A store
   *  may ignore it and answer them as the other options ask. */
  pendingEvents?: boolean;
}

/** Which heads Store.pendingEventHeadsNamed reads: the run's unconsumed events named
 *  `name` with a seq above `after` (0: from the first), oldest first, at most `limit`. */
export interface EventHeadsPage {
  name: string;
  after: number;
  limit: number;
}

export interface NewEvent {
  runId: string;
  name: string;
  payload: string;
  /** Makes the send idempotent: a second event with the same key for the same run is not
   *  stored (sendEvent answers with the first one). */
  idempotencyKey?: string | null;
  /** Refuse the event ("limit") if the run already has this many events, consumed or not.
   *  Events whose name starts with "cairn." (a child's result, sent by cairn) are not counted. */
  maxEvents?: number;
  /** Refuse the event ("limit") if the run already has this many unconsumed events (not
   *  counting "cairn." ones either). */
  maxPending?: number;
}

/** Everything replay needs, read in ONE query. Events: only unconsumed ones, oldest first. */
export interface Journal {
  steps: StepRecord[];
  attempts: AttemptRecord[];
  intents: IntentRecord[];
  events: EventRecord[];
  /** Asked with `eventPayloads: false` (LoadJournalOptions): the unconsumed events without
   *  their payloads, oldest first, instead of `events` (then empty). Absent otherwise. */
  eventHeads?: EventHead[];
}

/** A page of a run's journal for inspection (Store.readJournalPage): its completed calls
 *  from a position in call order on, each with what else the journal holds of it. */
export interface JournalPage {
  /** Each call's latest outcome (the record of its highest generation) whose seq is at least
   *  `from`, ordered by (seq, key): `limit` of them, or fewer on the last page. A page never
   *  splits the calls of one seq (several keys hold one after a resume), so a page ends
   *  early before such a group, or holds a whole group larger than `limit` on its own. */
  steps: StepRecord[];
  /** The attempts and intents of those calls and, on the last page (`more` false), of every
   *  call begun but not completed (no step record under its key), in loadJournal's order. */
  attempts: AttemptRecord[];
  intents: IntentRecord[];
  /** Completed calls follow this page: ask for the next from the last step's seq + 1. */
  more: boolean;
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
  | { ok: false; reason: "conflict"; key: string }
  /** A record of this write cannot be stored exactly by every backend (NUL or a lone
   *  surrogate in a text field, a number that is not a finite whole number; storable.ts):
   *  nothing of this write was written, and the other writes of the batch are unaffected.
   *  `message` names the field and why, never the value. */
  | { ok: false; reason: "unstorable"; key: string; message: string };

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
  /** Inserted instead, only when a cancel requested meanwhile turns this release into
   *  canceled (a child's "canceled" result for its parent). */
  eventsIfCanceled?: NewEvent[];
  /** status failed: the keys of the calls whose errors failed the run (each appended, with
   *  the run's generation, to failedCalls): one, or several for Promise.any's AggregateError;
   *  none when the workflow's own code threw. */
  failedKeys?: string[];
  /** status paused: the run was taken from a crashed worker and no replay has charged that
   *  crash yet. The store keeps the mark (a resume too), and the run's next claim takes it
   *  as recovered (ClaimedRun.recovered) and clears it. */
  crashUnjudged?: boolean;
  /** Not completed or canceled: a step body of the run still runs in the releasing worker
   *  (past its abort's grace). Until `ms` from the store's now no other worker claims the run
   *  (a resume or an event makes it ready, not claimable by them), as if `workerId` still
   *  held its lease: claimed meanwhile, the same call would begin beside that body. The
   *  releasing worker may claim it (it keeps such a run unexecuted until the body ends). The
   *  next claim or release clears the hold. */
  heldFor?: { workerId: string; ms: number };
}

/** Store.resumeRun's options. */
export interface ResumeOptions {
  /** Raises the named limits. */
  budgetLimit?: Amounts;
  /** The name of the event this run's end sends its parent (a child's). An unconsumed one
   *  kept for a failed parent (keepsSentEnds) is withdrawn: the resumed run's end is no
   *  longer that one, and the parent's resume took the stale end (a failure the child
   *  was resumed from) for the child's outcome. */
  sentEnd?: string;
}

/** Store.renewLeases's argument. */
export interface RenewLeases {
  workerId: string;
  runs: Array<{ runId: string; epoch: number }>;
  leaseMs: number;
  /** Runs held for this worker's step bodies (Release's heldFor) whose holds go on. */
  holds?: string[];
  /** Runs held for this worker's step bodies whose bodies have all ended: each one's hold,
   *  if still this worker's and set at `epoch` (no claim cleared it since), ends now, so
   *  another worker may claim the run at once rather than once the hold runs out. */
  endHolds?: Array<{ runId: string; epoch: number }>;
}

/** The run as a release left it: a RunRecord but for its input, which no release changes and
 *  the releasing worker holds already (a store need not send it back: PostgreSQL does not,
 *  which saved a 1 MB input's second trip over the wire per run). A store may answer the
 *  whole RunRecord. */
export type ReleasedRun = Omit<RunRecord, "input">;

export type ReleaseOutcome = { ok: true; run: ReleasedRun } | { ok: false; reason: "lease-lost" };

/** What a release sets, for a run released in the very transaction that creates it
 *  (Store.createReleasedRun): its fence is the created run's. */
export type RunEnd = Omit<Release, "runId" | "epoch">;

export interface WorkerRecord {
  id: string;
  host: string;
  pid: number;
  /** Identity of the worker's PID namespace (lib/process-identity.ts): its pid means the
   *  same process only to a reader with the same identity. null: unknown. */
  pidNamespace?: string | null;
  /** "name@version" pairs this worker executes. */
  workflows: string[];
  /** How long this worker's leases last: its row is judged by it (a heartbeat older than
   *  its own lease is dead), not by the reader's. null or absent: unknown (a row written
   *  before it was stored), judged by the reader's lease. */
  leaseMs?: number | null;
  startedAt: number;
  heartbeatAt: number;
}

export interface RunFilter {
  status?: RunStatus | RunStatus[];
  workflow?: string;
  /** Only runs of this version (of any workflow, or of `workflow` when given). */
  version?: string;
  parentId?: string;
  /** Only runs whose id contains this text (case-sensitive, taken literally). */
  idContains?: string;
  /** Only waiting runs that wait for an event (waitingFor is not empty). */
  waitingForEvent?: boolean;
  /** Only waiting runs that wait for an event whose name starts with this text (e.g. the
   *  "cairn.approval:" events of approvals). */
  waitingForEventPrefix?: string;
  /** Only finished runs (completed, failed, canceled) last updated (finished) strictly
   *  before this time (ms): what retention deletes. */
  finishedBefore?: number;
  limit?: number;
  /** Only runs created strictly before this run (by createdAt, id): for paging. */
  before?: { createdAt: number; id: string };
}

/** A hint that something changed: runs may be claimable, a run finished, a cancel came, an
 *  event was stored for a run executing now (its execution may look at once). Hints may be
 *  lost or duplicated; polling stays the source of truth. */
export interface StoreHint {
  kind: "runnable" | "finished" | "cancel" | "event";
  runId?: string;
}

export type SendEventOutcome =
  /** duplicate: an event with this idempotency key was stored before; nothing changed. */
  | { ok: true; event: EventRecord; duplicate: boolean }
  | { ok: false; reason: "not-found" }
  | { ok: false; reason: "finished"; status: RunStatus }
  /** An event with this idempotency key but another name or payload exists (`event`). */
  | { ok: false; reason: "key-conflict"; event: EventRecord }
  /** NewEvent.maxEvents or maxPending is reached (`count` events of that kind exist). */
  | { ok: false; reason: "limit"; limit: "events" | "pending"; count: number };

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
  | { ok: false; reason: "status"; run: RunRecord }
  /** A paused or failed child whose parent run (`run.parentId`) was canceled: resumed, it
   *  would work (and spend) for nobody, and no cancel cascade would reach it again. */
  | { ok: false; reason: "parent-canceled"; run: RunRecord };

// ---- shared rate limits and run streams (used by cairn/ai) ----

/** Limits of one shared rate limiter, over a rolling minute. A limit left out is not
 *  enforced; a limiter with none still honours blockRate (a provider's 429). */
export interface RateLimits {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
}

export type AcquireRateOutcome =
  | { granted: true }
  /** Not now: ask again after `waitMs` (the store's time), when the window has room or
   *  the limiter's block ends. */
  | { granted: false; waitMs: number };

/** One chunk of a run's stream: `offset` counts from 0 per run, in append order. */
export interface StreamChunk {
  offset: number;
  data: string;
  createdAt: number;
}

/** `finished`: the run had completed, failed or been canceled; nothing was appended (its
 *  stream's followers have ended, and would never see the chunks). */
export type AppendStreamOutcome =
  | { ok: true; offset: number }
  | { ok: false; reason: "not-found" | "finished" };

/** The verbs below, plus workspace checkpoints and retention (workspace-records.ts) and
 *  approvals (approval-records.ts). */
export interface Store extends WorkspaceVerbs, ApprovalVerbs {
  /** A name for messages: the file path or the database/schema. */
  readonly description: string;

  /** Opens (and migrates) the store; may be called by several engines, counted. */
  open(options: { clock: Clock }): Promise<void>;
  /** Closes once every opener has closed. */
  close(): Promise<void>;

  /** The store's current time (ms), as used for leases and timers. */
  now(): Promise<number>;

  /** Marks the store as one that holds encrypted payloads (encryptedStore does when it
   *  opens it); idempotent, never undone by cairn. Optional: a store without it is never
   *  marked. */
  markEncrypted?(): Promise<void>;
  /** True once markEncrypted was called on this database (by any process): the store then
   *  refuses a payload written in plain text (EncryptionKeyMissingError, nothing written),
   *  whoever writes it (store/plain-payloads.ts). A store that implements markEncrypted
   *  refuses so (the contract suite checks it). */
  isMarkedEncrypted?(): Promise<boolean>;
  /** Removes the mark: for a store whose workers no longer encrypt, for good (an
   *  encryptedStore that opens it marks it again). */
  unmarkEncrypted?(): Promise<void>;

  // ---- runs ----
  /** Inserts a pending run (readyAt = now), or with `claimBy` a run claimed by that
   *  worker (as claimRuns would leave it: running, its first epoch, leaseUntil = readyAt =
   *  now + leaseMs). A new run's epochs start above those of every deleted run (the epoch
   *  floor), so a write fenced with a deleted run's epoch never lands in it. Idempotent on id: returns the existing run with created=false and
   *  changes nothing if the id exists (whatever its workflow). */
  createRun(run: NewRun): Promise<{ run: RunRecord; created: boolean }>;
  /** Optional. As createRun with `claimBy`, and in the same transaction (one commit),
   *  `end()` is asked for the run's release: a RunEnd is applied as releaseRun would (fenced
   *  by the epoch the run was created with), undefined leaves it claimed. Asked inside the
   *  transaction, before the run is written (SQLite inserts a released run as its release
   *  leaves it); asked again if the transaction is retried (it answers the same). An
   *  existing id is returned untouched, whatever `end` answered (a throw still fails the
   *  call). The engine asks it as it would
   *  createRun, and answers from `end` whether the run's workflow has already ended needing no
   *  record (engine/folded-start.ts): on SQLite the create waits for the turn's group
   *  commit, and a run with no call costs one commit instead of two. Only for a store whose
   *  clock is the engine's (SQLite): the run is executed before the store stamps its lease. */
  createReleasedRun?(
    run: NewRun & { claimBy: NonNullable<NewRun["claimBy"]> },
    end: () => RunEnd | undefined,
  ): Promise<{ run: RunRecord; created: boolean }>;
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
   *  with a pending cancel request. `holds`: runs released with `heldFor` this worker
   *  whose step body still runs here; each one's hold, while it is still this worker's (no
   *  claim or release cleared it), is extended to `leaseMs` from now, as a lease is: a
   *  hold ended while the body ran on let another worker begin the same call beside it.
   *  `endHolds`: holds ended now, their bodies having ended (a store that ignores it leaves
   *  them to run out). */
  renewLeases(p: RenewLeases): Promise<{ lost: string[]; cancelRequested: string[] }>;

  /** Ends the lease of a run at `epoch` now, leaving it running with no owner: the next
   *  claimer (any worker, this one too) takes it over as from a crashed worker
   *  (`recovered`), so it charges the crash the run's replay judges. For a worker that gives
   *  up a run taken over from a crashed worker before its replay judged that crash (a
   *  store error, close()): handed back to pending, that crash would be charged nothing.
   *  ok false: the epoch moved on, the run is no longer running, or a cancel was asked for
   *  it (nothing written: release it instead, and it ends canceled).
   *  `onlyIfRecovered`: only if the claim that holds the lease took the run from a crashed
   *  worker (ClaimedRun.recovered), which the store remembers (ok false otherwise): for a
   *  worker that never heard its claim's answer, and so cannot tell. */
  expireLease(p: { runId: string; epoch: number; onlyIfRecovered?: boolean }): Promise<{
    ok: boolean;
  }>;

  /** Group commit: applies each RunWrite atomically and all of them in one transaction
   *  where the backend can. Each write is fenced by its epoch. Writing a record identical
   *  to an existing one under the same key is a no-op (ok); a different one is a conflict.
   *  A write the backend cannot store is "unstorable" and fails alone: the other writes of
   *  the batch still land. Step and attempt spend is added to the run's budgetSpent in the
   *  same transaction. */
  appendRecords(writes: RunWrite[]): Promise<WriteOutcome[]>;

  /** Ends an execution: sets the status and clears the lease, fenced by epoch; a run no
   *  longer running (released already under that epoch) is "lease-lost", never rewritten
   *  (a retry of a release whose commit's answer was lost finds its own release). A release
   *  to waiting for which an unconsumed event with a name in waitingFor exists becomes
   *  ready now. A release to pending/waiting/paused of a run with cancelRequested becomes
   *  canceled (reason kept from the request). */
  releaseRun(r: Release): Promise<ReleaseOutcome>;

  /** Reads everything replay needs for a run, in one query. With `eventPayloads: false`
   *  (asked only of a store with `eventPayloads`), the unconsumed events come as
   *  `eventHeads`, without their payloads; a store may ignore the option and answer
   *  `events` whole. */
  loadJournal(runId: string, options?: LoadJournalOptions): Promise<Journal>;

  /** A page of the run's journal for inspection, read in one snapshot, costing the page
   *  (indexed by (run_id, seq)), not the run: see JournalPage. `limit` >= 1. An unknown run
   *  has an empty last page. */
  readJournalPage(p: { runId: string; from: number; limit: number }): Promise<JournalPage>;

  /** The run's unconsumed events, oldest first (what loadJournal returns as `events`),
   *  without the rest of the journal: a run executing in one process learns of events
   *  sent by another. `settled`: the run looks once more after a wait's deadline, and the
   *  read must also see an event (or approval answer) whose write was under way, stamped
   *  before the deadline: it waits for such a write to commit. */
  pendingEvents(runId: string, options?: PendingEventsOptions): Promise<EventRecord[]>;

  /** Optional, with `eventPayloads`: `pendingEvents` without the payloads (the same events,
   *  order and `settled` semantics). An execution then reads a payload only when a wait
   *  takes its event: a run waiting for one name pays nothing for the thousands of events
   *  of another name it has been sent. */
  pendingEventHeads?(runId: string, options?: PendingEventsOptions): Promise<EventHead[]>;

  /** Optional, with `eventPayloads`: a page of `pendingEventHeads` of one name (see
   *  EventHeadsPage; the same `settled` semantics), costing the page, not the run's other
   *  pending events (indexed by run, name and seq). An execution reads the events of the
   *  names its waits name, a page at a time, and, to learn of events sent since, only past
   *  the last seq it read: so a store that offers this verb makes a run's events visible in
   *  seq order (an event never commits before one of the same run with a lower seq). */
  pendingEventHeadsNamed?(
    runId: string,
    page: EventHeadsPage,
    options?: PendingEventsOptions,
  ): Promise<EventHead[]>;

  /** Optional, with `pendingEventHeadsNamed`: the pages of several names in one read, as
   *  pendingEventHeadsNamed reads each (an execution reads with its first read the results of
   *  the children its journal holds begun and unfinished: a parent replayed after N children
   *  ended reads their N results' heads in one call, not N). Every page's heads, each
   *  page's oldest first, pages in the order given. */
  pendingEventHeadsOfNames?(
    runId: string,
    pages: readonly EventHeadsPage[],
    options?: PendingEventsOptions,
  ): Promise<EventHead[]>;

  /** Optional, with `pendingEventHeads`: the payloads of run `runId`'s events with these
   *  seqs, consumed or not, in any order; a seq the run has no event under is left out. */
  eventPayloads?(runId: string, seqs: readonly number[]): Promise<EventPayload[]>;

  // ---- events ----
  /** Stores an event durably. A waiting run becomes ready now. An event for an unknown or
   *  terminal run is refused. With an idempotency key already used for this run, nothing
   *  is stored: the same name and payload answer the stored event (duplicate, even if the
   *  run has finished since), another name or payload answers key-conflict. */
  sendEvent(e: NewEvent): Promise<SendEventOutcome>;
  /** Every event of a run, consumed or not, in the order sent (for inspection). */
  listEvents(runId: string): Promise<EventRecord[]>;
  /** A page of the run's events, consumed or not: those with seq > `after`, in the order
   *  sent, at most `limit` (>= 1). An event appended meanwhile always has a higher seq than
   *  every event committed before it (events to one run are stored under its row's lock),
   *  so paging by `after` sees each event once. */
  readEvents(p: { runId: string; after: number; limit: number }): Promise<EventRecord[]>;

  // ---- control ----
  /** Cancels a run: at once if it is not executing, else sets cancelRequested. A run
   *  canceled at once that has a parent gets `parentEvent` stored for that parent in the
   *  same transaction, as releaseRun stores its events (waking the parent if it waits for
   *  the name; dropped if the parent is gone or finished): the engine passes the child's
   *  result, so a parent waiting on a canceled child learns of it. The store knows
   *  neither the event's name nor its encoding. */
  requestCancel(
    runId: string,
    reason: string,
    p?: { parentEvent?: { name: string; payload: string } },
  ): Promise<CancelOutcome>;

  /** A paused or failed run becomes pending (ready now). A failed run gets generation + 1
   *  and its error cleared. budgetLimit entries given replace the named limits. */
  resumeRun(runId: string, p: ResumeOptions): Promise<ResumeOutcome>;

  /** Creates `run` (as createRun) at the source's generation, with copies of the source
   *  run's step records named in `copy` (by key and generation; each keeps its generation)
   *  and of every attempt of those keys (in the new run's generation), and the intent of
   *  each copied record of kind "child" (what the call recorded of its child, which a replay
   *  checks the call against); budgetSpent is their spend. A copy marked `unordered` gets issuedAfter null (handed over when its call is
   *  made: the source had it outside the delivery order, from a history a resume replaced)
   *  and the generation `since`. The new run also holds every workspace object the source
   *  holds (its refs are copied), so deleting the source leaves the checkpoints the copies
   *  name. The source is not touched. Fails with created=false if the id exists. */
  forkRun(p: {
    sourceId: string;
    run: NewRun;
    /** `unordered`: copied with issuedAfter null (handed over when called); its generation
     *  in the fork is `since` (the generation whose failure put it out of the order; absent:
     *  the fork's). Ordered copies keep their generation; the fork takes the source's. */
    copy: Array<{ key: string; generation: number; unordered?: boolean; since?: number }>;
    /** The source's createdAt as read when `copy` was chosen: a run under `sourceId` created
     *  at another time (the source deleted, its id taken since) is refused as not found. */
    sourceCreatedAt?: number;
  }): Promise<{
    run: RunRecord;
    created: boolean;
  }>;

  /** Marks runs that are ready (readyAt <= now - graceMs) but whose "workflow@version" is
   *  not in `served` as paused (pausedFor "version", reason naming it), or canceled if a
   *  cancel was requested (then a waiting parent becomes ready: it reads its child's
   *  outcome). Returns how many; `canceled` is told the ids of the runs it canceled once
   *  that has committed (their children are canceled with them). */
  markUnserved(p: {
    served: string[];
    graceMs: number;
    canceled?(runIds: string[]): void;
  }): Promise<number>;

  /** Optional. Up to `limit` (>= 1) unfinished runs (pending, running, waiting, paused)
   *  whose parent run is canceled and that have no cancel requested yet, in no set order:
   *  children a cancel's cascade left behind (the process that canceled the parent died, or
   *  its store failed, before it canceled them). Ids only, read in one indexed query; the
   *  worker cancels each through requestCancel (engine/children-of-canceled.ts). A store
   *  without it leaves such children to whoever cancels the parent again. */
  listChildrenOfCanceled?(p: {
    limit: number;
  }): Promise<Array<{ runId: string; parentId: string }>>;

  // ---- workers ----
  /** Inserts or replaces a worker row (heartbeatAt = now). */
  registerWorker(w: Omit<WorkerRecord, "startedAt" | "heartbeatAt">): Promise<void>;
  heartbeatWorker(id: string): Promise<void>;
  /** Removes the row and makes every run it leases claimable now (readyAt = now), and
   *  ends every hold it has (Release's heldFor: the worker is known dead, so no body of it
   *  runs); with `expireLeases: false` only the row goes (its runs' leases and holds end
   *  when they end). */
  removeWorker(id: string, options?: { expireLeases?: boolean }): Promise<void>;
  listWorkers(): Promise<WorkerRecord[]>;

  // ---- shared rate limits (cairn/ai) ----
  /** Takes one request and `tokens` tokens from limiter `key` if its rolling minute has
   *  room (grants older than 60 s no longer count) and it is not blocked; records the grant
   *  under `grantId`. Acquirers of one key are serialised, so every worker on the store
   *  shares one window. Idempotent on (key, grantId): a grant that exists answers granted.
   *  A request of more tokens than tokensPerMinute counts as tokensPerMinute. */
  acquireRate(p: {
    key: string;
    grantId: string;
    tokens: number;
    limits: RateLimits;
  }): Promise<AcquireRateOutcome>;
  /** Sets a grant's tokens to what the call really used (no-op if the grant is gone). */
  settleRate(p: { key: string; grantId: string; tokens: number }): Promise<void>;
  /** Blocks limiter `key` for every acquirer until now + forMs (a provider said 429); an
   *  existing later block is kept. */
  blockRate(p: { key: string; forMs: number }): Promise<void>;

  // ---- run streams (cairn/ai) ----
  /** Appends chunks to the run's stream, in order, at the next offsets; returns the first
   *  one's. Appends to one run are serialised, so a reader that read up to offset n never
   *  later finds a new chunk below n. Not fenced: the stream is a side channel, never part
   *  of the journal. Refused (`finished`) once the run has finished, checked atomically
   *  with the append (a finish waits for an append in flight, or the append sees it): every
   *  chunk stored was appended before the run's finished status, so a follower that saw that
   *  status misses none by reading once more. A resumed run takes appends again. */
  appendStream(p: { runId: string; chunks: string[] }): Promise<AppendStreamOutcome>;
  /** The run's chunks with offset >= from, oldest first, at most `limit` (default 1,000). */
  readStream(p: { runId: string; from: number; limit?: number }): Promise<StreamChunk[]>;

  // ---- hints ----
  /** Subscribes to change hints (in-process for SQLite, LISTEN/NOTIFY for PostgreSQL). */
  subscribe(listener: (hint: StoreHint) => void): () => void;
}

/** The reason a backend records for a run no live worker can execute, in the wording of
 *  docs/API.md (the PostgreSQL backend builds the same text in SQL). */
export function unservedReason(workflowAtVersion: string): string {
  return `no live worker has ${workflowAtVersion}`;
}

/** The rolling window of a shared rate limiter (RateLimits are per minute). */
export const RATE_WINDOW_MS = 60_000;

/** A grant's tokens as stored: a whole number from 0 to 2^53 - 1 (NaN is 0). Past 2^63
 *  PostgreSQL's bigint refused it (every acquire of such a call failed) where SQLite stored
 *  a REAL: an estimate of a call with a huge maxOutputTokens and no tokensPerMinute. */
export function grantTokens(tokens: number): number {
  return Math.min(Number.MAX_SAFE_INTEGER, Math.max(0, Math.ceil(tokens) || 0));
}

/** How long blockRate blocks for `forMs`: at least 0, at most the longest duration cairn
 *  schedules (a longer block, or Infinity, stored as given left every acquirer a wait no
 *  Date holds, or none at all: SQLite answered waitMs null). NaN stays NaN: refused. */
export function blockMs(forMs: number): number {
  return Math.min(MAX_DURATION_MS, Math.max(0, Math.ceil(forMs)));
}

/** Tokens a grant of `tokens` counts for under `limits`: one request may never need more
 *  than a whole minute's allowance, or it would wait forever. */
export function countedTokens(tokens: number, limits: RateLimits): number {
  const t = grantTokens(tokens);
  return limits.tokensPerMinute === undefined ? t : Math.min(t, limits.tokensPerMinute);
}
