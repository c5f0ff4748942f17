// The replay cursor: executes ONE replay of a run. It holds the run's journal (read once),
// answers every ctx call from it when a record exists, executes what is missing, and
// decides how the execution ends: completed, failed, suspended (every branch blocked on a
// wait), paused (budget), canceled, handed back (close), or lease lost. First run and
// resume are this one path.
//
// Invariants kept here:
// - record before resolve: a call's promise settles only after its record is durable, with
//   the DECODED copy of what was stored;
// - ordered delivery: outcomes reach the workflow one at a time, in the order the first run
//   received them (delivery.ts), so a replay takes every branch decision the first run took;
// - a failure the workflow saw (a step's last error, a failed child) is a record like a
//   value: a replay rethrows it, a resume executes it again only if it failed the run;
// - determinism: a recorded key holding another kind or name of call, a recorded call not
//   made again by the end of the cascade it was made in, or a name reused by concurrent
//   branches in an order only timing decides, fails the run with NonDeterminismError and
//   nothing more is written;
// - once halted, nothing more is written (but the spend of an attempt in flight when the
//   run was canceled or failed: settleInFlight) and late results are discarded.
//
// Workspaces (src/workspace/, workspace-calls.ts) take part through beforeExecute: before a
// new call executes, an open workspace whose directory is not known to hold its current
// checkpoint is restored.
//
// Why this file is still long: steps and effects (attempts, retries, timeouts, budget, crash
// charges), the replay checks (matching records, cascades, stalls) and suspension all read
// and change the same small state machine (the journal cursor, the count of active work, the
// set of blocked branches, the halt), and suspension is only correct if they all do it the
// same way. The call kinds that only use that machine live beside it and reach it through
// CallCore (call-core.ts): sleeps and waits (wait-calls.ts), approvals (approval-calls.ts),
// children (child-calls.ts), workspaces (workspace-calls.ts). Two parts of the replay checks
// keep their own state behind a narrow interface: the held hand-over (held-handover.ts: the
// hold of recorded outcomes while a doubtful late call's verdict is pending, its refusal past
// replayStallMs, and the waiters for that verdict) and the reused-name check of late calls
// (late-call-check.ts: recorded windows, where outcomes were handed over, cascade points).
// The loops that await the hold stay here (beforeExecute, finishWith), as do the end-of-
// cascade check (cascadeOver, missingCall) and the stall: they decide with the halt, the
// drain and the function's end, which are this file's. The parts that stand alone live beside
// it too: delivery order (delivery.ts), the causal call tree (call-scope.ts), the journal as this
// execution reads it (journal-index.ts), record builders (records.ts), the retry decision
// (retry.ts), what an approval hands the workflow (approval-outcome.ts), the budget's
// accounts (budget-ledger.ts), the crash's charges (crash-charges.ts) and how a call's error
// is marked with its key (call-errors.ts).

import { randomUUID } from "node:crypto";
import {
  copyAsStored,
  decode,
  EncodeError,
  encode,
  type StoredTexts,
  takeCopy,
} from "../codec/codec.js";
import {
  errorFromRecord,
  LeaseLostError,
  LimitError,
  NonDeterminismError,
  RunCanceledError,
  SerializationError,
  StepTimeoutError,
  StoreError,
  toErrorRecord,
  WriteConflictError,
} from "../errors.js";
import { addAmounts, amountNameProblem } from "../lib/amounts.js";
import { CALL_IS_LATE } from "../lib/call-late.js";
import type { Clock } from "../lib/clock.js";
import { toMs } from "../lib/duration.js";
import { FAIL_RUN } from "../lib/fail-run.js";
import { idempotencyKey } from "../lib/ids.js";
import { LazyAbort } from "../lib/lazy-abort.js";
import { NEXT_CALL_RECORDED } from "../lib/next-call-recorded.js";
import { unknownOptionNames, unknownOptionsText } from "../lib/option-names.js";
import { RUN_GENERATION } from "../lib/run-generation.js";
import { checkText, quoteGiven } from "../lib/text.js";
import { realDelay, setLongTimeout } from "../lib/timers.js";
import type {
  Amounts,
  AttemptRecord,
  ErrorRecord,
  EventHead,
  EventHeadsPage,
  EventPayload,
  Journal,
  PendingEvent,
  RunWrite,
  StepKind,
  StepRecord,
} from "../store/store.js";
import type { WorkspaceHost } from "../workspace/workspace.js";
import { ApprovalCalls } from "./approval-calls.js";
import { AttemptContext } from "./attempt-context.js";
import { BudgetLedger } from "./budget-ledger.js";
import {
  type BlockOn,
  type Call,
  type CallCore,
  type CallMethod,
  HaltedSignal,
  never,
} from "./call-core.js";
import { CALL_KEY, failedCallKeys, undecodableCall, unreadable } from "./call-errors.js";
import {
  bodyOfCurrentScope,
  type CallNode,
  enterCall,
  outsideWorkflow,
  ownerOfCurrentScope,
  runAtRoot,
  runInBody,
  scopeOf,
} from "./call-scope.js";
import { awaitedChildEvents, ChildCalls } from "./child-calls.js";
import type { FoundChild } from "./child-identity.js";
import {
  type Effect,
  STEP_OPTION_NAMES,
  type StepContext,
  type StepOptions,
  type WorkflowContext,
} from "./context-types.js";
import { CrashCharges } from "./crash-charges.js";
import type { Workflow } from "./define.js";
import { type DeliveryHooks, DeliveryQueue } from "./delivery.js";
import { EventReads } from "./event-reads.js";
import { HeldHandover } from "./held-handover.js";
import { type CascadeCall, JournalIndex } from "./journal-index.js";
import { eitherLate, LateCallCheck } from "./late-call-check.js";
import { type LateWork, trackLateWork } from "./late-work.js";
import {
  attemptRecord,
  intentIssuedLate,
  intentRecord,
  outcomeRecord,
  workerLostAttempt,
} from "./records.js";
import {
  isFatalFailure,
  judgeFailure,
  planNextAttempt,
  type RetryPolicy,
  resolvePolicy,
} from "./retry.js";
import { WaitCalls } from "./wait-calls.js";
import { WorkspaceCalls } from "./workspace-calls.js";

export type Outcome =
  | { kind: "completed"; output: unknown }
  /** failedKeys: the calls whose errors failed the run (none: the workflow's own code threw). */
  | { kind: "failed"; error: Error; failedKeys: string[] }
  | {
      kind: "suspended";
      wakeAt: number | null;
      waitingFor: string[];
      /** The wake is a retry backoff's end: the step and the attempt it starts. */
      backoff?: { key: string; attempt: number };
    }
  | { kind: "paused"; reason: string }
  | { kind: "canceled"; reason: string }
  | { kind: "lease-lost" }
  /** The store failed (connection lost, disk full): stop without failing the run; it is
   *  handed back and resumed from its journal. */
  | { kind: "interrupted"; error: Error }
  /** drain() (the engine closes): nothing was in flight any more; the run goes back to
   *  pending, for any worker, and no attempt of it was cut. */
  | { kind: "handed-back" }
  /** Replay-only mode: every recorded call matched and the code wants to execute or record
   *  something new (the end of the journal). */
  | { kind: "frontier"; key: string };

/** A child run's outcome as its parent reads it: the encoded output, or its error. */
export type ChildOutcome = { output: string } | { error: ErrorRecord };

/** What the context needs from the engine; nothing here knows about a backend. */
/** The span of one step attempt, as the engine's tracing provides it. */
export interface AttemptSpan {
  /** Runs the attempt's body with the span active. */
  run<T>(fn: () => T): T;
  end(p: {
    outcome: "ok" | "error" | "retry" | "interrupted";
    spend: Amounts;
    error?: ErrorRecord;
  }): void;
}

export interface ContextHost {
  runId: string;
  workflow: string;
  version: string;
  generation: number;
  /** The previous execution ended without releasing the run (a crash or a lost lease). */
  recovered: boolean;
  /** Replay only (the replay check): never execute a step body or write anything; stop at
   *  the first call that would. */
  replayOnly?: boolean;
  /** The run's create has not committed yet (engine/folded-start.ts): asks for it and
   *  settles true once the run is durable and this execution's, false if it is not (the
   *  execution is stopped then). No call begins before it settles true. */
  created?: () => true | Promise<boolean>;
  budgetLimit: Amounts;
  budgetSpent: Amounts;
  /** The calls whose errors failed the run (RunRecord.failedCalls). */
  failedCalls: ReadonlyArray<{ key: string; generation: number }>;
  clock: Clock;
  maxPayloadBytes: number;
  /** Backoffs up to this long wait in process; longer ones suspend the run. */
  inProcessRetryMs: number;
  /** How long (real time) an aborted attempt may take to settle, so that the spend it
   *  reports while stopping is recorded with it. */
  abortGraceMs: number;
  /** How long (real time) a replay waits for a call that the first run made after awaiting
   *  something that is not a recorded call (a timer, a file), before it gives up. */
  replayStallMs: number;
  retry?: Partial<RetryPolicy> | undefined;
  /** Durable write of this run's records (fenced by the execution's epoch). */
  commit(write: Omit<RunWrite, "runId" | "epoch">): Promise<void>;
  /** commit, answered by callbacks rather than a promise (optional): `written` once the
   *  write is durable, `failed` with what commit would have rejected with. Either may be
   *  called synchronously from the committer's settling of its batch. */
  commitThen?(
    write: Omit<RunWrite, "runId" | "epoch">,
    written: () => void,
    failed: (err: unknown) => void,
  ): void;
  /** Creates the child run (idempotent on its id), keeping `inputDigest` (the digest of the
   *  input as the call handed it, childInputDigest) with it: undefined when created now,
   *  else what the child found under its id was started as (`inputByName`, the input's
   *  digest as an older cairn took it, tells a found child that kept one). */
  startChild(
    childId: string,
    wf: Workflow<unknown, unknown>,
    input: unknown,
    inputDigest: string | undefined,
    inputByName?: string,
  ): Promise<FoundChild | undefined>;
  /** The child's outcome if it has finished, else undefined. */
  childOutcome(childId: string): Promise<ChildOutcome | undefined>;
  /** The error of a call whose child is no longer under its id (deleted, e.g. by retention),
   *  else undefined. */
  deletedChild(childId: string): Promise<ErrorRecord | undefined>;
  /** Re-reads the run's unconsumed events (after a hint that one arrived). */
  /** `settled`: the look after a wait's deadline, which also sees an event write under way
   *  (Store.pendingEvents). */
  loadEvents(settled?: boolean): Promise<PendingEvent[]>;
  /** The payloads of the run's events with these seqs (Store.eventPayloads): given when
   *  `loadEvents` and the journal may hand over events without their payloads. */
  eventPayloads?(seqs: readonly number[]): Promise<EventPayload[]>;
  /** A page of heads of the run's pending events of one name (Store.pendingEventHeadsNamed):
   *  given, with `eventPayloads`, the execution reads only the names its calls take events
   *  of (event-reads.ts), and `loadEvents` is not asked. */
  readEventHeads?(page: EventHeadsPage, settled: boolean): Promise<EventHead[]>;
  /** Pages of several names in one read (Store.pendingEventHeadsOfNames): given with
   *  readEventHeads when the store offers it. */
  readEventHeadsOfNames?(pages: readonly EventHeadsPage[], settled: boolean): Promise<EventHead[]>;
  /** The store's now (PostgreSQL: the database's clock), by which it stamps events and
   *  judges approval answers; absent: this clock's. */
  storeNow?(): Promise<number>;
  /** Problems worth an operator's attention (never user payloads). */
  log(message: string, err?: unknown): void;
  /** Calls a run may record (EngineOptions.limits); absent: no limit. */
  maxStepsPerRun?: number;
  /** Opens the span of one step attempt (OpenTelemetry, engine/tracing.ts); absent, or
   *  undefined returned: none. */
  traceAttempt?(a: {
    key: string;
    name: string;
    kind: StepKind;
    attempt: number;
  }): AttemptSpan | undefined;
  /** False once this worker cannot be sure it still holds the run's lease (no renewal for a
   *  whole lease: it was stopped, or lost the store). Asked right before an effect performs. */
  leaseFresh?(): boolean;
  /** Workspace checkpoints (ctx.workspace); absent in replay-only mode. */
  workspace?: WorkspaceHost;
  /** Stores a pending approval (idempotent, fenced by the execution's epoch; throws
   *  LeaseLostError when the run was taken over). Absent in replay-only mode. */
  requestApproval?(p: {
    key: string;
    name: string;
    request: string;
    requestedAt: number;
    deadline: number | null;
    onTimeout: "approve" | "reject";
    reopen?: boolean;
  }): Promise<{ deadline: number | null } | undefined>;
}

/** A call the journal holds that a function which settled did not make again: a record,
 *  or a call begun and not finished (`begun`). */
type MissingCall =
  | StepRecord
  | { kind: StepKind; name: string; key: string; issuedLate: boolean; begun: true };

interface Blocked extends BlockOn {
  wake: () => void;
  timer?: AbortController;
}

interface AttemptResult<T> {
  ok: boolean;
  value?: T;
  failure?: unknown;
  spend: Amounts;
  startedAt: number;
}

/** An attempt stepAtOnce made and hands on to runAttempts (anything but a value recorded at
 *  once): its number, span and result, and its value as encoded when it was. */
interface FirstAttempt<T> {
  attempt: number;
  span: AttemptSpan | undefined;
  result: AttemptResult<T>;
  encoded?: string | SerializationError;
}

export type { ApprovalAnswer } from "./approval-outcome.js";

const NAME_RE = /^[^@#\s][^#]{0,199}$/;

/** Whether `name` may name a call (ctx.step and the others, cairn/ai's model calls): 1-200
 *  characters, no "#" (cairn numbers reused names name#2, ...), not starting with "@" or a
 *  space. Text rules (NUL, lone surrogates) are checkText's. */
export function isCallName(name: unknown): name is string {
  return typeof name === "string" && NAME_RE.test(name);
}

/** After the workflow code started I/O of its own (not a timer), it counts as busy this
 *  long (late-work.ts). */
const LATE_WORK_GRACE_MS = 1_000;

/** How many payloads of pending events of one name one read takes (eventPayload): the one a
 *  wait took and the next ones, which a loop of waits takes next. */
const PAYLOADS_READ_TOGETHER = 16;

export class Context implements CallCore, DeliveryHooks {
  readonly journal: JournalIndex;
  private readonly delivery: DeliveryQueue;
  // The maps and sets below are made when first needed (undefined until then): a run uses
  // few of them, and a score of empty ones were a fifth of a 0-step run's heap.
  /** How many calls of each name were made, and the latest one (beginCall). */
  private counts: Map<string, number> | undefined;
  private lastCallOf: Map<string, CallNode> | undefined;
  /** Call names already found valid (beginCall). */
  private checkedNames: Set<string> | undefined;
  /** The retry policy of a step with no retry options of its own (stepRules): the
   *  workflow's over the defaults, resolved by the first such step. */
  private hostPolicy: RetryPolicy | undefined;
  /** The rules of a step with no options (stepRules): hostPolicy and no timeout. */
  private hostRules: { readonly policy: RetryPolicy; readonly timeoutMs: undefined } | undefined;
  private consumed: Set<string> | undefined;
  /** Keys of calls begun durably and not finished (an intent) that this execution made again. */
  private begunCalledAgain: Set<string> | undefined;
  /** Next journal.cascadeCalls entry the end-of-cascade check looks at. */
  private cascadeCursor = 0;
  /** The latest call made in a cascade that had no record (named by divergence errors). */
  private lastNewCall: Call | undefined;
  /** The unconsumed events not taken yet, by name, oldest first: a wait looks only at its
   *  own name's (a run sent thousands of events of another name pays nothing per take). */
  private events: Map<string, PendingEvent[]> | undefined;
  /** The result events of the children begun and unfinished (child-calls.ts,
   *  awaitedChildEvents): their heads are read with the first read of events, and their
   *  payloads along with one another's (eventPayload). */
  private readAlong: Set<string> | undefined;
  /** Payload reads under way, by the seq of each event they read (eventPayload). */
  private payloadReads: Map<number, Promise<Map<number, string>>> | undefined;
  private seenEventSeqs: Set<number> | undefined;
  /** The reads of events by name, when the host reads them so (readEventHeads). */
  private eventReadsMade: EventReads | undefined;
  /** The blocked branches (block); none: undefined or empty. */
  private blocked: Set<Blocked> | undefined;
  /** Child runs being created (each also counts in `active`): childStarts. */
  private childStartSet: Set<Promise<void>> | undefined;
  /** storedTexts. */
  private storedTextMap: StoredTexts | undefined;
  /** How many attempts are in flight (each also counts in `active`). */
  private liveAttempts = 0;
  /** Bodies (performs, reconciles) begun whose promise has not settled: an attempt its
   *  execution stopped waiting for (aborted, its grace over) may still run its body. */
  private bodiesRunning = 0;
  /** Who waits for those bodies to settle (bodiesSettled). */
  private bodiesWaiters: Array<() => void> = [];
  /** Who waits for the work in flight to end (inFlightEnded); undefined while no one does,
   *  so the per-step path pays one comparison. */
  private idleWaiters: Set<() => void> | undefined;
  private idleLookScheduled = false;
  /** Every attempt in flight listens on it: an agent's many parallel tool calls are no leak. */
  private readonly runAbort = new LazyAbort({ unlimitedListeners: true });
  private readonly drainAbort = new LazyAbort();
  /** New calls made inside a cascade start once it is over (after the divergence check). */
  private afterCascade: Array<() => void> = [];
  /** ctx.now/random/uuid records: durable before any later call starts executing. */
  private syncWrites: Promise<void> | undefined;
  /** How many of those are not yet durable (none: a new call need not wait a turn). */
  private syncWritesPending = 0;
  private seq = 0;
  private active = 0;
  private suspendScheduled = false;
  private draining = false;
  /** Cancels the stall timer (a chain of timers: replayStallMs may be set past
   *  setTimeout's 2^31-1 ms, which a plain setTimeout fires after 1 ms). */
  private stallTimer: (() => void) | undefined;
  /** The stalled position and the hand-overs so far the stall timer is counting for. */
  private stallPosition: number | undefined;
  private stallReleased = -1;
  /** Work the workflow code started outside cairn calls (late-work.ts). */
  private readonly lateWork: LateWork;
  private readonly stopLateWork: () => void;
  private lateRecheck: NodeJS.Timeout | undefined;
  /** The running cascade may continue code that joined a cairn outcome with work of the
   *  workflow's own (a timer, a file): the calls it makes have no fixed window. */
  private cascadeTainted = false;
  /** The workflow code's resources other than promises when the running cascade began, and
   *  whether its end woke a call waiting for it (delivery.ts, quietTurn). */
  private othersAtCascade = 0;
  private cascadeEndWoke = false;
  private halted: Outcome | undefined;
  /** The workflow function has settled: start nothing new (settleInFlight). */
  private finishing = false;
  /** The workflow function has returned or thrown (set at once, before finishWith). */
  private functionSettled = false;
  /** The completed output was copied as it stood at a draw after the run ended (syncValue). */
  private outputTaken = false;
  /** Calls whose failure (recorded by this execution, or replayed) was not handed over
   *  while the workflow function ran: handed over once it had settled, or never. No code of
   *  the workflow could act on it (a Promise.all's other rejections). A failed run names
   *  them with the calls its error names, so one resume executes them all again instead of
   *  replaying them (a resume per failed branch of a Promise.all otherwise). */
  private unheardFailures: Set<string> | undefined;
  /** Replay-only mode: the first new call the code made (reachFrontier). */
  private frontierKey: string | undefined;
  private resolveDone!: (o: Outcome) => void;
  readonly done: Promise<Outcome> = new Promise<Outcome>((r) => {
    this.resolveDone = r;
  });
  readonly api: WorkflowContext;
  // The call kinds that live in files of their own, acting on this run through CallCore.
  // Made when the workflow first reads the ctx method that makes such calls (apiMethods).
  private waits: WaitCalls | undefined;
  private approvals: ApprovalCalls | undefined;
  private children: ChildCalls | undefined;
  private workspaces: WorkspaceCalls | undefined;
  private readonly budget: BudgetLedger;
  private readonly crashes: CrashCharges;
  /** The reused-name check of late calls (late-call-check.ts). */
  private readonly lateCalls: LateCallCheck;
  /** The hold of recorded outcomes while a verdict is pending (held-handover.ts). */
  private readonly held: HeldHandover;

  constructor(
    readonly host: ContextHost,
    journal: Journal,
  ) {
    this.journal = JournalIndex.of(journal, host.generation, host.failedCalls);
    this.delivery = new DeliveryQueue(
      this.journal.orderedPositions,
      this.journal.firstNewPosition,
      this,
      this.journal.positionGenerations,
    );
    this.addEvents(this.journal.events);
    this.budget = new BudgetLedger(
      () => host.budgetLimit,
      host.budgetSpent,
      this.journal.attemptSpend,
    );
    this.crashes = new CrashCharges(
      host.recovered,
      () => this.delivery.liveReleased,
      () => host.clock.now(),
    );
    this.lateCalls = new LateCallCheck({
      runId: host.runId,
      delivery: this.delivery,
      journal: this.journal,
      seq: () => this.seq,
      owner: this,
    });
    const late = trackLateWork(this, () => this.lateCalls.cascadePoint());
    this.lateWork = late.work;
    this.stopLateWork = late.stop;
    this.held = new HeldHandover({
      host,
      delivery: this.delivery,
      journal: this.journal,
      busyForMs: () => this.lateWork.busyForMs(LATE_WORK_GRACE_MS),
      describePending: () => this.lateWork.describePending(LATE_WORK_GRACE_MS),
      halted: () => this.halted !== undefined,
      stopped: () => this.halted !== undefined || this.draining || this.finishing,
      fail: (error) => this.fail(error),
      cascadeOver: () => this.cascadeOver(),
    });
    this.api = new WorkflowApi(this) as unknown as WorkflowContext;
  }

  // The delivery queue's hooks (DeliveryHooks): the Context itself, no closures a run.
  /** A cascade is about to begin. */
  began(): void {
    this.cascadeTainted = this.lateWork.takeActivity(LATE_WORK_GRACE_MS);
    this.othersAtCascade = this.lateWork.createdOther;
  }

  /** A cascade finished. */
  quiet(): void {
    this.cascadeOver();
  }

  /** The asynchronous resources the workflow code has created so far. */
  activity(): number {
    return this.lateWork.created;
  }

  /** Whether the cascade that just ended made nothing of the workflow's own but promises
   *  and woke no cairn call: a recorded outcome may then start at the round's last step. */
  quietTurn(): boolean {
    return (
      !this.cascadeEndWoke &&
      !this.cascadeTainted &&
      this.lateWork.createdOther === this.othersAtCascade
    );
  }

  /** Runs the workflow function; resolves with how this execution ends. */
  start(fn: (ctx: WorkflowContext, input: unknown) => Promise<unknown>, input: unknown) {
    this.delivery.start(() => {
      let result: Promise<unknown>;
      try {
        result = Promise.resolve(runAtRoot(this, () => fn(this.api, input)));
      } catch (err) {
        result = Promise.reject(err);
      }
      result.then(
        (output) => {
          this.functionSettled = true;
          void this.finishWith({ kind: "completed", output });
        },
        (err: unknown) => {
          this.functionSettled = true;
          void this.finishWith({
            kind: "failed",
            error: err as Error,
            failedKeys: failedCallKeys(err),
          });
        },
      );
    });
    return this.done;
  }

  /** How many recorded calls this execution has replayed so far. */
  get replayed(): number {
    return this.consumed?.size ?? 0;
  }

  /** Cancels this execution: signals abort, late results are discarded. */
  cancel(reason: string): void {
    this.halt({ kind: "canceled", reason });
  }

  /** How many step attempts (bodies, performs, reconciles) are in flight now. */
  get attemptsInFlight(): number {
    return this.liveAttempts;
  }

  /** How many step bodies (performs, reconciles) of this execution still run in this
   *  process: one whose attempt was aborted and not waited for any more counts until its
   *  promise settles, unless its step's timeout gave up on it (the call is retried beside
   *  it anyway). */
  get bodiesInFlight(): number {
    return this.bodiesRunning;
  }

  /** Settles once no step body of this execution runs any more (bodiesInFlight). */
  bodiesSettled(): Promise<void> {
    if (this.bodiesRunning === 0) return Promise.resolve();
    return new Promise<void>((resolve) => this.bodiesWaiters.push(resolve));
  }

  private bodyEnded(): void {
    this.bodiesRunning--;
    if (this.bodiesRunning === 0) for (const resolve of this.bodiesWaiters.splice(0)) resolve();
  }

  /** How many child runs this execution is creating now (their create not yet answered). */
  get childStartsInFlight(): number {
    return this.childStartSet?.size ?? 0;
  }

  /** Child runs being created (each also counts in `active`). */
  get childStarts(): Set<Promise<void>> {
    this.childStartSet ??= new Set();
    return this.childStartSet;
  }

  /** The texts taken of what child and approval calls were handed (copyAsStored): one
   *  object handed to many calls unchanged holds one text until their turns. */
  get storedTexts(): StoredTexts {
    this.storedTextMap ??= new WeakMap();
    return this.storedTextMap;
  }

  /** A run taken from a crashed worker whose replay has not yet judged what the crash cut
   *  (crash-charges.ts). */
  get crashUnjudged(): boolean {
    return this.crashes.unjudged;
  }

  /** Lost attempts this execution asked to record without hearing that they were
   *  (crash-charges.ts). */
  get unconfirmedCrashCharges(): ReadonlyArray<{ key: string; attempt: number }> {
    return this.crashes.unconfirmed;
  }

  /** Another worker owns the run now (or this one stops without a word): write nothing. */
  stopWithoutWriting(): void {
    this.halt({ kind: "lease-lost" });
  }

  /** The engine closes: start nothing new; once nothing is in flight the run is handed
   *  back (or suspended, if it waits). A backoff in process is cut short: it is recorded. */
  drain(): void {
    if (this.halted || this.draining) return;
    this.draining = true;
    this.drainAbort.abort(undefined);
    this.held.wakeWaiters();
    this.maybeSuspend();
  }

  /** New events may have arrived for this run: re-read them and wake matching waits. */
  async refreshEvents(): Promise<void> {
    const blocked = this.blocked;
    if (this.halted || blocked === undefined || ![...blocked].some((b) => b.event)) return;
    const byName = this.eventReads;
    if (byName) {
      // The names waits are blocked on when the read begins: the others are read when a
      // take of them finds nothing (EventReads.reload).
      await byName.reload(false, () => {
        const blockedOn = new Set<string>();
        for (const b of this.blocked ?? []) if (b.event !== undefined) blockedOn.add(b.event);
        return blockedOn;
      });
    } else this.addEvents(await this.host.loadEvents());
  }

  /** Whether a wait of this execution is blocked on an event (it may come from elsewhere). */
  get awaitsEvent(): boolean {
    return this.blocked !== undefined && [...this.blocked].some((b) => b.event !== undefined);
  }

  addEvents(fresh: PendingEvent[]): void {
    if (fresh.length === 0) return;
    const unsorted = new Set<PendingEvent[]>();
    let added = false;
    this.seenEventSeqs ??= new Set();
    this.events ??= new Map();
    for (const e of fresh) {
      if (this.seenEventSeqs.has(e.seq)) continue;
      this.seenEventSeqs.add(e.seq);
      const list = this.events.get(e.name);
      if (!list) this.events.set(e.name, [e]);
      else {
        if (list[list.length - 1]!.seq > e.seq) unsorted.add(list);
        list.push(e);
      }
      added = true;
    }
    if (!added) return;
    for (const list of unsorted) list.sort((a, b) => a.seq - b.seq);
    for (const b of [...(this.blocked ?? [])]) {
      if (b.event && this.events?.has(b.event) === true) b.wake();
    }
  }

  // ---- the public ctx ----

  /** How each method of the ctx is made for one execution: WorkflowApi makes one when the
   *  workflow first reads it (a run reads few of them, most none; made up front, they were a
   *  score of closures a run). */
  static readonly apiMethods: { [K in keyof ApiMethods]: (c: Context) => ApiMethods[K] } = {
    step: (c) => (name, fn, options) => c.step(name, fn, options),
    effect: (c) => (name, effect, options) => c.effect(name, effect, options),
    sleep: (c) => {
      c.waits ??= new WaitCalls(c);
      const waits = c.waits;
      return (name, duration) => waits.sleep(name, duration);
    },
    sleepUntil: (c) => {
      c.waits ??= new WaitCalls(c);
      const waits = c.waits;
      return (name, until) => waits.sleepUntil(name, until);
    },
    waitForEvent: (c) => {
      c.waits ??= new WaitCalls(c);
      const waits = c.waits;
      return (name, options) => waits.waitForEvent(name, options);
    },
    child: (c) => {
      c.children ??= new ChildCalls(c);
      const children = c.children;
      return (name, wf, input) =>
        children.child(name, wf as Workflow<unknown, unknown>, input) as never;
    },
    workspace: (c) => {
      c.workspaces ??= new WorkspaceCalls(c);
      const workspaces = c.workspaces;
      return (name, options) => workspaces.open(name, options);
    },
    approval: (c) => {
      c.approvals ??= new ApprovalCalls(c);
      const approvals = c.approvals;
      return (name, options) => approvals.approval(name, options);
    },
    now: (c) => (label?: string) => c.syncValue("now", label, () => c.host.clock.now()),
    random: (c) => (label?: string) => c.syncValue("random", label, () => Math.random()),
    uuid: (c) => (label?: string) => c.syncValue("uuid", label, () => randomUUID()),
    // For cairn's own layers (cairn/ai, workspaces): a divergence they detect fails the
    // run as the engine's own checks do, whatever the workflow (or the SDK) does with
    // errors; the caller gets a promise that never settles.
    [FAIL_RUN]:
      (c) =>
      (err: Error): Promise<never> => {
        c.fail(err);
        return never();
      },
    // cairn/ai (ai/conversation.ts) asks whether a model call made now would be late.
    [CALL_IS_LATE]: (c) => (): boolean => !c.delivery.inCascade,
    // cairn/ai (ai/tools.ts) looks whether a streamed loop's stop was recorded.
    [NEXT_CALL_RECORDED]:
      (c) =>
      (name: string): boolean => {
        const n = (c.counts?.get(name) ?? 0) + 1;
        return c.journal.outcomes.has(n === 1 ? name : `${name}#${n}`);
      },
  };

  /** ctx.signal: made when the workflow first reads it. */
  get runSignal(): AbortSignal {
    return this.runAbort.signal;
  }

  /** ctx.budget. */
  get budgetView(): { limit: Amounts; spent: Amounts } {
    // spent sorted (budget-ledger.ts). limit keeps its order, the same on every
    // execution (the workflow's defaults, then the run's own, as the engine merged them):
    // sorting it too would change it under runs recorded before, for no gain.
    return { limit: { ...this.host.budgetLimit }, spent: this.budget.spent };
  }

  /** Every call: its preamble runs in the caller's scope (its key, its place in the call
   *  tree and the delivery order); the rest is cairn's own work, outside the workflow's
   *  scope (so none of it counts as the workflow's late work). */
  makeCall<T>(
    name: string,
    kind: CallMethod,
    execute: (call: Call) => Promise<T>,
    /** Checks what the call was given against what its journal recorded (throws once the
     *  run failed), before a recorded outcome is handed over or the call goes on; a call that
     *  goes on may take its copy of what it was given here (copyAsStored). */
    match?: (call: Call) => void,
    /** `execute`'s promise is the call's outcome as it stands: it marks its own rejection
     *  handled and stops the execution on a payload it cannot read (stepAtOnce). */
    direct = false,
  ): Promise<T> {
    // A call made after the execution stopped (from a timer or I/O of the workflow's own
    // that outlived it, an unref'd one after the run suspended) never settles: the execution
    // is over and nothing its code does matters. Rejected, it was an unhandled rejection,
    // which ends an embedding process with every run in it, wherever nobody listened: the
    // call unawaited, or awaited by a branch the function awaits only after the wait it was
    // abandoned on, or by an async timer callback.
    if (this.halted) return never<T>();
    let call: Call;
    try {
      call = this.beginCall(name, kind);
      match?.(call);
    } catch (err) {
      const refused = Promise.reject(err);
      // A call that stops the execution itself (a divergence, a call inside a step body)
      // rejects with HaltedSignal, so the code awaiting it ends (a step body's attempt),
      // marked handled: awaited later or never, it is no unhandled rejection.
      if (err instanceof HaltedSignal) refused.catch(ignoreRejection);
      return refused;
    }
    // A call's failure is recorded and handed to whoever awaits it. A call not awaited yet
    // when it fails (a prefetch awaited after other work, a call left dangling) must not be
    // an unhandled rejection: Node would end the worker's process, with every run in it,
    // and a replay hands the failure over at the same point again, in every worker. A
    // replayed call marks its own rejection (replayOutcome): a handler on every replayed
    // call cost a resume of 1,000 steps about 1 ms.
    if (call.record) return outsideWorkflow(() => this.replayOutcome<T>(call));
    if (direct) return outsideWorkflow(() => execute(call));
    const outcome = outsideWorkflow(() => this.unlessKeyMissing(execute(call)));
    outcome.catch(ignoreRejection);
    return outcome;
  }

  /** A payload this worker cannot decrypt (an intent, an event: encrypted with a key it was
   *  not given) is no outcome of the call: the execution stops and the worker pauses the run
   *  naming the key (execution.ts), as it does for the run's input. */
  private unlessKeyMissing<T>(p: Promise<T>): Promise<T> {
    return p.catch((err: unknown) => {
      if (!unreadable(err)) throw err;
      this.halt({ kind: "interrupted", error: err as Error });
      return never<T>();
    });
  }

  private step<T>(
    name: string,
    fn: (s: StepContext) => Promise<T> | T,
    options?: StepOptions,
  ): Promise<T> {
    // A step with no options (nearly every step) goes through stepAtOnce: no async function.
    if (options === undefined && typeof fn === "function") {
      return this.makeCall(name, "step", (call) => this.stepAtOnce(call, fn), undefined, true);
    }
    return this.makeCall(name, "step", (call) => {
      // Only a call with no recorded outcome: a journal written before this check replays.
      if (typeof fn !== "function") {
        return Promise.reject(
          this.refusedArgument(call, `its body must be a function (got ${typeof fn})`),
        );
      }
      const unknown = this.unknownStepOptions(call, options);
      if (unknown) return Promise.reject(unknown);
      // runAttempts waits in beforeExecute first: an async function of its own here, to
      // await it, made three promises a step.
      return this.runAttempts<T>(call, options, fn, undefined, undefined, true);
    });
  }

  /** A step with no options, made as runAttempts makes it but without its async function:
   *  the step's promise is settled by its record's hand-over (runAttempts' promise, the
   *  cascade end's, an await's each, the record's and the reactions between them were seven
   *  promises a step, each seen by the async hook). Anything but a first attempt whose value
   *  is recorded at once (a wait beforeExecute found, attempts recorded before, a crash to
   *  charge, no room in the budget, a failure, a halt) goes on in runAttempts from there. */
  private stepAtOnce<T>(call: Call, body: (s: StepContext) => Promise<T> | T): Promise<T> {
    let resolve!: (value: T) => void;
    let rejectWith!: (err: unknown) => void;
    const outcome = new Promise<T>((res, rej) => {
      resolve = res;
      rejectWith = rej;
    });
    // As makeCall's unlessKeyMissing; and no unhandled rejection (makeCall): marked only
    // when it fails, not on every step.
    const reject = (err: unknown): void => {
      if (unreadable(err)) {
        this.halt({ kind: "interrupted", error: err as Error });
        return;
      }
      outcome.catch(ignoreRejection);
      rejectWith(err);
    };
    const slow = (waiting: Promise<void> | false, first?: FirstAttempt<T>): void => {
      this.runAttempts<T>(call, undefined, body, undefined, undefined, waiting, first).then(
        resolve,
        reject,
      );
    };
    const go = (): void => {
      try {
        const waiting = this.beforeExecute(call);
        if (waiting !== undefined) {
          slow(waiting);
          return;
        }
        this.stepRules(call, undefined); // its throw, as runAttempts would meet it
        if (
          this.journal.attempts.has(call.key) ||
          this.crashes.mayCharge ||
          this.budget.overBudget(NO_AMOUNTS) !== undefined
        ) {
          slow(false);
          return;
        }
        if (this.finishing || this.draining) return; // never settles, as runAttempts
        const span = this.attemptSpan(call, 1);
        const traced = span ? (s: StepContext) => span.run(() => body(s)) : body;
        this.attempt(call, 1, undefined, traced).then(
          (result) => {
            if (this.halted || !result.ok) {
              slow(false, { attempt: 1, span, result });
              return;
            }
            let encoded: string | SerializationError;
            try {
              encoded = this.encodeStepValue(call, result.value);
            } catch (err) {
              this.budget.reserve(result.spend);
              this.liveAttempts--;
              this.workEnded();
              reject(err);
              return;
            }
            if (typeof encoded !== "string") {
              slow(false, { attempt: 1, span, result, encoded });
              return;
            }
            try {
              this.budget.reserve(result.spend);
              span?.end({ outcome: "ok", spend: result.spend });
              // The write begins (counted in active) before the attempt stops counting.
              this.recordAtOnce(call, encoded, result, resolve, reject);
            } catch (err) {
              reject(err);
            } finally {
              this.liveAttempts--;
              this.workEnded();
            }
          },
          (err: unknown) => {
            span?.end({ outcome: "interrupted", spend: {} });
            reject(err);
          },
        );
      } catch (err) {
        reject(err);
      }
    };
    // The end of the cascade the step was made in, as runAttempts awaits it: a microtask
    // queued as the cascade ends, outside the workflow's scope.
    if (this.delivery.inCascade) {
      this.afterCascade.push(() => outsideWorkflow(() => queueMicrotask(go)));
    } else go();
    return outcome;
  }

  private effect<T>(name: string, effect: Effect<T>, options?: StepOptions): Promise<T> {
    return this.makeCall(name, "effect", (call) => this.effectCall(call, effect, options));
  }

  /** A call with no recorded outcome handed what it cannot run (plain JavaScript, or `as
   *  any`): refused when it would begin, before anything of it is recorded, the same way on
   *  every execution. Found only once it ran, a step's body failed each attempt with "fn is
   *  not a function" (retried, with backoff), and an effect without reconcile failed the
   *  recovery after a crash it exists for. */
  private refusedArgument(call: Call, what: string): TypeError {
    return new TypeError(
      `ctx.${calledAs(call.kind)}(${quoteGiven(call.name)}) in run "${this.host.runId}": ${what}`,
    );
  }

  private async effectCall<T>(call: Call, effect: Effect<T>, options?: StepOptions): Promise<T> {
    // Only a call with no recorded outcome: a journal written before this check replays.
    const given = effect as Partial<Effect<T>> | null | undefined;
    if (typeof given !== "object" || given === null) {
      throw this.refusedArgument(
        call,
        `pass { perform, reconcile } (got ${given === null ? "null" : typeof given})`,
      );
    }
    for (const part of ["perform", "reconcile"] as const) {
      if (typeof given[part] !== "function") {
        throw this.refusedArgument(
          call,
          `${part} must be a function (got ${typeof given[part]}): ${part === "reconcile" ? "it finds whether perform already happened, after a crash cut it; an effect without one cannot be made safe (with an idempotency key the system honours, use ctx.step)" : "it performs the side effect"}`,
        );
      }
    }
    const unknown = this.unknownStepOptions(call, options);
    if (unknown) throw unknown;
    await this.beforeExecute(call);
    const idem = idempotencyKey(this.host.runId, call.key);
    // perform may already have started (intent recorded by an earlier execution): ask
    // reconcile first. After perform throws, the next attempt asks reconcile again.
    let mayHaveHappened = this.journal.intents.has(call.key);
    if (!mayHaveHappened) {
      await this.commit({
        intents: [intentRecord(call, { idempotencyKey: idem }, this.host.clock.now())],
      });
    }
    // Which of the two produced the value of the attempt that completes the call: the
    // record says so (cairn show: performed or reconciled).
    let reconciled = false;
    return this.runAttempts<T>(
      call,
      options,
      async (s) => {
        reconciled = false;
        if (mayHaveHappened) {
          const found = await effect.reconcile(idem);
          if (found !== undefined) {
            reconciled = true;
            return found;
          }
        }
        // A worker stopped past its lease (SIGSTOP, a long GC pause) may wake after another
        // worker took the run over, reconciled and performed: it must not perform again.
        // The attempt ends (thrown, not a promise that never settles): it is a step body,
        // and one counted as running for ever (bodiesInFlight) held the run in this worker
        // for good, never handed back, never executed again.
        if (this.host.leaseFresh && !this.host.leaseFresh()) {
          this.stopWithoutWriting();
          throw new HaltedSignal();
        }
        mayHaveHappened = true;
        return effect.perform(idem, s);
      },
      () => ({ reconciled }),
      {
        // No intent: perform never began, so a crash cannot have cut an attempt of it.
        begun: () => this.journal.intents.has(call.key),
        // Out of attempts (a crash counted as one, or perform threw on the last): when
        // perform may have happened, reconcile says whether it did before the call fails.
        lastChance: async () => {
          if (!mayHaveHappened) return undefined;
          return effect.reconcile(idem);
        },
      },
    );
  }

  private syncValue<T>(
    kind: "now" | "random" | "uuid",
    label: string | undefined,
    produce: () => T,
  ): T {
    if (this.halted) {
      // Drawn after the run ended with its function's output (late code of its own): the
      // value cannot be recorded now, yet that code may still put it into the output before
      // the release encodes it, a value in the run's output no journal holds. The output is
      // taken as it stands before the value exists.
      const o = this.halted;
      if (o.kind === "completed" && !this.outputTaken) {
        this.outputTaken = true;
        o.output = takeCopy(copyAsStored(o.output));
      }
      return produce();
    }
    if (label !== undefined && !isCallName(label)) {
      throw new TypeError(
        `ctx.${kind}(${quoteGiven(label)}) in run "${this.host.runId}": a label must be 1-200 characters, must not contain "#" and must not start with "@" or a space`,
      );
    }
    const call = this.beginCall(label === undefined ? `@${kind}` : `@${kind}:${label}`, kind);
    if (call.record) {
      try {
        return decode<T>(call.record.result ?? "");
      } catch (err) {
        if (!unreadable(err)) throw err;
        this.halt({ kind: "interrupted", error: undecodableCall(call, err) });
        throw new HaltedSignal();
      }
    }
    // Drawn outside the workflow's scope: randomUUID() refills its buffer of random bytes
    // (an async resource) every 128 calls, which would count as the workflow's own I/O
    // (late-work.ts): the run would not suspend for a second, and the cascades after it
    // would be taken for ones that continue such work.
    const value = outsideWorkflow(produce);
    const now = this.host.clock.now();
    const rec = outcomeRecord(call, {
      startedAt: now,
      completedAt: now,
      result: encode(value),
      delivery: null,
    });
    // Written once the cascade that drew it is over (after the divergence check), and
    // before any later call starts executing (beforeExecute waits for it).
    outsideWorkflow(() => {
      const cascadeOver = this.delivery.inCascade ? this.cascadeEnd() : undefined;
      this.syncWritesPending++;
      // Made at the first one: most runs draw none, and a promise each costs the hooks.
      this.syncWrites = (this.syncWrites ?? Promise.resolve()).then(async () => {
        await cascadeOver;
        await this.commit({ steps: [rec] });
        this.syncWritesPending--;
      });
    });
    return value;
  }

  // ---- matching calls to the journal ----

  /** The preamble of every call: its key, its place in the call tree and the delivery
   *  order, and its recorded outcome (checked against the call) if there is one. Its
   *  refusals name the ctx method `method` (ctx.sleepUntil makes a call of kind "sleep"). */
  private beginCall(name: string, method: CallMethod): Call {
    if (this.halted) throw new HaltedSignal();
    const kind: StepKind = method === "sleepUntil" ? "sleep" : method;
    // An agent calls the same few names again and again (a replay of 1,000 steps checked
    // the same name 1,000 times): each user name is checked once per execution.
    if (this.checkedNames?.has(name) !== true) {
      const internal =
        typeof name === "string" &&
        name.startsWith("@") &&
        (kind === "now" || kind === "random" || kind === "uuid");
      if (!internal && !isCallName(name)) {
        throw new TypeError(
          `ctx.${calledAs(method)}(${quoteGiven(name)}) in run "${this.host.runId}": a name must be 1-200 characters, must not contain "#" and must not start with "@" or a space`,
        );
      }
      checkText(name, `ctx.${calledAs(method)}() name in run "${this.host.runId}":`);
      // Only names any kind of call may use: "@now" is valid for ctx.now() alone.
      if (!internal) this.checkedNames = withAdded(this.checkedNames, name);
    }
    const scope = scopeOf(this);
    if (scope === undefined) {
      // A ctx another run's code kept (a module variable) and called, from its workflow
      // code or a step body of it: recorded here, the call was a record this run's code
      // never makes (its replay diverges), made by code that is not this run's. Refused to
      // that code; this run is not touched.
      const caller = ownerOfCurrentScope();
      if (caller !== undefined && caller !== this && caller instanceof Context) {
        const body = bodyOfCurrentScope();
        throw new TypeError(
          body === undefined
            ? `ctx.${calledAs(method)}(${quoteGiven(name)}) of run "${this.host.runId}" was called from the workflow code of run "${caller.host.runId}"; a ctx belongs to the run it was handed to: call the ctx of run "${caller.host.runId}"`
            : `ctx.${calledAs(method)}(${quoteGiven(name)}) of run "${this.host.runId}" was called inside the body of step ${quoteGiven(body)} of run "${caller.host.runId}"; a ctx belongs to the run it was handed to, and calls do not nest: make it from the workflow function of run "${caller.host.runId}", around the step`,
        );
      }
    }
    if (typeof scope === "string") {
      // A programming error, not a failed attempt: retrying cannot help. The run fails.
      this.fail(
        new TypeError(
          `ctx.${calledAs(method)}("${name}") was called inside the body of step "${scope}" of run "${this.host.runId}"; calls do not nest: make it from the workflow function, around the step`,
        ),
      );
      throw new HaltedSignal();
    }
    const late = !this.delivery.inCascade;
    this.counts ??= new Map();
    this.lastCallOf ??= new Map();
    const prev = this.lastCallOf.get(name);
    const n = (this.counts.get(name) ?? 0) + 1;
    const made = n === 1 ? name : `${name}#${n}`;
    const record = this.journal.recordOf(made, this.seq);
    // The record's own text of the key when there is one (the same text): its hash is known
    // (the index hashed it), and every set and map that holds it finds it by identity.
    const key = record?.key ?? made;
    const recordedWindow = this.lateCalls.recordedWindowOf(record);
    // A name reused in an order only timing decides (late-call-check.ts), which only a call
    // made late, or after a late one, can be (asked only then: most calls reuse a name).
    const reused =
      prev &&
      eitherLate(prev, late) &&
      this.lateCalls.reusedName(prev, {
        kind,
        name,
        late,
        record,
        recordedWindow,
        parent: scope,
      });
    if (reused) {
      this.fail(reused);
      throw new HaltedSignal();
    }
    // A late call taking a record, or an effect's or a child's intent, made inside the
    // cascade whose hand-overs are held for it (missingCall) is made before the next
    // hand-over: a call a later cascade makes of its name follows it (heldWindow,
    // late-call-check.ts). The record it writes says that window, not late, so the next replay
    // demands it there too (a later call of its name could take it otherwise).
    const tookHeldIntent = late && record === undefined && this.held.takesHeldIntent(key);
    const tookHeld =
      tookHeldIntent ||
      (late && this.delivery.holding && record !== undefined && !record.issuedLate);
    this.counts.set(name, n);
    // The optional parts set after the literal: spread in, each cost an object a call.
    const node: Mutable<CallNode> = {
      owner: this,
      key,
      parent: scope,
      depth: (scope?.depth ?? 0) + 1,
      late,
      seq: this.seq,
      fixed: !late && !this.cascadeTainted,
      replayedInCascade: !late && record !== undefined && !record.issuedLate,
    };
    if (recordedWindow !== undefined) node.recordedWindow = recordedWindow;
    if (tookHeld) node.tookHeldRecord = true;
    if (tookHeldIntent || (tookHeld && recordedWindow !== undefined)) {
      node.heldWindow = this.delivery.released;
    }
    this.lastCallOf.set(name, node);
    enterCall(node);
    const call: Call = {
      runId: this.host.runId,
      generation: this.host.generation,
      key,
      name,
      kind,
      seq: this.seq++,
      issuedAfter: this.delivery.released,
      // A call made inside a cascade is recorded as such even when the cascade may continue
      // work of the workflow's own: a replay still demands it by the end of that cascade,
      // once that work is done (cascadeOver). Only a late call's window is left unchecked.
      issuedLate: late && !tookHeldIntent,
      looseWindow: late || this.cascadeTainted,
      node,
      record,
    };
    const max = this.host.maxStepsPerRun ?? Number.POSITIVE_INFINITY;
    if (!call.record && call.seq >= max) {
      // Recorded calls replay whatever the limit; a new one past it fails the run.
      this.fail(
        new LimitError(
          `Run "${this.host.runId}" makes call ${call.seq + 1} (${kind} "${name}"), over the limit of ${max} calls per run (limits.maxStepsPerRun); nothing of it was recorded. Split the work into child runs, or raise the limit`,
          { limit: "maxStepsPerRun", max },
        ),
      );
      throw new HaltedSignal();
    }
    if (call.record) {
      this.matchRecord(call, call.record);
      if (this.delivery.holding) this.held.recordTaken(call.key, late && !call.record.issuedLate);
    } else {
      this.matchIntent(call);
      if (!late) this.lastNewCall = call;
      else if (tookHeldIntent) this.held.intentTaken();
    }
    return call;
  }

  /** A call begun durably (its intent: a child started, an effect about to perform, a wait
   *  or sleep begun) and not finished is checked as a record is: another kind of call at its
   *  key would go on as if nothing had begun there (a step executed while the child it
   *  replaced runs on, unawaited). */
  private matchIntent(call: Call): void {
    const intent = this.journal.intents.get(call.key);
    if (!intent) return;
    if (intent.kind === call.kind && intent.name === call.name) {
      this.begunCalledAgain = withAdded(this.begunCalledAgain, call.key);
      return;
    }
    this.fail(
      new NonDeterminismError(
        `Run "${this.host.runId}" no longer matches its journal at key "${call.key}": the journal recorded ${intent.kind} "${intent.name}" begun there, the code now calls ${call.kind} "${call.name}". ${this.remedy()}`,
        { runId: this.host.runId, key: call.key },
      ),
    );
    throw new HaltedSignal();
  }

  private matchRecord(call: Call, rec: StepRecord): void {
    if (rec.kind !== call.kind || rec.name !== call.name) {
      this.fail(
        new NonDeterminismError(
          `Run "${this.host.runId}" no longer matches its journal at key "${call.key}": the journal recorded ${rec.kind} "${rec.name}", the code now calls ${call.kind} "${call.name}". ${this.remedy()}`,
          { runId: this.host.runId, key: call.key },
        ),
      );
      throw new HaltedSignal();
    }
    const exact = this.journal.exactWindows && !rec.issuedLate && rec.issuedAfter !== null;
    // A call made inside cascade W was made by code that outcome W's hand-over set running:
    // in every execution it comes after W hand-overs, however long the workflow's own work
    // it joined takes. Made before them, it is code whose own timer or I/O won a race the
    // first run's outcome won (Promise.race): it may be another call of that name, come
    // early, and its record another call's value. Refused before anything is handed over.
    if (exact && call.looseWindow && rec.issuedAfter! > call.issuedAfter) {
      this.fail(
        new NonDeterminismError(
          `Run "${this.host.runId}" no longer matches its journal: ${call.kind} "${call.name}" (key "${call.key}") was called after ${rec.issuedAfter} outcomes when recorded, inside the code an outcome ran, and now after ${call.issuedAfter}, after work of the workflow's own (a timer, a file): code that raced a cairn call against its own timer or I/O (Promise.race) took the other side this time, so cairn cannot tell which recorded call this is. Make the race's outcome a recorded one (a step's timeout, ctx.waitForEvent's timeout, ctx.sleep in the race), or give each call its own name.`,
          { runId: this.host.runId, key: call.key },
        ),
      );
      throw new HaltedSignal();
    }
    // A replayed call made after (or in a cascade that may continue) work of the workflow's
    // own, such as a timer the first run found done sooner, has no window to compare.
    if (exact && !call.looseWindow && rec.issuedAfter !== call.issuedAfter) {
      const now = `after ${call.issuedAfter} outcomes`;
      this.fail(
        new NonDeterminismError(
          `Run "${this.host.runId}" no longer matches its journal: ${call.kind} "${call.name}" (key "${call.key}") was called after ${rec.issuedAfter} outcomes when recorded, and now ${now}. ${this.remedy()}`,
          { runId: this.host.runId, key: call.key },
        ),
      );
      throw new HaltedSignal();
    }
    this.consumed = withAdded(this.consumed, call.key);
  }

  remedy(): string {
    return `Run the code this run started on (${this.host.workflow}@${this.host.version}), or fork the run onto a new version.`;
  }

  /** A recorded outcome, handed over in its recorded turn. */
  private replayOutcome<T>(call: Call): Promise<T> {
    const rec = call.record!;
    if (rec.outcome === "error") this.unheardFailures = withAdded(this.unheardFailures, call.key);
    let resolve!: (value: T) => void;
    let rejectWith!: (err: unknown) => void;
    const outcome = new Promise<T>((res, rej) => {
      resolve = res;
      rejectWith = rej;
    });
    const reject = (err: unknown) => {
      rejectWith(err);
      // No unhandled rejection (makeCall): marked only when it fails, not on every call.
      outcome.catch(ignoreRejection);
    };
    // Handed to the delivery once the promise exists (a settle never runs in the call's turn:
    // the delivery queues every hand-over).
    const settle = () => {
      if (this.halted) return;
      this.lateCalls.noteHandedOver(call.key);
      this.budget.handOver(call.key, rec.spend);
      if (rec.outcome === "error") {
        // As for a new failure (record): ordered delivery hands it over on the same side
        // of the function's end as when it was recorded, so an execution cut off before
        // its release (a crash, a store error) and the one replaying it name the same.
        if (!this.functionSettled) this.unheardFailures?.delete(call.key);
        reject(this.callError(call.key, rec.error ?? { name: "Error", message: "failed" }));
        return;
      }
      try {
        resolve(decode<T>(rec.result ?? ""));
      } catch (err) {
        // Recorded as a value: a key this worker lacks, or text it cannot decode, is not
        // the call's failure (the first run got a value: handing over an error would let
        // the workflow take another path). The worker pauses the run instead.
        if (unreadable(err)) this.halt({ kind: "interrupted", error: undecodableCall(call, err) });
        else reject(err);
      }
    };
    if (rec.delivery === null || this.journal.isFree(call.key)) {
      this.delivery.freeCalled(
        settle,
        this.journal.freeSince.get(call.key),
        rec.delivery ?? Number.POSITIVE_INFINITY,
      );
    } else this.delivery.recordedCalled(rec.delivery, settle);
    return outcome;
  }

  /** The error a call's failure outcome hands to the workflow, marked with its key. */
  private callError(key: string, rec: ErrorRecord): Error {
    const err = errorFromRecord(rec);
    // A record without a stack (a child's failure, a refusal, a thrown value that was no
    // Error) would get one made here, naming the frames that rebuilt it: not the same on the
    // first execution and on a replay.
    if (!rec.stack) err.stack = `${err.name}: ${err.message}`;
    Object.defineProperty(err, CALL_KEY, { value: key });
    return err;
  }

  /** Every new call waits here before it executes anything: undefined when there is
   *  nothing to wait for (its checks, read without awaiting: a call made inside a cascade
   *  asks once that cascade is over, and nearly every call then goes on at once), else the
   *  wait (waitToExecute, which decides). The one place for these checks. */
  beforeExecute(call: Call): Promise<void> | undefined {
    const created = this.host.created?.();
    if (
      this.halted ||
      this.finishing ||
      this.draining ||
      this.delivery.inCascade ||
      this.host.replayOnly ||
      (created !== undefined && created !== true) ||
      this.delivery.stalledOn !== undefined ||
      (this.delivery.holding && this.held.doubtfulCall()) ||
      (call.node.late && this.held.intentFromCascade(call.key)) ||
      this.syncWritesPending > 0 ||
      this.workspaces?.needSync === true
    ) {
      return this.waitToExecute(call);
    }
    return undefined;
  }

  /** beforeExecute's waits, once one of its checks found something. */
  private async waitToExecute(call: Call): Promise<void> {
    if (this.delivery.inCascade) await this.cascadeEnd();
    if (this.halted || this.finishing) return never();
    if (this.host.replayOnly) return this.reachFrontier(call.key);
    const created = this.host.created?.();
    if (created !== undefined && created !== true && !(await created)) return never();
    // The next recorded outcome's call has not been made again: until it is (or the stall
    // fails the run, watchStall), a new call may be what replaced it, and must not execute.
    // Nothing a new call does can bring that call about: new outcomes come after recorded ones.
    // Nor while a late call holds a record that may be another call's (doubtfulCall): a
    // ctx.now/random/uuid value is handed over at once, so the code may already hold that
    // call's value, and a new call could record or perform with it before the verdict.
    while (
      (this.delivery.stalledOn !== undefined ||
        (this.delivery.holding && this.held.doubtfulCall())) &&
      !this.halted &&
      !this.draining
    ) {
      await this.held.nextVerdict();
    }
    // A late call that found a begun call's intent written inside a cascade may be another
    // call of its name, come early from a race its own timer won (doubtfulCall, for a
    // record): reconciled, or taking the answer of that key, it would be handed the other
    // call's value. It waits while the workflow's own work may still make calls, at most
    // replayStallMs: that call, if it comes, is refused first (beginCall).
    if (call.node.late && this.held.intentFromCascade(call.key)) await this.held.ownWorkOver();
    // Each await below may outlast the function: once it settled, nothing new starts.
    if (this.halted || this.draining || this.finishing) return never();
    if (this.syncWritesPending > 0) {
      await this.syncWrites;
      if (this.halted || this.finishing) return never();
    }
    if (this.workspaces?.needSync) {
      await this.workspaces.sync();
      if (this.halted || this.finishing) return never();
    }
  }

  private cascadeEnd(): Promise<void> {
    return new Promise<void>((resolve) => this.afterCascade.push(resolve));
  }

  /** A cascade is over: every call it recorded must have been made again. */
  private cascadeOver(): void {
    this.cascadeEndWoke = true; // until it is known to wake nothing (below)
    const missing = this.missingCall(this.delivery.released);
    // Held while that call or a doubtful late call's verdict may still come (held-handover.ts).
    if (!this.held.settle(missing !== undefined)) return;
    if (missing) {
      const instead = this.lastNewCall;
      const insteadText = instead
        ? `; it called ${instead.kind} "${instead.name}" (key "${instead.key}") instead`
        : "";
      this.fail(
        new NonDeterminismError(
          `Run "${this.host.runId}" no longer matches its journal: the journal recorded ${missing.kind} "${missing.name}" (key "${missing.key}", call #${missing.seq + 1}), which the code did not call at that point${insteadText}. ${this.remedy()}`,
          { runId: this.host.runId, key: missing.key },
        ),
      );
      return;
    }
    const waiting = this.afterCascade;
    // A new array only when there were waiters: nearly every cascade of a replay has none.
    if (waiting.length > 0) this.afterCascade = [];
    for (const w of waiting) w();
    this.delivery.release();
    this.cascadeEndWoke = this.held.wakeWaiters() || waiting.length > 0;
    this.watchStall();
    this.maybeSuspend();
    this.frontierIfReplayed();
  }

  /** A recorded call made inside a cascade up to `window`, not made again. */
  private missingCall(window: number): CascadeCall | undefined {
    if (!this.journal.exactWindows) return undefined;
    const list = this.journal.cascadeCalls;
    while (this.cascadeCursor < list.length) {
      const rec = list[this.cascadeCursor]!;
      if ((rec.issuedAfter ?? 0) > window) return undefined;
      if (!this.consumed?.has(rec.key) && !this.begunCalledAgain?.has(rec.key)) return rec;
      this.cascadeCursor++;
    }
    return undefined;
  }

  /** The replay waits for a call the first run made after non-durable async work: give it
   *  time, then call it a divergence. The time counts from when the replay began waiting
   *  for that outcome; cairn's own timer, not the workflow's late work (outsideWorkflow). */
  private watchStall(): void {
    const position = this.delivery.stalledOn;
    const released = this.delivery.released;
    if (
      this.stallTimer !== undefined &&
      position !== undefined &&
      position === this.stallPosition &&
      released === this.stallReleased
    ) {
      return;
    }
    this.stallTimer?.();
    this.stallTimer = undefined;
    this.stallPosition = position;
    this.stallReleased = released;
    if (position === undefined) return;
    this.stallTimer = outsideWorkflow(() =>
      setLongTimeout(
        () => {
          this.stallTimer = undefined;
          if (
            this.halted ||
            this.delivery.stalledOn !== position ||
            this.delivery.released !== released
          ) {
            this.watchStall();
            return;
          }
          // Looked up only here, on the way to failing: a map of every recorded position,
          // built for each execution, cost a resume of 1,000 steps 1,000 inserts.
          let rec: StepRecord | undefined;
          for (const r of this.journal.outcomes.values()) if (r.delivery === position) rec = r;
          this.fail(
            new NonDeterminismError(
              `Run "${this.host.runId}" no longer matches its journal: its next recorded outcome is ${rec?.kind ?? "call"} "${rec?.name ?? "?"}" (key "${rec?.key ?? "?"}"), but the code has not called it for ${this.host.replayStallMs} ms. ${this.remedy()}`,
              { runId: this.host.runId, ...(rec ? { key: rec.key } : {}) },
            ),
          );
        },
        this.host.replayStallMs,
        { unref: true },
      ),
    );
  }

  /** A step's or an effect's options it does not take (`retries` for `retry`), refused as
   *  refusedArgument refuses: dropped, the call ran with the workflow's policy, silently.
   *  Own enumerable names only, as the other calls check theirs (option-names.ts). */
  private unknownStepOptions(call: Call, options: StepOptions | undefined): TypeError | undefined {
    const unknown = unknownOptionNames(options, STEP_OPTION_NAMES);
    if (unknown.length === 0) return undefined;
    return this.refusedArgument(call, unknownOptionsText(unknown, STEP_OPTION_NAMES));
  }
  // ---- executing a call ----

  private async runAttempts<T>(
    call: Call,
    options: StepOptions | undefined,
    body: (s: StepContext) => Promise<T> | T,
    /** What the record of a completing attempt says about it (an effect: reconciled?). */
    describe?: () => { reconciled?: boolean },
    effect?: {
      /** Whether the call may have begun before this execution (absent: assume so). */
      begun: () => boolean;
      /** Asked once the call is out of attempts: a value completes it after all. */
      lastChance: () => Promise<T | undefined> | T | undefined;
    },
    /** Waits in beforeExecute before anything else (a step); or the wait it found. */
    waitFirst: boolean | Promise<void> = false,
    /** The first attempt, made already by stepAtOnce: its outcome, still counted in flight,
     *  goes on here as the loop's own would (its checks before an attempt were made). */
    first?: FirstAttempt<T>,
  ): Promise<T> {
    if (waitFirst === true) {
      // The end of the cascade the step was made in (nearly always all it waits for) is
      // awaited here, and beforeExecute's wait only when it has one: no await otherwise.
      if (this.delivery.inCascade) await this.cascadeEnd();
      const waiting = this.beforeExecute(call);
      if (waiting !== undefined) await waiting;
    } else if (waitFirst !== false) await waitFirst;
    const { policy, timeoutMs } = this.stepRules(call, options);
    const prior = [...(this.journal.attempts.get(call.key) ?? [])];
    const clock = this.host.clock;
    if (
      first === undefined &&
      (!effect || effect.begun()) &&
      this.crashes.chargeIfCut(call.key, prior)
    ) {
      // The previous execution stopped without releasing the run while this call was in
      // flight: its attempt crashed with the worker. It counts, so a step that keeps
      // killing its process fails after maxAttempts instead of looping forever.
      const lost = workerLostAttempt(call, { attempt: prior.length + 1, at: clock.now() });
      await this.commit({ attempts: [lost] });
      this.crashes.chargeRecorded();
      prior.push(lost);
    }
    let firstEncoded: string | SerializationError | undefined;
    for (;;) {
      let attemptNo: number;
      let span: AttemptSpan | undefined;
      let result: AttemptResult<T>;
      if (first !== undefined) {
        ({ attempt: attemptNo, span, result, encoded: firstEncoded } = first);
        first = undefined;
      } else {
        // The attempts recorded so far propose; the policy decides (retry.ts).
        const plan = planNextAttempt(prior, policy);
        if (plan.kind === "give-up") {
          // Once only: a last chance cut by a crash (its attempt recorded as lost, past
          // maxAttempts) is not asked again, or a reconcile that kills its process would loop.
          if (effect && prior.length <= policy.maxAttempts) {
            const found = await this.lastChance(
              call,
              prior.length + 1,
              timeoutMs,
              effect.lastChance,
            );
            if (found !== undefined) return found.outcome;
          }
          return this.recordError<T>(call, plan.error, prior.at(-1)?.startedAt ?? clock.now(), {
            attempt: prior.length,
          });
        }
        if (this.finishing) return never();
        if (plan.notBefore !== null) {
          await this.waitForRetry(call.key, plan.notBefore, plan.attempt);
        }
        const estimate = options?.estimate ?? {};
        const over = this.budget.overBudget(estimate);
        if (over) {
          // Waits for attempts in flight to settle their reservations, else pauses the run.
          await this.block({ key: call.key, wakeAt: null, budget: over });
          continue;
        }
        if (this.draining) return never();
        // The estimate is reserved while the attempt runs; then its actual spend is, until
        // the record that carries it is written (commit() counts it as spent).
        this.budget.reserve(estimate);
        attemptNo = plan.attempt;
        span = this.attemptSpan(call, attemptNo);
        const traced = span ? (s: StepContext) => span!.run(() => body(s)) : body;
        try {
          // Resolves with the attempt still counted in flight (liveAttempts, active) until
          // what it returned is handed on below: a halt in between (a divergence found by
          // another branch) is settled with it (settleInFlight), and its spend recorded.
          result = await this.attempt(call, attemptNo, timeoutMs, traced);
        } catch (err) {
          span?.end({ outcome: "interrupted", spend: {} });
          throw err;
        } finally {
          this.budget.unreserve(estimate);
        }
      }
      const attemptEnded = this.attemptEndedOnce();
      try {
        this.budget.reserve(result.spend);
        if (this.halted) {
          span?.end({ outcome: "interrupted", spend: result.spend });
          await this.recordCutAttempt(call, attemptNo, result);
          return never();
        }
        // Each write below begins (counted in active) before the attempt stops counting.
        const by = describe?.().reconciled ? "reconcile" : "perform";
        const encoded = !result.ok
          ? undefined
          : (firstEncoded ?? this.encodeStepValue(call, result.value, by));
        firstEncoded = undefined;
        if (typeof encoded === "string") {
          span?.end({ outcome: "ok", spend: result.spend });
          return this.recordEncoded<T>(call, encoded, result.startedAt, undefined, {
            spend: result.spend,
            attempt: attemptNo,
            ...describe?.(),
          });
        }
        // A value that cannot be stored is the attempt's failure, like a throw.
        const failure = result.ok ? encoded : result.failure;
        const failed = this.judgeAttempt(call, attemptNo, policy, result, failure, span);
        // Final by its kind (a FatalError, also one known by its code only): failed for
        // good, recorded with its outcome at once. Only a call out of attempts goes on to
        // the last chance: there, a crash before the outcome is recorded adds a lost attempt
        // past maxAttempts (the call gives up), where after a failure final by its kind the
        // lost attempt would have been taken for a retry, and perform called again.
        // An effect's perform that threw on its last attempt may have happened all the same
        // (a lost response): its failed attempt is recorded like a retried one, and the
        // loop's give-up asks reconcile (lastChance).
        const reconcileLast = effect !== undefined && !isFatalFailure(failure, failed.record.error);
        if (failed.final && !reconcileLast) {
          return this.recordError<T>(call, failed.record.error, result.startedAt, {
            attempts: [failed.record],
            attempt: attemptNo,
          });
        }
        const written = this.commit({ attempts: [failed.record] });
        attemptEnded();
        await written;
        this.crashes.attemptRecorded();
        this.budget.failedAttempt(call.key, result.spend);
        prior.push(failed.record);
      } finally {
        attemptEnded();
      }
    }
  }

  /** Ends the count of an attempt `attempt` resolved with (liveAttempts, active), once,
   *  however often it is called: each path hands its result on before it calls it. */
  private attemptEndedOnce(): () => void {
    let counted = true;
    return () => {
      if (!counted) return;
      counted = false;
      this.liveAttempts--;
      this.workEnded();
    };
  }

  /** An effect out of attempts whose perform may have happened: reconcile, as one more
   *  attempt (abort, timeout and spend as any), says whether it did. Resolves with the
   *  call's outcome when it found a value (recorded as reconciled), else undefined (the
   *  call fails as it would have; what reconcile threw is not its error). */
  private async lastChance<T>(
    call: Call,
    attemptNo: number,
    timeoutMs: number | undefined,
    check: () => Promise<T | undefined> | T | undefined,
  ): Promise<{ outcome: Promise<T> } | undefined> {
    // The engine closes: no new attempt starts; whoever takes the run over asks instead.
    if (this.draining) return never();
    const result = await this.attempt<T | undefined>(call, attemptNo, timeoutMs, () => check());
    const attemptEnded = this.attemptEndedOnce();
    try {
      if (this.halted) {
        await this.recordCutAttempt(call, attemptNo, result);
        return never();
      }
      if (!result.ok || result.value === undefined) return undefined;
      const encoded = this.encodeStepValue(call, result.value, "reconcile");
      if (typeof encoded !== "string") return undefined;
      // The write begins (counted in active) before the attempt stops counting.
      const outcome = this.recordEncoded<T>(call, encoded, result.startedAt, undefined, {
        spend: result.spend,
        attempt: attemptNo,
        reconciled: true,
      });
      return { outcome };
    } finally {
      attemptEnded();
    }
  }

  /** A step's options, checked before anything is recorded: its retry policy, its timeout,
   *  and its estimate (read again before each attempt). */
  private stepRules(
    call: Call,
    options: StepOptions | undefined,
  ): { policy: RetryPolicy; timeoutMs: number | undefined } {
    // A step without retry options of its own (nearly every step) takes the execution's
    // policy, resolved and checked once: it was an object, an array and two closures a step.
    // (Only then: a step's own options may mend a field the workflow's got wrong.)
    // A step with no options (stepAtOnce asks for every one) gets the execution's rules,
    // one object: the closure naming the step, and the object returned, were made a step.
    if (options === undefined && this.hostRules !== undefined) return this.hostRules;
    const where = () => `Step "${call.key}" of run "${this.host.runId}"`;
    let policy: RetryPolicy;
    if (options?.retry === undefined) {
      this.hostPolicy ??= resolvePolicy([this.host.retry], where);
      policy = this.hostPolicy;
    } else policy = resolvePolicy([this.host.retry, options.retry], where);
    if (options === undefined) {
      this.hostRules = { policy, timeoutMs: undefined };
      return this.hostRules;
    }
    const timeoutMs =
      options?.timeout === undefined
        ? undefined
        : toMs(options.timeout, `timeout of step "${call.key}"`);
    // null too: a JavaScript caller's "no estimate" (the attempt loop reads it so).
    if (options?.estimate == null) return { policy, timeoutMs };
    for (const [k, v] of Object.entries(options.estimate)) {
      const nameProblem = amountNameProblem(k);
      if (nameProblem) {
        throw new TypeError(
          `Step "${call.key}" of run "${this.host.runId}": estimate ${nameProblem}`,
        );
      }
      if (typeof v !== "number" || !Number.isFinite(v) || v < 0) {
        throw new TypeError(
          `Step "${call.key}" of run "${this.host.runId}": estimate "${k}" must be a finite number >= 0 (got ${String(v)})`,
        );
      }
    }
    return { policy, timeoutMs };
  }

  private attemptSpan(call: Call, attempt: number): AttemptSpan | undefined {
    return this.host.traceAttempt?.({ key: call.key, name: call.name, kind: call.kind, attempt });
  }

  /** A completed attempt's value as stored, or why it cannot be (the attempt's failure). */
  private encodeStepValue(
    call: Call,
    value: unknown,
    by: "perform" | "reconcile" = "perform",
  ): string | SerializationError {
    try {
      return encode(value, this.host.maxPayloadBytes);
    } catch (err) {
      if (!(err instanceof EncodeError)) throw err;
      // An effect's value comes from its perform or its reconcile: say which (the side
      // effect happened either way).
      const who =
        call.kind === "effect"
          ? `Effect "${call.key}" of run "${this.host.runId}": its ${by}`
          : `Step "${call.key}" of run "${this.host.runId}"`;
      return new SerializationError(
        `${who} returned a value that ${err.message}; ${call.kind === "effect" ? "effect" : "step"} results must be serializable (plain data, Date, Map, Set, BigInt, Uint8Array, Error) and within the payload limit`,
        { cause: err },
      );
    }
  }

  /** A failed attempt: the policy's verdict (retry.ts), and the attempt's record. */
  private judgeAttempt(
    call: Call,
    attempt: number,
    policy: RetryPolicy,
    result: AttemptResult<unknown>,
    failure: unknown,
    span: AttemptSpan | undefined,
  ): { final: boolean; record: AttemptRecord } {
    let error = toErrorRecord(failure);
    const endedAt = this.host.clock.now();
    let verdict: { final: boolean; retryAt: number | null };
    try {
      verdict = judgeFailure(failure, error, attempt, policy, endedAt, Math.random);
    } catch (err) {
      // A RateLimitError whose retryAfter is no Duration or Date: the attempt is recorded
      // all the same (with its spend), and the call fails saying what was wrong.
      verdict = { final: true, retryAt: null };
      error = toErrorRecord(
        new TypeError(
          `Step "${call.key}" of run "${this.host.runId}" failed with a ${error.name} that cannot be retried: ${(err as Error).message}`,
        ),
      );
    }
    span?.end({ outcome: verdict.final ? "error" : "retry", spend: result.spend, error });
    const record = attemptRecord(call, {
      attempt,
      startedAt: result.startedAt,
      endedAt,
      error,
      spend: result.spend,
      retryAt: verdict.retryAt,
    });
    return { final: verdict.final, record };
  }

  private async waitForRetry(key: string, notBefore: number, attempt: number): Promise<void> {
    const wait = notBefore - this.host.clock.now();
    if (wait > this.host.inProcessRetryMs) {
      while (this.host.clock.now() < notBefore) {
        await this.block({ key, wakeAt: notBefore, retryAttempt: attempt });
      }
    } else if (wait > 0) {
      this.active++;
      try {
        await this.host.clock.sleep(
          wait,
          AbortSignal.any([this.runAbort.signal, this.drainAbort.signal]),
        );
        // The backoff ended as the run stopped or its function settled (the abort came a
        // microtask late): no new attempt starts then either.
        if (this.halted || this.finishing) return never();
      } catch {
        // Canceled, or the engine closes: the failed attempt and its retryAt are recorded.
        return never();
      } finally {
        this.workEnded();
        this.maybeSuspend();
      }
    }
  }

  /** One attempt of a step body. Its spend is final once it returns: later s.spend() calls
   *  are refused loudly. An aborted attempt (timeout, cancel) gets a grace to settle. Not an
   *  async function: a step without a timeout settles its result in two promises of its
   *  own (the body's reaction and the race's), where an async attempt awaiting an async
   *  race made eight, each seen by the async hook (call-scope.ts) and run as a microtask. */
  private attempt<T>(
    call: Call,
    attempt: number,
    timeoutMs: number | undefined,
    body: (s: StepContext) => Promise<T> | T,
  ): Promise<AttemptResult<T>> {
    const spend: Amounts = {};
    let ended = false;
    // The key and the signal are made when the body first reads them (AttemptContext).
    const abort = new LazyAbort();
    const s: StepContext = new AttemptContext(
      attempt,
      this.host.runId,
      call.key,
      abort,
      (amounts) => {
        for (const [k, v] of Object.entries(amounts ?? {})) {
          const nameProblem = amountNameProblem(k);
          if (nameProblem) {
            throw new TypeError(`s.spend() in step "${call.key}": ${nameProblem}`);
          }
          if (typeof v !== "number" || !Number.isFinite(v) || v < 0) {
            throw new TypeError(
              `s.spend() in step "${call.key}": amount "${k}" must be a finite number >= 0 (got ${String(v)})`,
            );
          }
        }
        if (ended) {
          const err = new TypeError(
            `s.spend() in step "${call.key}" of run "${this.host.runId}" came after attempt ${attempt} had ended and was recorded, so it was not charged; report spend before the step returns`,
          );
          this.host.log(err.message);
          throw err;
        }
        addAmounts(spend, amounts);
      },
    );
    const startedAt = this.host.clock.now();
    // Counted until the body itself settles, past any abort's grace (bodiesInFlight); not
    // one its timeout gave up on (past the grace): the call is retried beside it anyway,
    // and holding the run for it would keep a run whose timed-out body hangs for good.
    this.bodiesRunning++;
    let counted = true;
    const uncount = () => {
      if (!counted) return;
      counted = false;
      this.bodyEnded();
    };
    // Most steps have no timeout: the body's outcome and a halt of the run race to settle
    // one promise, `decided`. The halt settles it as the run's abort fires and the body's
    // outcome from its reaction: the same winner, in every interleaving, as
    // Promise.race([settled, stopped]) with the halt a microtask after the abort (as a
    // reaction of an already settled promise) took, in two promises where that race made
    // four more.
    let decide: ((first: AttemptResult<T> | "halted") => void) | undefined;
    const decided =
      timeoutMs === undefined
        ? new Promise<AttemptResult<T> | "halted">((resolve) => {
            decide = resolve;
          })
        : undefined;
    let settled: Promise<AttemptResult<T>>;
    try {
      settled = Promise.resolve(runInBody(this, call.key, () => body(s))).then(
        (value) => {
          uncount();
          const outcome: AttemptResult<T> = { ok: true, value, spend, startedAt };
          decide?.(outcome);
          return outcome;
        },
        (failure: unknown) => {
          uncount();
          const outcome: AttemptResult<T> = { ok: false, failure, spend, startedAt };
          decide?.(outcome);
          return outcome;
        },
      );
    } catch (failure) {
      uncount();
      const outcome: AttemptResult<T> = { ok: false, failure, spend, startedAt };
      decide?.(outcome);
      settled = Promise.resolve(outcome);
    }
    this.liveAttempts++;
    this.active++;
    let stopListening = () => {};
    const finish = (outcome: AttemptResult<T>): AttemptResult<T> => {
      stopListening();
      ended = true;
      return outcome;
    };
    const fail = (err: unknown): never => {
      stopListening();
      ended = true;
      // Still counted otherwise: runAttempts ends the attempt once it handed on its result.
      this.liveAttempts--;
      this.workEnded();
      throw err;
    };
    if (decided === undefined) {
      const timed = this.raceTimeout(settled, timeoutMs!, abort, call.key, uncount);
      return timed.then(
        (first) =>
          finish(
            "stoppedBy" in first
              ? { ok: false, failure: first.stoppedBy, spend, startedAt }
              : first,
          ),
        fail,
      );
    }
    const halted = () => decide!("halted");
    if (this.runAbort.aborted) halted();
    else stopListening = this.runAbort.onAbort(halted);
    return decided.then((first) => {
      if (first !== "halted") return finish(first);
      const reason = this.runAbort.reason;
      return this.stopAttempt(settled, abort, reason).then(
        () => finish({ ok: false, failure: reason, spend, startedAt }),
        fail,
      );
    });
  }

  /** An attempt that ended after the run was canceled, or failed by the engine (a
   *  divergence: halt): whatever it returned is no outcome of the run, but what it spent is
   *  recorded (the run's epoch is still ours), and a resume runs it again. */
  private async recordCutAttempt(
    call: Call,
    attempt: number,
    result: AttemptResult<unknown>,
  ): Promise<void> {
    const stop = this.halted;
    if (stop === undefined || (stop.kind !== "canceled" && stop.kind !== "failed")) return;
    const error = toErrorRecord(
      stop.kind === "canceled"
        ? new RunCanceledError(`Run "${this.host.runId}" was canceled`)
        : result.ok || result.failure instanceof HaltedSignal
          ? this.endedWhileRunning(false)
          : result.failure,
    );
    const rec = attemptRecord(call, {
      attempt,
      startedAt: result.startedAt,
      endedAt: this.host.clock.now(),
      error,
      spend: result.spend,
      retryAt: null,
    });
    await this.host.commit({ attempts: [rec] }).catch(() => {});
  }

  /** An attempt of a step with a timeout: its body's outcome, or what stopped it first (a
   *  halt of the run, its timer), once the body had its grace to stop. */
  private async raceTimeout<T>(
    settled: Promise<AttemptResult<T>>,
    timeoutMs: number,
    abort: LazyAbort,
    key: string,
    givenUp: () => void,
  ): Promise<AttemptResult<T> | { stoppedBy: unknown }> {
    // Only a timed attempt has a timer to stop (an abort() builds a DOMException: costly
    // enough to show in a per-step profile).
    let stopListening = () => {};
    const stopped = new Promise<"halted">((resolve) => {
      if (this.runAbort.aborted) resolve("halted");
      else stopListening = this.runAbort.onAbort(() => resolve("halted"));
    });
    const stop = new AbortController();
    const timedOut = this.host.clock.sleep(timeoutMs, stop.signal).then(
      () => "timeout" as const,
      () => never<"timeout">(),
    );
    try {
      // None of the three rejects.
      const first = await Promise.race([settled, stopped, timedOut]);
      if (first !== "timeout" && first !== "halted") return first;
      const reason =
        first === "timeout"
          ? new StepTimeoutError(
              `Step "${key}" of run "${this.host.runId}" did not finish within ${timeoutMs} ms; its signal was aborted`,
            )
          : this.runAbort.reason;
      await this.stopAttempt(settled, abort, reason);
      // A body its timeout gave up on no longer holds the run (bodiesInFlight).
      if (first === "timeout") givenUp();
      return { stoppedBy: reason };
    } finally {
      stop.abort();
      stopListening();
    }
  }

  /** An attempt stopped (its timeout, a halt of the run): its signal is aborted with
   *  `reason`, and the body given a moment to stop and report what it spent. */
  private stopAttempt(settled: Promise<unknown>, abort: LazyAbort, reason: unknown): Promise<void> {
    abort.abort(reason);
    return outsideWorkflow(() => settledWithin(settled, this.host.abortGraceMs));
  }

  /** Attempts in flight released their reservations: branches waiting for budget look again. */
  private budgetMayHaveRoom(): void {
    if (this.blocked === undefined) return;
    for (const b of [...this.blocked]) if (b.budget) b.wake();
  }

  // ---- recording outcomes ----

  /** Records a call's value. `payload`: the part of it that came from outside (an event's
   *  payload, an approval's answer): it is held to maxPayloadBytes as sendEvent held it, and
   *  the wrapper cairn puts around it is not (a payload accepted near the limit is still
   *  delivered). A value that cannot be stored is the call's recorded error (in its turn,
   *  its event consumed), never an unrecorded rejection a replay could hand over elsewhere. */
  recordValue<T>(
    call: Call,
    value: T,
    startedAt: number,
    consume?: RunWrite["consume"],
    payload?: { value: unknown },
  ): Promise<T> {
    let encoded: string;
    try {
      if (payload) encode(payload.value, this.host.maxPayloadBytes);
      encoded = encode(value, payload ? Number.POSITIVE_INFINITY : this.host.maxPayloadBytes);
    } catch (err) {
      const e = new SerializationError(
        `${call.kind} "${call.key}" of run "${this.host.runId}": the ${payload ? "payload" : "value"} ${(err as Error).message}; nothing of it was handed over`,
        { cause: err },
      );
      return this.recordError<T>(call, toErrorRecord(e), startedAt, consume ? { consume } : {});
    }
    return this.recordEncoded<T>(call, encoded, startedAt, consume);
  }

  recordEncoded<T>(
    call: Call,
    encoded: string,
    startedAt: number,
    consume?: RunWrite["consume"],
    extra: { spend?: Amounts; attempt?: number; reconciled?: boolean } = {},
  ): Promise<T> {
    return this.record<T>(
      (delivery) =>
        outcomeRecord(call, {
          startedAt,
          completedAt: this.host.clock.now(),
          result: encoded,
          spend: extra.spend ?? {},
          attempt: extra.attempt ?? 1,
          delivery,
          ...(extra.reconciled !== undefined ? { reconciled: extra.reconciled } : {}),
        }),
      consume ? { consume } : {},
      () => decode<T>(encoded),
    );
  }

  recordError<T>(
    call: Call,
    error: ErrorRecord,
    startedAt: number,
    o: { attempts?: AttemptRecord[]; attempt?: number; consume?: RunWrite["consume"] } = {},
  ): Promise<T> {
    const write: Omit<RunWrite, "runId" | "epoch"> = {};
    if (o.attempts?.length) write.attempts = o.attempts;
    if (o.consume?.length) write.consume = o.consume;
    return this.record<T>(
      (delivery) =>
        outcomeRecord(call, {
          startedAt,
          completedAt: this.host.clock.now(),
          error,
          attempt: o.attempt ?? 1,
          delivery,
        }),
      write,
      () => undefined as T,
    );
  }

  /** Writes a new outcome (with whatever else `write` carries) and hands it over in turn.
   *  Not an async function awaiting commit(): one promise of its own and the commit's, where
   *  the two async functions made five a step. */
  private record<T>(
    build: (delivery: number) => StepRecord,
    write: Omit<RunWrite, "runId" | "epoch">,
    value: () => T,
  ): Promise<T> {
    if (this.halted) return never();
    let rec: StepRecord;
    try {
      if (this.host.replayOnly) return this.reachFrontier(build(-1).key);
      rec = build(this.delivery.allocate());
    } catch (err) {
      return Promise.reject(err);
    }
    // `write` is the caller's own, made for this record: the record joins it (an object
    // spread of writes of several shapes cost ~10,000 instructions under callgrind).
    write.steps = [rec];
    return new Promise<T>((resolve, reject) =>
      this.recordBuilt(rec, write, value, resolve, reject),
    );
  }

  /** A step's first attempt's value (stepAtOnce), recorded as recordEncoded records it, and
   *  handed over by settling the step's own promise. */
  private recordAtOnce<T>(
    call: Call,
    encoded: string,
    result: AttemptResult<T>,
    resolve: (value: T) => void,
    reject: (err: unknown) => void,
  ): void {
    if (this.halted) return;
    if (this.host.replayOnly) {
      resolve(this.reachFrontier<T>(call.key) as T);
      return;
    }
    let rec: StepRecord;
    try {
      const delivery = this.delivery.allocate();
      rec = outcomeRecord(call, {
        startedAt: result.startedAt,
        completedAt: this.host.clock.now(),
        result: encoded,
        spend: result.spend,
        attempt: 1,
        delivery,
      });
    } catch (err) {
      reject(err);
      return;
    }
    this.recordBuilt(rec, { steps: [rec] }, () => decode<T>(encoded), resolve, reject);
  }

  /** Writes `write` (holding the new outcome `rec`), then hands `rec` over in its turn. */
  private recordBuilt<T>(
    rec: StepRecord,
    write: Omit<RunWrite, "runId" | "epoch">,
    value: () => T,
    resolve: (value: T) => void,
    reject: (err: unknown) => void,
  ): void {
    const durable = () => {
      // It may not be handed over before the run ends (its turn comes after the function
      // settled).
      if (rec.outcome === "error") this.unheardFailures = withAdded(this.unheardFailures, rec.key);
      this.delivery.durable(rec.delivery!, () => {
        if (this.halted) return;
        this.lateCalls.noteHandedOver(rec.key);
        this.budget.handOver(rec.key, rec.spend, write.attempts);
        if (rec.outcome === "error") {
          if (!this.functionSettled) this.unheardFailures?.delete(rec.key);
          reject(this.callError(rec.key, rec.error ?? { name: "Error", message: "failed" }));
          return;
        }
        try {
          resolve(value());
        } catch (err) {
          reject(err);
        }
      });
    };
    this.written(write, durable, reject);
  }

  async commit(write: Omit<RunWrite, "runId" | "epoch">): Promise<void> {
    if (this.halted) return never();
    if (this.host.replayOnly) {
      const key =
        write.steps?.[0]?.key ?? write.intents?.[0]?.key ?? write.attempts?.[0]?.key ?? "";
      return this.reachFrontier(key);
    }
    return new Promise<void>((resolve, reject) => this.written(write, resolve, reject));
  }

  /** Writes `write` and calls `then` once it is durable and counted; never, when the write
   *  stops the execution (a lost lease, a conflict, the store's failure: halt or fail).
   *  `threw`: what the bookkeeping around it threw (as an async commit() rejected). */
  private written(
    write: Omit<RunWrite, "runId" | "epoch">,
    then: () => void,
    threw: (err: unknown) => void,
  ): void {
    if (this.halted) return;
    this.active++;
    const landed = () => {
      try {
        this.workEnded();
        if (this.halted) return;
        // Two loops, not one over a copy of both: this runs after every step.
        for (const r of write.steps ?? []) this.budget.recorded(r.spend);
        for (const r of write.attempts ?? []) this.budget.recorded(r.spend);
        this.budgetMayHaveRoom();
        this.maybeSuspend();
        then();
      } catch (err) {
        threw(err);
      }
    };
    const refused = (err: unknown) => {
      try {
        if (err instanceof LeaseLostError) this.halt({ kind: "lease-lost" });
        else if (err instanceof WriteConflictError || err instanceof SerializationError) {
          this.fail(err);
        } else this.halt({ kind: "interrupted", error: err as Error });
        this.workEnded();
      } catch (thrown) {
        threw(thrown);
      }
    };
    try {
      // The engine's committer answers by callbacks: a promise of its own and a reaction to
      // it were two of a step's promises.
      if (this.host.commitThen) this.host.commitThen(write, landed, refused);
      else this.host.commit(write).then(landed, refused);
    } catch (err) {
      refused(err);
    }
  }

  /** Counts `p` as active work (the run must not suspend while it is in flight). */
  async active0<T>(p: Promise<T>): Promise<T> {
    this.active++;
    try {
      return await p;
    } catch (err) {
      // A refusal (a child id taken, another input under it) fails the run; anything else
      // is the store's trouble: the run is handed back.
      if ((err as { code?: unknown }).code === "RUN_CONFLICT") this.fail(err as Error);
      else if (err instanceof LeaseLostError) this.halt({ kind: "lease-lost" });
      else this.halt({ kind: "interrupted", error: err as Error });
      return never();
    } finally {
      this.workEnded();
      this.maybeSuspend();
    }
  }

  /** How far the store's clock (which stamps events and judges approval answers) is still
   *  before `deadline`; 0 when it has reached it, or when the store's time is this clock's. */
  async storeBehind(deadline: number): Promise<number> {
    if (!this.host.storeNow) return 0;
    return Math.max(0, deadline - (await this.active0(this.host.storeNow())));
  }

  /** Reads the run's events again; `settled` for the last look after a deadline. */
  async reloadEvents(settled = false): Promise<void> {
    const byName = this.eventReads;
    if (byName) await this.active0(byName.reload(settled));
    else this.addEvents(await this.active0(this.host.loadEvents(settled)));
  }

  /** The reads of events by name (event-reads.ts), when the host reads them so; else every
   *  pending event was handed over with the journal and is read again by loadEvents. */
  private get eventReads(): EventReads | undefined {
    if (this.eventReadsMade || !this.host.readEventHeads || !this.host.eventPayloads) {
      return this.eventReadsMade;
    }
    const host = this.host;
    const along = awaitedChildEvents(this.journal);
    if (along.length > 0) this.readAlong = new Set(along);
    this.eventReadsMade = new EventReads({
      read: (page, settled) => host.readEventHeads!(page, settled),
      // The children's results are read along only by a store that reads several names in
      // one call: without it they would be N reads at once, not one each as it is taken.
      ...(host.readEventHeadsOfNames && {
        readMany: (pages, settled) => host.readEventHeadsOfNames!(pages, settled),
        along: () => along,
      }),
      add: (heads) => this.addEvents(heads),
      takeable: (name, deadline) => this.takenAt(name, deadline) >= 0,
    });
    return this.eventReadsMade;
  }

  // ---- waiting and suspension ----

  /** Whether an event of that name is pending for this run (it is not taken); a promise
   *  when its events must be read first (eventReads). */
  hasEvent(name: string): boolean | Promise<boolean> {
    const byName = this.eventReads;
    if (!byName || byName.ready(name, null)) return this.events?.has(name) === true;
    return this.active0(byName.whenReady(name, null, () => this.events?.has(name) === true));
  }

  /** The oldest event of that name. Once `deadline` has passed, only one stored by then
   *  counts. A promise when its events must be read first (eventReads), or a take called
   *  before it waits for a read: takes go in the order called. */
  takeEvent(
    name: string,
    deadline: number | null = null,
  ): PendingEvent | undefined | Promise<PendingEvent | undefined> {
    const byName = this.eventReads;
    if (!byName || byName.ready(name, deadline)) return this.takeRead(name, deadline);
    return this.active0(byName.whenReady(name, deadline, () => this.takeRead(name, deadline)));
  }

  /** Where the event takeEvent would take is in its name's list, or -1. */
  private takenAt(name: string, deadline: number | null): number {
    const sentBy = deadline !== null && this.host.clock.now() >= deadline ? deadline : undefined;
    const list = this.events?.get(name);
    if (!list) return -1;
    return sentBy === undefined ? 0 : list.findIndex((e) => e.createdAt <= sentBy);
  }

  /** takeEvent among the events read. */
  private takeRead(name: string, deadline: number | null): PendingEvent | undefined {
    const i = this.takenAt(name, deadline);
    if (i < 0) return undefined;
    const list = this.events!.get(name)!;
    const ev = list.splice(i, 1)[0]!;
    if (list.length === 0) this.events?.delete(name);
    return ev;
  }

  /** The payloads of the events taken so far, in the order taken (eventPayload). */
  private takenInOrder: Promise<unknown> | undefined;

  /** The payload of a taken event, once those taken before it have theirs: a wait goes on
   *  (and records) in the order the events were taken, as when payloads came with the heads;
   *  else a race of two waits whose events were both pending was won by the faster read. */
  eventPayload(ev: PendingEvent): Promise<string> {
    const before = this.takenInOrder;
    const own = this.readEventPayload(ev);
    const ordered = own.then(async (payload) => {
      await before;
      return payload;
    });
    this.takenInOrder = ordered.catch(() => {});
    return ordered;
  }

  private async readEventPayload(ev: PendingEvent): Promise<string> {
    if (ev.payload !== undefined) return ev.payload;
    // A read under way that took this payload along (another wait's); it may come back
    // without it (its batch held one this worker cannot read: readPayloads).
    this.payloadReads ??= new Map();
    const shared = this.payloadReads.get(ev.seq);
    let payload = shared && (await shared).get(ev.seq);
    if (payload === undefined && ev.payload !== undefined) payload = ev.payload;
    if (payload === undefined) {
      // The next events of its name are likely waited for next (a loop of waits): read
      // theirs in the same query, a few at a time (a payload may weigh megabytes).
      // So are the other children's results, when this is one (a parent replayed after
      // its children ended takes each once).
      const evs = [ev];
      if (!shared) {
        const reads = this.payloadReads;
        const along = (e: PendingEvent) => {
          if (evs.length >= PAYLOADS_READ_TOGETHER) return false;
          if (e.payload === undefined && !reads.has(e.seq)) evs.push(e);
          return true;
        };
        for (const e of this.events?.get(ev.name) ?? []) if (!along(e)) break;
        const children = this.readAlong;
        if (children?.has(ev.name)) {
          // A child whose result is read (or being read) leaves the set: each take walks only
          // the results still unread, not every child's again.
          children.delete(ev.name);
          for (const name of children) {
            const first = this.events?.get(name)?.[0];
            if (first === undefined) continue;
            if (first.payload !== undefined || reads.has(first.seq)) children.delete(name);
            else if (!along(first)) break;
          }
        }
      }
      const seqs = evs.map((e) => e.seq);
      const read = this.readPayloads(evs);
      for (const seq of seqs) this.payloadReads.set(seq, read);
      payload = (await read).get(ev.seq);
    }
    if (payload === undefined) {
      this.halt({
        kind: "interrupted",
        error: new StoreError(
          `run "${this.host.runId}": the store holds no payload for its event #${ev.seq} "${ev.name}", which it listed as pending; the run is handed back and reads its events again`,
        ),
      });
      return never();
    }
    ev.payload = payload;
    return payload;
  }

  /** Reads the payloads of these events (eventPayload); the first is the one a wait took,
   *  the others are read along. */
  private async readPayloads(evs: PendingEvent[]): Promise<Map<number, string>> {
    const seqs = evs.map((e) => e.seq);
    const host = this.host;
    const eventPayloads = host.eventPayloads;
    if (!eventPayloads) {
      const why = `cairn: run "${host.runId}" was handed events without their payloads (ContextHost.loadEvents), and no eventPayloads to read them`;
      this.halt({ kind: "interrupted", error: new Error(why) });
      return never();
    }
    const rows = async () => {
      try {
        return await eventPayloads.call(host, seqs);
      } catch (err) {
        if (seqs.length === 1) throw err;
        // A payload read along may be one this worker cannot read (encryptedStore: under a
        // key it lacks), which must stop only a wait that takes that event: the taken one
        // alone (the others are read again when taken).
        return eventPayloads.call(host, seqs.slice(0, 1));
      }
    };
    const read = new Map<number, string>();
    try {
      for (const r of await this.active0(rows())) read.set(r.seq, r.payload);
    } finally {
      for (const seq of seqs) this.payloadReads?.delete(seq);
    }
    for (const e of evs) {
      if (e.payload === undefined) {
        const payload = read.get(e.seq);
        if (payload !== undefined) e.payload = payload;
      }
    }
    return read;
  }

  /** Blocks this branch until woken in process (its timer fires or an event arrives). When
   *  every branch is blocked, the execution suspends and the promise never settles. */
  block(b: BlockOn): Promise<void> {
    if (this.halted) return never();
    this.blocked ??= new Set();
    const blocked = this.blocked;
    return new Promise<void>((resolve) => {
      const entry: Blocked = {
        ...b,
        wake: () => {
          if (!blocked.delete(entry)) return;
          entry.timer?.abort();
          resolve();
        },
      };
      blocked.add(entry);
      if (b.wakeAt !== null) {
        entry.timer = new AbortController();
        const ms = Math.max(0, b.wakeAt - this.host.clock.now());
        this.host.clock.sleep(ms, entry.timer.signal).then(
          () => entry.wake(),
          () => {},
        );
      }
      this.maybeSuspend();
    });
  }

  /** Nothing runs, nothing is being handed over, and the journal is fully replayed. */
  private get quiescent(): boolean {
    return (
      this.active === 0 &&
      this.afterCascade.length === 0 &&
      this.delivery.idle &&
      this.delivery.recordedLeft === 0
    );
  }

  private maybeSuspend(): void {
    // The function has settled: the run ends as it did, once attempts in flight are recorded.
    // So too while the end-of-run check waits for a call the first run made late (up to
    // replayStallMs): a wait still pending then (a race's loser) is no reason to suspend,
    // and a run suspended for it would never have its divergence judged.
    if (this.finishing || (this.functionSettled && !this.draining)) return;
    if (this.suspendScheduled || this.halted || !this.quiescent) return;
    if ((this.blocked?.size ?? 0) === 0 && !this.draining) return;
    this.suspendScheduled = true;
    outsideWorkflow(() => setImmediate(() => this.suspendIfStill()));
  }

  private suspendIfStill(): void {
    this.suspendScheduled = false;
    if (this.halted || this.finishing || !this.quiescent) return;
    // A branch may still be busy with work of its own (a timer, a file): look again later.
    const busyMs = this.lateWork.holdsRunForMs(LATE_WORK_GRACE_MS);
    if (busyMs > 0) {
      if (this.lateRecheck === undefined) {
        this.lateRecheck = setTimeout(() => {
          this.lateRecheck = undefined;
          this.maybeSuspend();
        }, busyMs);
        this.lateRecheck.unref?.();
      }
      return;
    }
    // Settled, the function is not run again on a wake-up: the engine's close hands the run
    // back, for the next worker to judge the end again.
    const blocked = this.blocked;
    if (blocked === undefined || blocked.size === 0 || this.functionSettled) {
      if (this.draining) this.halt({ kind: "handed-back" });
      return;
    }
    const budget = [...blocked].find((b) => b.budget);
    if (budget?.budget) {
      this.halt({ kind: "paused", reason: budget.budget });
      return;
    }
    let first: Blocked | undefined;
    const waitingFor = new Set<string>();
    for (const b of blocked) {
      if (b.wakeAt !== null && (first === undefined || b.wakeAt < first.wakeAt!)) first = b;
      if (b.event) waitingFor.add(b.event);
    }
    const wakeAt = first?.wakeAt ?? null;
    // Told apart from a sleep: the run view says which step waits to try again (release-of.ts).
    const backoff =
      first?.retryAttempt !== undefined
        ? { key: first.key, attempt: first.retryAttempt }
        : undefined;
    this.halt({
      kind: "suspended",
      wakeAt,
      waitingFor: [...waitingFor],
      ...(backoff && { backoff }),
    });
  }

  // ---- ending ----

  /** The workflow function settled: once the values it drew are durable, the run ends so. */
  private async finishWith(o: Outcome & { kind: "completed" | "failed" }): Promise<void> {
    if (this.halted) return;
    // A late call holds a record that may be another call's (doubtfulCall), and a
    // ctx.now/random/uuid value is handed over at once: the function's output may hold that
    // other call's value. It waits for the verdict, as new calls do (beforeExecute); a close
    // meanwhile hands the run back for the next execution to judge.
    while (this.delivery.holding && this.held.doubtfulCall() && !this.halted) {
      if (this.draining) {
        this.halt({ kind: "handed-back" });
        return;
      }
      await this.held.nextVerdict();
    }
    if (this.halted) return;
    if (o.kind === "completed" || o.failedKeys.length > 0) {
      // Awaited even when nothing is missing: a call made inside the cascade the function
      // settled in begins its attempt in that turn (afterCascade), and the settle below
      // must count it in flight.
      const missing = await this.unreplayedAtEnd();
      if (this.halted) return;
      if (missing) {
        this.fail(
          new NonDeterminismError(
            `Run "${this.host.runId}" no longer matches its journal: the workflow ${o.kind === "completed" ? "returned" : "failed"}, but the journal recorded ${missing.kind} "${missing.name}" (key "${missing.key}")${"begun" in missing ? " begun and not finished" : ""} that this code never called. ${this.remedy()}`,
            { runId: this.host.runId, key: missing.key },
          ),
        );
        return;
      }
    }
    const settling = this.settleInFlight(o.kind === "completed");
    if (settling !== undefined) await settling;
    if (this.halted) return;
    // Awaited only while one is not yet durable (a failed one halts the run); again for one
    // drawn while it waited (a reaction of the function's own, after it returned): made
    // after this await began, it is not in the promise awaited, and the run would end
    // before its write, with its value perhaps in the output.
    while (this.syncWritesPending > 0) {
      await this.syncWrites;
      if (this.halted) return;
    }
    const unheard = this.unheardFailures;
    if (o.kind === "failed" && unheard !== undefined && unheard.size > 0) {
      this.halt({ ...o, failedKeys: [...new Set([...o.failedKeys, ...unheard])] });
      return;
    }
    this.halt(o);
  }

  /** The run ends (the function settled, or the engine failed the run: halt) while work
   *  of other branches is in flight. Nothing new starts meanwhile (beforeExecute; no retry:
   *  a failed attempt is recorded with its retryAt), and before the run ends each attempt
   *  in flight is recorded, with its spend:
   *  - a completed run aborts them at once (a race's loser), each with abortGraceMs to stop,
   *    as when a run is canceled;
   *  - a failed run (it may be resumed) first gives them abortGraceMs to finish on their own,
   *    so that what finishes is recorded and a resume replays it instead of executing it
   *    again (a run the engine failed is halted: it records what finishes as an attempt,
   *    see attempt); what is still running then is aborted as above. The run's end waits
   *    at most twice abortGraceMs, and for the writes that record them.
   *  Returns early if the execution halts (otherwise) meanwhile. Undefined (nothing to wait
   *  for) when nothing is in flight. */
  private settleInFlight(completed: boolean): Promise<void> | undefined {
    this.finishing = true;
    this.drainAbort.abort(undefined); // an in-process backoff stops: its attempt is recorded
    if (this.active === 0) return undefined;
    return this.settleActive(completed);
  }

  private async settleActive(completed: boolean): Promise<void> {
    const haltedAt = this.halted;
    if (!completed) {
      await this.inFlightEnded(this.host.abortGraceMs);
      if (this.halted !== haltedAt) return;
    }
    if (this.liveAttempts > 0) this.runAbort.abort(this.endedWhileRunning(completed));
    // Halted (the engine failed the run), nothing more is handed over: as a canceled run
    // does, it waits for its aborted attempts and their records at most twice abortGraceMs,
    // not for work of other kinds that may never end (a schema's validation of an event).
    await this.inFlightEnded(haltedAt === undefined ? undefined : this.host.abortGraceMs * 2);
  }

  /** Why an attempt still running when its run ended was stopped (its recorded error). */
  private endedWhileRunning(completed: boolean): Error {
    return new Error(
      `Run "${this.host.runId}" ${completed ? "completed" : "failed"} while this step ran`,
    );
  }

  /** One piece of work in flight (an attempt, a write, a store read, a backoff, a restore)
   *  has ended. */
  private workEnded(): void {
    this.active--;
    if (this.active === 0 && this.idleWaiters !== undefined) this.lookIdleSoon();
  }

  /** Looks whether the work in flight has ended once the microtasks that the end set off
   *  have run: an attempt's end starts, in them, the write that records it. */
  private lookIdleSoon(): void {
    if (this.idleLookScheduled) return;
    this.idleLookScheduled = true;
    // A nextTick queued from a microtask runs once the microtask queue is empty (delivery.ts
    // observes the end of a cascade the same way).
    queueMicrotask(() =>
      process.nextTick(() => {
        this.idleLookScheduled = false;
        this.lookIdle();
      }),
    );
  }

  private lookIdle(): void {
    if (this.idleWaiters === undefined) return;
    for (const w of [...this.idleWaiters]) w();
  }

  /** Resolves once no work is in flight (attempts, writes, store reads, backoffs), once
   *  `ms` (real time) have passed, or once the execution halts (or, halted, never again
   *  otherwise: halt never changes its outcome). No polling; no timer left behind. */
  private inFlightEnded(ms?: number): Promise<void> {
    const haltedAt = this.halted;
    return outsideWorkflow(
      () =>
        new Promise<void>((resolve) => {
          if (this.active === 0) {
            resolve();
            return;
          }
          let cancelTimer: (() => void) | undefined;
          this.idleWaiters ??= new Set();
          const waiters = this.idleWaiters;
          const end = () => {
            waiters.delete(waiter);
            if (waiters.size === 0 && this.idleWaiters === waiters) this.idleWaiters = undefined;
            cancelTimer?.();
            resolve();
          };
          const waiter = () => {
            if (this.active === 0 || this.halted !== haltedAt) end();
          };
          waiters.add(waiter);
          if (ms !== undefined) cancelTimer = setLongTimeout(end, ms, { unref: true });
        }),
    );
  }

  /** A recorded call this execution never made again, once the branches the function left
   *  running had their chance: while work of the workflow's own is pending (a branch that
   *  joined it may still make the call), and for a call the first run made late, up to
   *  replayStallMs (like any late call, see watchStall). */
  private async unreplayedAtEnd(): Promise<MissingCall | undefined> {
    const since = performance.now();
    for (;;) {
      const missing = this.notReplayed() ?? this.begunNotCalledAgain();
      if (missing === undefined || this.halted) return missing;
      const left = this.host.replayStallMs - (performance.now() - since);
      const busyMs = this.lateWork.busyForMs(LATE_WORK_GRACE_MS);
      if (left <= 0 || (busyMs === 0 && !missing.issuedLate)) return missing;
      await outsideWorkflow(() => realDelay(Math.min(left, busyMs > 0 ? busyMs : 50)));
    }
  }

  private notReplayed(): StepRecord | undefined {
    for (const rec of this.journal.outcomes.values()) {
      if (this.consumed?.has(rec.key)) continue;
      // Free and from a history a resume replaced (or a fork's copy of such a record:
      // issuedAfter null, with a place in the order): the current history need not call it.
      if (this.journal.isFree(rec.key) && (rec.issuedAfter !== null || rec.delivery !== null)) {
        continue;
      }
      return rec;
    }
    return undefined;
  }

  /** A call an earlier execution began durably (its intent: a child started, an effect about
   *  to perform) and never finished, which this one did not make again: the function that
   *  returned without it would end the run as if nothing had begun there (a child left
   *  running, an effect maybe performed). A wait or sleep begun did nothing outside the run:
   *  code that no longer makes it is judged by its recorded calls only, as before. An intent
   *  holds no window: the replay judges it once the workflow's own work is over, or, for a
   *  call the first run made late (after I/O of its own: a branch's fetch may outlast the
   *  function), up to replayStallMs, as a late record's call (unreplayedAtEnd). */
  private begunNotCalledAgain(): MissingCall | undefined {
    for (const intent of this.journal.intents.values()) {
      if (intent.kind !== "effect" && intent.kind !== "child") continue;
      const key = intent.key;
      if (this.journal.outcomes.has(key) || this.begunCalledAgain?.has(key)) continue;
      if (this.journal.isFree(key)) continue;
      const issuedLate = intentIssuedLate(intent);
      return { kind: intent.kind, name: intent.name, key, issuedLate, begun: true };
    }
    return undefined;
  }

  fail(error: Error): void {
    this.halt({ kind: "failed", error, failedKeys: [] });
  }

  halt(o: Outcome): void {
    if (this.halted) {
      // The engine failed the run and it is settling its attempts in flight (their grace):
      // a cancel, a lost lease, a store failure or the engine's close stops them at once,
      // as it stops those of any execution. The run still ends as failed.
      if (this.halted.kind === "failed" && this.liveAttempts > 0) {
        const reason = this.stopReason(o);
        if (reason !== undefined) this.runAbort.abort(reason);
      }
      return;
    }
    this.halted = o;
    this.lookIdle(); // a settle under way stops waiting (settleInFlight)
    this.delivery.halt();
    this.held.wakeWaiters();
    this.stopLateWork();
    this.stallTimer?.();
    this.held.stop();
    if (this.lateRecheck) clearTimeout(this.lateRecheck);
    if (this.blocked !== undefined) {
      for (const b of this.blocked) b.timer?.abort();
      this.blocked.clear();
    }
    const reason = this.stopReason(o);
    if (reason !== undefined) this.runAbort.abort(reason);
    if (o.kind === "canceled" && (this.liveAttempts > 0 || this.childStartsInFlight > 0)) {
      // Attempts in flight record what they spent before the run is released as canceled.
      void this.inFlightEnded(this.host.abortGraceMs * 2)
        .then(() => this.childStartsLanded())
        .then(() => this.resolveDone(o));
      return;
    }
    if (o.kind === "failed" && this.active > 0) {
      // The engine failed the run (a divergence, lib/fail-run.ts, a refused write) while
      // other branches had work in flight: it settles as a function that throws does, but
      // halted, so nothing more is handed over and only their spend is written.
      void outsideWorkflow(() => this.settleInFlight(false) ?? Promise.resolve())
        .then(() => this.childStartsLanded())
        .then(() => this.resolveDone(o));
      return;
    }
    this.resolveDone(o);
  }

  /** Once every child run being created has been (or failed to be). */
  async childStartsLanded(): Promise<void> {
    while (this.childStartSet !== undefined && this.childStartSet.size > 0) {
      await Promise.all([...this.childStartSet]);
    }
  }

  /** Why attempts in flight are aborted when the execution stops so (undefined: they are
   *  not aborted by it). */
  private stopReason(o: Outcome): Error | undefined {
    if (o.kind === "canceled") {
      return new RunCanceledError(`Run "${this.host.runId}" was canceled: ${o.reason}`);
    }
    if (o.kind === "lease-lost") return new LeaseLostError(`Run "${this.host.runId}": lease lost`);
    if (o.kind === "interrupted") return o.error;
    return undefined;
  }

  /** Replay-only mode: the code wants to execute `key`. The frontier is reached once every
   *  recorded outcome has been handed over (other branches may still replay, and diverge);
   *  until then the new call waits, as it would in an execution. */
  private reachFrontier<T>(key: string): Promise<T> {
    this.frontierKey ??= key;
    this.frontierIfReplayed();
    return never();
  }

  private frontierIfReplayed(): void {
    if (this.halted || this.frontierKey === undefined) return;
    if (this.delivery.recordedLeft > 0 || !this.delivery.idle || this.delivery.inCascade) return;
    if (this.afterCascade.length > 0) return;
    this.halt({ kind: "frontier", key: this.frontierKey });
  }
}

/** The ctx method a call made as `method` was made with, as a message names it: a wait's
 *  kind is "wait", and the workflow called ctx.waitForEvent (there is no ctx.wait). */
function calledAs(method: CallMethod): string {
  return method === "wait" ? "waitForEvent" : method;
}

/** `set` with `value` added; made when there is none yet (the Context's lazy sets). */
function withAdded<T>(set: Set<T> | undefined, value: T): Set<T> {
  const s = set ?? new Set<T>();
  s.add(value);
  return s;
}

/** Marks a promise's rejection handled: the failure still goes to whoever awaits it. */
function ignoreRejection(): void {}

/** A step's estimate when it gives none: no amounts (read only). */
const NO_AMOUNTS: Amounts = Object.freeze({});

/** `T` with its parts writable, while one is built. */
type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/** Waits for `p` (which never rejects), at most `ms` of real time (a grace for code to
 *  stop, not workflow time); the timer is cleared when `p` settles first. */
async function settledWithin(p: Promise<unknown>, ms: number): Promise<void> {
  let cancel: (() => void) | undefined;
  await Promise.race([
    p,
    new Promise<void>((resolve) => {
      cancel = setLongTimeout(resolve, ms, { unref: true });
    }),
  ]);
  cancel?.();
}

/** The ctx's methods (WorkflowContext's, and cairn's own layers' symbol-keyed ones). */
type ApiMethods = Pick<
  WorkflowContext,
  | "step"
  | "effect"
  | "sleep"
  | "sleepUntil"
  | "waitForEvent"
  | "child"
  | "workspace"
  | "approval"
  | "now"
  | "random"
  | "uuid"
> & {
  [FAIL_RUN]: (err: Error) => Promise<never>;
  [CALL_IS_LATE]: () => boolean;
  [NEXT_CALL_RECORDED]: (name: string) => boolean;
};

const CONTEXT = Symbol("cairn.context");
const BOUND = Symbol("cairn.boundMethods");

/** The ctx a workflow function is handed: one per execution. Its methods are accessors on
 *  this prototype, each made for its execution (Context.apiMethods) the first time it is
 *  read and kept: `ctx.step === ctx.step`, and `const { step } = ctx` works as with plain
 *  closures. An accessor reads its execution through `this`, as a proxy around the ctx
 *  forwards it (testing/instrument.ts); a method may be replaced by assignment, as before.
 *  Each accessor is also the ctx's own, enumerable property (OWN_ACCESSORS: the prototype's
 *  getters and setters, no closure a run), as the methods of the object literal the ctx was
 *  before: a spread (`{ ...ctx, step: traced }`) or Object.assign copies every method, as
 *  its type says (copying only own properties, it copied runId, workflow and version and no
 *  method, and `wrapped.sleep(...)` was "not a function"). */
class WorkflowApi {
  readonly runId: string;
  readonly workflow: string;
  readonly version: string;
  // cairn/ai numbers a call's streamed executions by (generation, attempt).
  readonly [RUN_GENERATION]: number;
  readonly [CONTEXT]: Context;
  [BOUND]: Partial<ApiMethods>;

  constructor(c: Context) {
    this.runId = c.host.runId;
    this.workflow = c.host.workflow;
    this.version = c.host.version;
    this[RUN_GENERATION] = c.host.generation;
    this[CONTEXT] = c;
    this[BOUND] = {};
    Object.defineProperties(this, OWN_ACCESSORS);
  }

  get signal(): AbortSignal {
    return this[CONTEXT].runSignal;
  }

  get budget(): { limit: Amounts; spent: Amounts } {
    return this[CONTEXT].budgetView;
  }

  get step(): ApiMethods["step"] {
    return method(this, "step");
  }
  set step(f: ApiMethods["step"]) {
    replace(this, "step", f);
  }
  get effect(): ApiMethods["effect"] {
    return method(this, "effect");
  }
  set effect(f: ApiMethods["effect"]) {
    replace(this, "effect", f);
  }
  get sleep(): ApiMethods["sleep"] {
    return method(this, "sleep");
  }
  set sleep(f: ApiMethods["sleep"]) {
    replace(this, "sleep", f);
  }
  get sleepUntil(): ApiMethods["sleepUntil"] {
    return method(this, "sleepUntil");
  }
  set sleepUntil(f: ApiMethods["sleepUntil"]) {
    replace(this, "sleepUntil", f);
  }
  get waitForEvent(): ApiMethods["waitForEvent"] {
    return method(this, "waitForEvent");
  }
  set waitForEvent(f: ApiMethods["waitForEvent"]) {
    replace(this, "waitForEvent", f);
  }
  get child(): ApiMethods["child"] {
    return method(this, "child");
  }
  set child(f: ApiMethods["child"]) {
    replace(this, "child", f);
  }
  get workspace(): ApiMethods["workspace"] {
    return method(this, "workspace");
  }
  set workspace(f: ApiMethods["workspace"]) {
    replace(this, "workspace", f);
  }
  get approval(): ApiMethods["approval"] {
    return method(this, "approval");
  }
  set approval(f: ApiMethods["approval"]) {
    replace(this, "approval", f);
  }
  get now(): ApiMethods["now"] {
    return method(this, "now");
  }
  set now(f: ApiMethods["now"]) {
    replace(this, "now", f);
  }
  get random(): ApiMethods["random"] {
    return method(this, "random");
  }
  set random(f: ApiMethods["random"]) {
    replace(this, "random", f);
  }
  get uuid(): ApiMethods["uuid"] {
    return method(this, "uuid");
  }
  set uuid(f: ApiMethods["uuid"]) {
    replace(this, "uuid", f);
  }
  get [FAIL_RUN](): ApiMethods[typeof FAIL_RUN] {
    return method(this, FAIL_RUN);
  }
  set [FAIL_RUN](f: ApiMethods[typeof FAIL_RUN]) {
    replace(this, FAIL_RUN, f);
  }
  get [CALL_IS_LATE](): ApiMethods[typeof CALL_IS_LATE] {
    return method(this, CALL_IS_LATE);
  }
  set [CALL_IS_LATE](f: ApiMethods[typeof CALL_IS_LATE]) {
    replace(this, CALL_IS_LATE, f);
  }
  get [NEXT_CALL_RECORDED](): ApiMethods[typeof NEXT_CALL_RECORDED] {
    return method(this, NEXT_CALL_RECORDED);
  }
  set [NEXT_CALL_RECORDED](f: ApiMethods[typeof NEXT_CALL_RECORDED]) {
    replace(this, NEXT_CALL_RECORDED, f);
  }
}

/** The prototype's accessors (signal, budget and the methods, cairn's symbol-keyed ones
 *  too), as each ctx's own enumerable properties: shared descriptors, so defining them
 *  makes no function, and every ctx gets the same shape. */
const OWN_ACCESSORS: PropertyDescriptorMap = Object.fromEntries(
  Reflect.ownKeys(WorkflowApi.prototype).flatMap((k) => {
    const d = Object.getOwnPropertyDescriptor(WorkflowApi.prototype, k);
    if (d?.get === undefined) return [];
    return [[k, { get: d.get, set: d.set, enumerable: true, configurable: true }]];
  }),
);

/** The ctx's methods made (or replaced) so far: its own, not a map it inherits. An object
 *  made by Object.create(ctx) reads (and, assigned a method, replaces) through the same
 *  accessors: sharing the ctx's map, `ext.step = traced` replaced ctx.step too, and a
 *  `traced` that calls ctx.step called itself (a stack overflow). A proxy around the ctx
 *  (testing/instrument.ts) answers hasOwn for it, and shares its map. The ctx's own map is
 *  made with it (a frozen ctx could not be given one later: no method could be read). */
function boundOf(api: WorkflowApi): Partial<ApiMethods> {
  if (Object.hasOwn(api, BOUND)) return api[BOUND];
  const bound: Partial<ApiMethods> = {};
  // Defined, not assigned: the ctx's own may be read-only (a frozen ctx).
  Object.defineProperty(api, BOUND, { value: bound, writable: true, configurable: true });
  return bound;
}

/** The ctx's method `k`, made for its execution when first read. */
function method<K extends keyof ApiMethods>(api: WorkflowApi, k: K): ApiMethods[K] {
  const bound = boundOf(api);
  let f = bound[k];
  if (f === undefined) {
    f = Context.apiMethods[k](api[CONTEXT]);
    bound[k] = f;
  }
  return f as ApiMethods[K];
}

/** The ctx's method `k` replaced (an assignment to it, as to a plain property before). */
function replace<K extends keyof ApiMethods>(api: WorkflowApi, k: K, f: ApiMethods[K]): void {
  boundOf(api)[k] = f;
}
