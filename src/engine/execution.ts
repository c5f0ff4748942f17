// One execution of one claimed run: read the journal (one query), replay/execute through a
// Context, then release the run with the outcome — all writes fenced by the claim's epoch.

import { decode, UndecodableError } from "../codec/codec.js";
import { EncryptionKeyMissingError, PayloadKeyError } from "../errors.js";
import type { Clock } from "../lib/clock.js";
import { nextTurn, settlesWithin } from "../lib/timers.js";
import { unreadablePayloadReason } from "../store/encrypted-store.js";
import type {
  Amounts,
  ClaimedRun,
  ErrorRecord,
  EventHead,
  EventHeadsPage,
  EventPayload,
  Journal,
  LoadJournalOptions,
  PendingEvent,
  Release,
  ReleasedRun,
  RunRecord,
  RunStatus,
  RunWrite,
  Store,
} from "../store/store.js";
import type { FoundChild } from "../workflow/child-identity.js";
import { type ChildOutcome, Context, type Outcome } from "../workflow/context.js";
import type { Workflow } from "../workflow/define.js";
import type { RetryPolicy } from "../workflow/retry.js";
import { childOutcome, deletedChild } from "./child-result.js";
import { type Committer, leaseTakenOver } from "./committer.js";
import type { PendingCreate } from "./folded-start.js";
import type { WorkerEventFields } from "./logger.js";
import { eventsIfCanceled, type ReleasedOutcome, releaseOf } from "./release-of.js";
import { ExecutionTrace } from "./tracing.js";

export interface ExecutionDeps {
  store: Store;
  committer: Committer;
  clock: Clock;
  maxPayloadBytes: number;
  maxStepsPerRun: number;
  inProcessRetryMs: number;
  abortGraceMs: number;
  replayStallMs: number;
  /** How long this worker's leases last: a run released while a step body of it still runs
   *  here is held from other workers that long (Release's heldFor). */
  leaseMs?: number;
  startChild(
    parentId: string,
    childId: string,
    wf: Workflow<unknown, unknown>,
    input: unknown,
    inputDigest: string | undefined,
    inputByName?: string,
  ): Promise<FoundChild | undefined>;
  log(message: string, err?: unknown): void;
  /** Reports a lifecycle event of a run this worker executes (logged at info). */
  lifecycle(f: Omit<WorkerEventFields, "workerId">): void;
  /** Parent of default workspace directories (ctx.workspace). */
  workspaceRoot: string;
  /** False once the worker has gone a whole lease without renewing (see Worker). */
  leaseFresh?(): boolean;
  /** A run released canceled: its unfinished children are canceled with it (a child it
   *  started after engine.cancel had canceled the others). */
  cancelChildren?(runId: string, reason: string): Promise<void>;
}

/** Whether an execution holds its run in the store. A claimed run is held from the start;
 *  one begun before its create committed (folded-start.ts) is "unasked" until it needs a
 *  record or ends, "waiting" while that create is answered, then held or not (the create
 *  failed or found the id taken, or the worker closed). `answer` settles once, with whether
 *  it is held: every caller waiting meanwhile, or asking after, takes the same promise. */
type Holding =
  | { kind: "unasked"; create: PendingCreate }
  | { kind: "waiting"; answer: Promise<boolean> }
  | { kind: "held" }
  | { kind: "not-held"; answer: Promise<boolean> };

export class Execution {
  readonly runId: string;
  /** The claim's epoch (of a run begun before its create committed, once it did). */
  epoch: number;
  /** The run as claimed; begun before its create committed (folded-start.ts), the run as
   *  that create will leave it until durable() hands over the claim it made. */
  private claim: ClaimedRun;
  /** Whether this execution holds its run in the store: at once for a claimed run; for one
   *  begun before its create committed, once that create says so (createdDurably). */
  private holding: Holding;
  private ctx: Context | undefined;
  private pendingCancel: string | undefined;
  private abandoned = false;
  /** The store no longer leases the run to this execution by its doing: it released the run,
   *  paused it or handed it back. False when it stopped without writing (lease judged stale,
   *  lost, a store error on the hand-back): the worker then looks after the lease. */
  letGo = false;
  /** Its release (or pause) asked the store to hold the run for a step body (heldFor). */
  heldAtRelease = false;
  /** Its release is on its way to the store: a renewal answered meanwhile may find the run
   *  no longer running (released by this very execution), which is not a lost lease. */
  releasing = false;
  /** Its release (or hand-back, or pause) has begun: close() lets it finish writing. */
  private ending = false;
  /** It ended writing nothing (stopped, or its lease lost): see handBackStopped. */
  private endedUnwritten = false;
  private draining = false;
  private leaseLostReported = false;
  private readonly trace: ExecutionTrace;
  readonly finished: Promise<void>;
  /** The run as this execution's release left it (durable), once it released the run. */
  released: ReleasedRun | undefined;
  /** The Committer's turns when this execution began (see the release's nextTurn). */
  private readonly turnsAtStart: number;

  /** `journal`: the run's journal when the caller knows it without reading (a run this
   *  worker just created claimed has an empty one); otherwise it is loaded. */
  constructor(
    private readonly deps: ExecutionDeps,
    claim: ClaimedRun,
    private readonly wf: Workflow<unknown, unknown>,
    private readonly journal?: Journal,
    /** Begun before its run's create committed (folded-start.ts): nothing is written or
     *  begun before it says the run is this execution's. */
    pending?: PendingCreate,
  ) {
    this.claim = claim;
    this.holding = pending ? { kind: "unasked", create: pending } : { kind: "held" };
    this.runId = claim.run.id;
    this.epoch = claim.run.epoch;
    this.trace = new ExecutionTrace(claim.run, claim.recovered);
    this.turnsAtStart = deps.committer.turns;
    this.finished = this.execute().catch((err) => this.interruptedByStore(err));
  }

  /** loadJournal's options: the events without their payloads when the store reads those
   *  apart (Store.pendingEventHeads and eventPayloads); a wait reads the payload it takes.
   *  None at all when the store reads them by name (Store.pendingEventHeadsNamed): the
   *  Context reads those of the names its calls take, a page at a time (event-reads.ts). */
  private get journalOptions(): LoadJournalOptions | undefined {
    const store = this.deps.store;
    if (!store.pendingEventHeads || !store.eventPayloads) return undefined;
    return store.pendingEventHeadsNamed
      ? { eventPayloads: false, pendingEvents: false }
      : { eventPayloads: false };
  }

  cancel(reason: string): void {
    if (this.ctx) this.ctx.cancel(reason);
    else this.pendingCancel = reason;
  }

  /** Stops executing without writing anything: the lease is gone, or the engine closes
   *  and the grace period is over. */
  stopWithoutWriting(): void {
    this.abandoned = true;
    this.ctx?.stopWithoutWriting();
  }

  /** close(), past its grace, stopped this execution (after stopWithoutWriting) with no
   *  attempt of it in flight (it was reading the store, restoring a workspace): nothing
   *  of it runs here any more, so its run goes back to pending at once rather than stay
   *  leased to a worker that is gone (and be taken for a crash when the lease ends). */
  async handBackStopped(): Promise<void> {
    // A child being created may land after the hand-back: handed back canceled (a cancel
    // asked meanwhile), the run's cascade would miss that child, which then executes for a
    // canceled parent. Such a run stays leased, as one with an attempt in flight does.
    if (this.letGo || this.releasing || this.attemptsInFlight > 0) return;
    // Likewise a body still running past its abort's grace: the same call would begin again.
    if (this.bodiesInFlight > 0) return;
    if (this.childStartsInFlight > 0) return;
    // An execution that ended on close()'s stop (its workflow was awaiting its own I/O or a
    // timer) wrote nothing: its run still goes back (the release is fenced by epoch, so a
    // run whose lease another worker took is left alone). One ending otherwise is releasing.
    if (this.ending && !this.endedUnwritten) return;
    await this.handBackPending();
  }

  /** The run was taken from a crashed worker and this execution has not yet judged which
   *  calls the crash cut (context.ts, crashedInFlight). Handed back to pending, its next
   *  claimer would take it for an ordinary run and charge that crash nothing: a step that
   *  kills its worker, each crash followed by a graceful restart (or a store error), would
   *  run more often than its maxAttempts. Such a run goes back as the crash left it
   *  instead: running, its lease ended (handBackRun). */
  get crashUnjudged(): boolean {
    return this.claim.recovered && (this.ctx?.crashUnjudged ?? true);
  }

  /** Whether lost attempts this execution asked to record, not hearing that they were, are
   *  in the journal all the same: handed back as the crash left it, the run would be
   *  charged that crash twice by its next claimer. undefined: unknown (the journal could
   *  not be read). */
  private async crashChargesLanded(): Promise<boolean | undefined> {
    const asked = this.ctx?.unconfirmedCrashCharges ?? [];
    if (asked.length === 0) return false;
    try {
      const { attempts } = await this.deps.store.loadJournal(
        this.claim.run.id,
        this.journalOptions,
      );
      return asked.every(({ key, attempt }) =>
        attempts.some(
          (a) => a.key === key && a.attempt === attempt && a.error?.code === "WORKER_LOST",
        ),
      );
    } catch {
      return undefined;
    }
  }

  /** The heartbeat learned that another worker holds the run (after stopWithoutWriting). */
  leaseLost(): void {
    if (this.leaseLostReported) return;
    this.leaseLostReported = true;
    this.trace.end("lease-lost");
    this.report("lease-lost");
  }

  /** The engine closes: start nothing new, hand the run back once nothing is in flight. */
  drain(): void {
    this.draining = true;
    this.ctx?.drain();
  }

  /** Events may have arrived for this run (from this process or another): look. */
  refreshEvents(): void {
    this.ctx
      ?.refreshEvents()
      .catch((err) => this.deps.log(`reading events of run "${this.runId}"`, err));
  }

  /** Whether it is writing: a record queued or being written, or its release. */
  get writing(): boolean {
    return this.ending || this.deps.committer.writing(this.runId);
  }

  /** Step attempts of this execution in flight (0 before its Context exists). */
  get attemptsInFlight(): number {
    return this.ctx?.attemptsInFlight ?? 0;
  }

  /** Step bodies (performs, reconciles) of it still running in this process, even past
   *  their abort's grace: while one does, its run must not be executed again here. */
  get bodiesInFlight(): number {
    return this.ctx?.bodiesInFlight ?? 0;
  }

  /** A release while a step body of this execution still runs here (past its abort's
   *  grace): the store holds the run from other workers for a lease, as if this worker still
   *  held it. Resumed by hand (or woken) meanwhile, another worker would claim it at once
   *  and begin the same call beside the body; this worker keeps it from itself (worker.ts). */
  private heldForBodies(): Pick<Release, "heldFor"> {
    const workerId = this.claim.run.leaseOwner;
    if (this.bodiesInFlight === 0 || !workerId || this.deps.leaseMs === undefined) return {};
    this.heldAtRelease = true;
    return { heldFor: { workerId, ms: this.deps.leaseMs } };
  }

  /** Settles once no step body of this execution runs any more. */
  bodiesSettled(): Promise<void> {
    return this.ctx?.bodiesSettled() ?? Promise.resolve();
  }

  /** Child runs it is creating (ctx.child) whose create has not answered: the one write of
   *  a run no epoch fences, so it may land after the run was handed back (close()). */
  get childStartsInFlight(): number {
    return this.ctx?.childStartsInFlight ?? 0;
  }

  /** Settles once every child run it is creating has been created (or failed to be). */
  childStartsLanded(): Promise<void> {
    return this.ctx?.childStartsLanded() ?? Promise.resolve();
  }

  /** A wait of this execution is blocked on an event, which another process may send. */
  get awaitsEvent(): boolean {
    return this.ctx?.awaitsEvent ?? false;
  }

  private async execute(): Promise<void> {
    const run = this.claim.run;
    if (run.cancelRequested) {
      await this.release({ kind: "canceled", reason: run.reason ?? "canceled" });
      return;
    }
    const journal =
      this.journal ?? (await this.deps.store.loadJournal(run.id, this.journalOptions));
    const ctx = new Context(this.contextHost(run), journal);
    this.ctx = ctx;
    if (this.pendingCancel !== undefined) ctx.cancel(this.pendingCancel);
    if (this.abandoned) ctx.stopWithoutWriting();
    if (this.draining) ctx.drain();
    const outcome = await this.trace.within(() =>
      ctx.start(this.wf.fn as never, decodeInput(run.input)),
    );
    await this.release(outcome);
  }

  /** What the Context of this execution is given: the run, the limits, and every write it
   *  makes, fenced by this claim's epoch. */
  private contextHost(run: RunRecord): ContextHost {
    return new Execution.Host(this, run);
  }

  /** The ContextHost of an execution: a class whose methods are on its prototype (an object
   *  literal of a score of closures, with conditional spreads, was made for every run). Each
   *  method reads the execution as the closures did, when called. */
  private static readonly Host = class ExecutionHost implements ContextHost {
    readonly runId: string;
    readonly workflow: string;
    readonly version: string;
    readonly generation: number;
    readonly recovered: boolean;
    readonly budgetLimit: Amounts;
    readonly budgetSpent: Amounts;
    readonly failedCalls: RunRecord["failedCalls"];
    readonly clock: Clock;
    readonly maxPayloadBytes: number;
    readonly maxStepsPerRun: number;
    readonly inProcessRetryMs: number;
    readonly abortGraceMs: number;
    readonly replayStallMs: number;
    readonly retry: Partial<RetryPolicy> | undefined;
    readonly leaseFresh?: () => boolean;
    // Each the prototype's reader, or undefined where the store or the journal's load does
    // not read events so: fields every host sets, where Object.defineProperty shadowed the
    // prototype's method with undefined (a runtime call, and a map of its own, for each
    // reader a store lacks, every execution; test/execution-host-shape.test.ts).
    readonly eventPayloads: ContextHost["eventPayloads"];
    readonly readEventHeads: ContextHost["readEventHeads"];
    readonly readEventHeadsOfNames: ContextHost["readEventHeadsOfNames"];
    #workspace: WorkspaceHost | undefined;

    constructor(
      private readonly ex: Execution,
      run: RunRecord,
    ) {
      const { deps, wf } = ex;
      this.runId = run.id;
      this.workflow = run.workflow;
      this.version = run.version;
      this.generation = run.generation;
      this.recovered = ex.claim.recovered;
      // A run started by name by a process without this workflow's code stored only the
      // limits it was given: the workflow's defaults fill in the names it did not give,
      // as a start from code would have (there, they are already in the stored limit).
      this.budgetLimit = { ...(wf.options.budget ?? {}), ...run.budgetLimit };
      this.budgetSpent = run.budgetSpent;
      this.failedCalls = run.failedCalls;
      this.clock = deps.clock;
      this.maxPayloadBytes = deps.maxPayloadBytes;
      this.maxStepsPerRun = deps.maxStepsPerRun;
      this.inProcessRetryMs = deps.inProcessRetryMs;
      this.abortGraceMs = deps.abortGraceMs;
      this.replayStallMs = deps.replayStallMs;
      this.retry = wf.options.retry as Partial<RetryPolicy> | undefined;
      if (deps.leaseFresh) this.leaseFresh = deps.leaseFresh;
      const { store } = deps;
      const options = ex.journalOptions;
      const byName = options?.pendingEvents === false;
      // Absent unless the store reads events' payloads apart (see readPayloads).
      this.eventPayloads = options && store.eventPayloads ? this.readPayloads : undefined;
      // Absent unless the journal was loaded without pending events, to be read by name.
      this.readEventHeads = byName ? this.readHeadsNamed : undefined;
      this.readEventHeadsOfNames =
        byName && store.pendingEventHeadsOfNames ? this.readHeadsOfNames : undefined;
    }

    // this.ex.epoch is the claim's, or (begun before its create) the create's once it is held.
    commitThen(
      w: Parameters<NonNullable<ContextHost["commitThen"]>>[0],
      written: () => void,
      failed: (err: unknown) => void,
    ): void {
      const ex = this.ex;
      const runId = this.runId;
      const committer = ex.deps.committer;
      if (ex.holding.kind === "held") {
        committer.writeThen(fenced(w, runId, ex.epoch), written, failed);
        return;
      }
      ex.createdDurably().then((held) => {
        if (!held) failed(leaseTakenOver(runId, ex.epoch));
        else committer.writeThen(fenced(w, runId, ex.epoch), written, failed);
      }, failed);
    }

    commit(w: Parameters<ContextHost["commit"]>[0]): Promise<void> {
      return new Promise<void>((resolve, reject) => this.commitThen(w, resolve, reject));
    }

    created(): true | Promise<boolean> {
      return this.ex.holding.kind === "held" || this.ex.createdDurably();
    }

    startChild(
      childId: string,
      wf: Workflow<unknown, unknown>,
      input: unknown,
      inputDigest: string | undefined,
      inputByName?: string,
    ): Promise<FoundChild | undefined> {
      return this.ex.deps.startChild(this.runId, childId, wf, input, inputDigest, inputByName);
    }

    childOutcome(childId: string): Promise<ChildOutcome | undefined> {
      const { store, maxPayloadBytes } = this.ex.deps;
      return childOutcome(store, childId, this.runId, maxPayloadBytes);
    }

    deletedChild(childId: string): Promise<ErrorRecord | undefined> {
      return deletedChild(this.ex.deps.store, childId, this.runId);
    }

    loadEvents(settled?: boolean): Promise<PendingEvent[]> {
      const store = this.ex.deps.store;
      const options = settled ? { settled: true } : undefined;
      // Without payloads when the store can read them later (Store.eventPayloads): a wait
      // reads the payload of the event it takes, not of every event the run was sent.
      if (this.ex.journalOptions && store.pendingEventHeads) {
        return store.pendingEventHeads(this.runId, options);
      }
      return store.pendingEvents(this.runId, options);
    }

    /** eventPayloads, where the host gives it. */
    readPayloads(seqs: readonly number[]): Promise<EventPayload[]> {
      return this.ex.deps.store.eventPayloads!(this.runId, seqs);
    }

    /** readEventHeads, where the host gives it. */
    readHeadsNamed(page: EventHeadsPage, settled: boolean): Promise<EventHead[]> {
      const options = settled ? { settled: true } : undefined;
      return this.ex.deps.store.pendingEventHeadsNamed!(this.runId, page, options);
    }

    /** readEventHeadsOfNames, where the host gives it. */
    readHeadsOfNames(pages: readonly EventHeadsPage[], settled: boolean): Promise<EventHead[]> {
      const options = settled ? { settled: true } : undefined;
      return this.ex.deps.store.pendingEventHeadsOfNames!(this.runId, pages, options);
    }

    storeNow(): Promise<number> {
      return this.ex.deps.store.now();
    }

    log(message: string, err?: unknown): void {
      this.ex.deps.log(message, err);
    }

    traceAttempt(a: Parameters<NonNullable<ContextHost["traceAttempt"]>>[0]) {
      return this.ex.trace.attempt(a);
    }

    /** Made when a workspace is first opened (most runs open none). */
    get workspace(): WorkspaceHost {
      this.#workspace ??= this.workspaceHost();
      return this.#workspace;
    }

    private workspaceHost(): WorkspaceHost {
      const ex = this.ex;
      const { store } = ex.deps;
      const runId = this.runId;
      return {
        root: ex.deps.workspaceRoot,
        missing: (hashes) => store.missingWorkspaceObjects(hashes),
        put: async (objects, refs) => {
          const res = await store.putWorkspaceObjects({ runId, epoch: ex.epoch, objects, refs });
          if (res.ok) return { missing: [] };
          if (res.reason === "missing") return { missing: res.hashes };
          throw leaseTakenOver(runId, ex.epoch);
        },
        get: (hashes) => store.getWorkspaceObjects(hashes),
        log: (message) => ex.deps.log(message),
      };
    }

    async requestApproval(
      p: Parameters<NonNullable<ContextHost["requestApproval"]>>[0],
    ): Promise<{ deadline: number | null } | undefined> {
      const ex = this.ex;
      const res = await ex.deps.store.requestApproval({ ...p, runId: this.runId, epoch: ex.epoch });
      if (!res.ok) throw leaseTakenOver(this.runId, ex.epoch);
      return { deadline: res.approval.deadline };
    }
  };

  /** The store failed under this execution (connection lost, disk full): hand the run back
   *  so it resumes from its journal. A store problem never fails a run. A payload no worker
   *  can read as it is (a missing key, text it cannot decode) pauses it instead. */
  private async interruptedByStore(err: unknown): Promise<void> {
    // Begun before its run's create was answered (folded-start.ts), it may be thrown out of
    // before it asked for it: its hand-back or pause is fenced by the create's epoch, as a
    // release is (release()). With the placeholder epoch 0 it was refused, and the run was
    // created leased to this worker, executed by nothing, while the log said it would
    // resume. Not held (the create failed or found the id taken): nothing is written.
    if (this.holding.kind !== "held" && !(await this.createdDurably())) {
      this.endedUnwritten = true;
      this.trace.end("abandoned");
      return;
    }
    // A step body of it may still run here (its abort has its grace): handed back now, the
    // run would be claimed again at once (by this worker too) and the same call begun
    // beside it, a side effect performed twice at the same time. The hand-back waits for
    // the bodies, as long as an aborted attempt is waited for; one still running then
    // keeps the run leased to this worker, which hands it back once that body has ended
    // and the lease has run out (worker.ts, orphan-runs.ts).
    if (this.bodiesInFlight > 0) {
      await settlesWithin(this.bodiesSettled(), this.deps.abortGraceMs);
      if (this.bodiesInFlight > 0) {
        this.deps.log(
          `run "${this.runId}": interrupted by a store error while a step body of it still runs here; the run stays leased to this worker until that body has ended`,
          err,
        );
        this.trace.end("interrupted", errorFields(err));
        this.endedUnwritten = true;
        return;
      }
    }
    const reason = stuckReason(this.runId, err);
    if (reason !== undefined) {
      // Handing it back would have it claimed again at once, and fail again: pause it.
      this.deps.log(reason);
      if (this.abandoned) return;
      // Its pause is a release: close() lets it land (writing) rather than hand the run
      // back under it, and a renewal answered meanwhile is no lost lease.
      this.ending = true;
      this.releasing = true;
      // Taken from a crashed worker whose crash no replay has charged: the pause keeps that
      // crash (the store marks the run), or resumed it would be claimed as an ordinary run.
      // Not when charges were asked and the journal cannot tell whether they landed (it may
      // hold the very value no worker can read): marked, a charge that landed would be made
      // twice, failing a run that never ran out of attempts; missing one is the lesser harm.
      const crashUnjudged = this.crashUnjudged && (await this.crashChargesLanded()) === false;
      await this.deps.store
        .releaseRun({
          runId: this.runId,
          epoch: this.epoch,
          status: "paused",
          reason,
          readyAt: null,
          ...(crashUnjudged && { crashUnjudged }),
          ...eventsIfCanceled(this.claim.run),
          ...this.heldForBodies(),
        })
        .then((res) => {
          this.letGo = res.ok;
        })
        .catch((e) => this.deps.log(`run "${this.runId}": could not pause`, e));
      return;
    }
    this.deps.log(`run "${this.runId}": interrupted by a store error; it will resume`, err);
    this.trace.end("interrupted", errorFields(err));
    if (this.abandoned) return;
    await this.handBackPending();
  }

  /** Hands the run back (releasing: close() lets it land), and says so: to pending, or,
   *  with a crash still to charge, as that crash left it (crashUnjudged). */
  private async handBackPending(): Promise<void> {
    this.releasing = true;
    const back = await handBackRun(this.deps.store, this.claim.run, {
      // Unknown (the store fails): taken as not landed (the hand-back itself needs the store;
      // failing, the lease runs out and the run is taken over as recovered anyway).
      crashUnjudged: this.crashUnjudged && (await this.crashChargesLanded()) !== true,
    });
    if (back === undefined) return;
    this.letGo = true;
    if (endedCanceled(back)) await this.cancelChildren(back);
    const { event, ...more } = handBackLine(back);
    this.report(event, more);
  }

  /** A run released canceled: its unfinished children are canceled with it (a child it
   *  started after engine.cancel, or any, when it was executing then). */
  private async cancelChildren(run: ReleasedRun): Promise<void> {
    await this.deps.cancelChildren?.(run.id, run.reason ?? "").catch((err: unknown) => {
      this.deps.log(`run "${this.runId}": canceling its children failed`, err);
    });
  }

  /** One lifecycle line for this run. */
  private report(
    event: WorkerEventFields["event"],
    more: Partial<Omit<WorkerEventFields, "workerId" | "event">> = {},
  ): void {
    const run = this.claim.run;
    this.deps.lifecycle({
      event,
      runId: run.id,
      workflow: run.workflow,
      version: run.version,
      epoch: run.epoch,
      ...more,
    });
  }

  /** Ends the execution as `outcome` says: releases the run with its new status, hands it
   *  back, or (lease lost, abandoned) writes nothing. */
  private async release(outcome: Outcome): Promise<void> {
    this.ending = true;
    // "frontier" only happens in replay-only mode (the replay check), never here.
    // Abandoned (stopWithoutWriting): by a heartbeat that learned the lease is gone, which
    // reports that itself, or by close() past its grace, when the run is still this
    // worker's: a "lease-lost" line ("another worker has it") would be false.
    if (outcome.kind === "lease-lost" && !this.abandoned) this.leaseLost();
    if (outcome.kind === "lease-lost" || outcome.kind === "frontier" || this.abandoned) {
      this.endedUnwritten = true;
      this.trace.end(this.abandoned ? "abandoned" : outcome.kind);
      return;
    }
    if (this.holding.kind === "unasked") {
      // Begun before its run's create was asked, and ended needing no record: the release
      // goes into the create's transaction (folded-start.ts).
      const end = RELEASED_KINDS.has(outcome.kind)
        ? releaseOf(this.claim.run, outcome as ReleasedOutcome, this.deps.maxPayloadBytes)
        : undefined;
      const folded = end && this.holding.create.fold(end);
      if (end && folded !== undefined) {
        await this.releasedWithCreate(folded, end);
        return;
      }
    }
    if (this.holding.kind !== "held" && !(await this.createdDurably())) {
      this.endedUnwritten = true;
      this.trace.end("abandoned");
      return;
    }
    if (outcome.kind === "interrupted") {
      await this.interruptedByStore(outcome.error);
      return;
    }
    if (outcome.kind === "handed-back") {
      await this.handBackOnClose();
      return;
    }
    // Records the context queued without awaiting (ctx.now/random/uuid) land first.
    await this.deps.committer.drain();
    // SQLite answers synchronously, so a run that wrote nothing through the committer (no
    // step) lives entirely in microtasks; runs started and awaited back to back would then
    // never let the event loop turn: no heartbeat, no timer, and no cascade tick of a
    // finished run would run, each holding that run's memory (a leak of ~18 KB a run).
    // A run whose writes the Committer flushed in a turn of its own since the execution
    // began (every step's record) has let the loop turn: a second turn, a setImmediate
    // and its promise, bought nothing.
    if (this.deps.committer.turns === this.turnsAtStart) await nextTurn();
    const release = {
      ...releaseOf(this.claim.run, outcome, this.deps.maxPayloadBytes),
      ...this.heldForBodies(),
    };
    this.releasing = true;
    const res = await this.deps.store.releaseRun(release);
    if (!res.ok) {
      this.deps.log(`run "${this.runId}": lease lost before release; another worker has it`);
      this.leaseLost();
      return;
    }
    this.letGo = true;
    this.released = res.run;
    this.reportRelease(res.run.status, release);
    this.trace.end(res.run.status, res.run.status === "failed" ? release.error : null);
    if (res.run.status === "canceled") await this.cancelChildren(res.run);
  }

  /** Whether this execution holds its run: at once for a claimed run; for one begun before
   *  its create committed, once that create is answered (and it asks for it now: the run
   *  needs a record, or a call is about to begin). Not held (the create failed or found the
   *  id taken, or the worker closed meanwhile), it stops, writing nothing. */
  private createdDurably(): Promise<boolean> {
    const h = this.holding;
    if (h.kind === "held") return Promise.resolve(true);
    if (h.kind !== "unasked") return h.answer;
    const answer = h.create.durable().then((claim) => {
      if (!claim) {
        this.stopWithoutWriting();
        this.holding = { kind: "not-held", answer };
        return false;
      }
      this.claim = claim;
      this.epoch = claim.run.epoch;
      this.holding = { kind: "held" };
      return true;
    });
    this.holding = { kind: "waiting", answer };
    return answer;
  }

  /** Its run was created and released in one transaction (folded-start.ts). Not async: one
   *  promise on the create's answer (each hop goes through the promise hooks, per run). */
  private releasedWithCreate(
    folded: Promise<{ run: RunRecord; created: boolean }>,
    release: Release,
  ): Promise<void> {
    this.releasing = true;
    return folded.then(
      (made) => this.createdReleased(made, release),
      (err: unknown) => {
        // start() fails with the store's error; nothing of the run was written.
        this.endedUnwritten = true;
        this.trace.end("interrupted", errorFields(err));
      },
    );
  }

  private createdReleased(made: { run: RunRecord; created: boolean }, release: Release): void {
    if (!made.created) {
      this.endedUnwritten = true;
      this.trace.end("abandoned");
      return;
    }
    this.claim = { run: made.run, recovered: false };
    this.epoch = made.run.epoch;
    this.letGo = true;
    this.released = made.run;
    // The release the create's transaction wrote (its output encoded once): what it reports
    // (status, error, reason, wake) does not depend on the epoch the create gave the run.
    this.reportRelease(made.run.status, release);
    this.trace.end(made.run.status, made.run.status === "failed" ? release.error : null);
  }

  /** The engine closes and nothing is in flight: the ctx.now/random/uuid records land
   *  first, then the run goes back to pending. */
  private async handBackOnClose(): Promise<void> {
    await this.deps.committer.drain();
    await this.handBackPending();
    this.trace.end("handed-back");
  }

  /** The lifecycle line of a release, by the status the run ended in (a release may have
   *  become canceled by a cancel that came meanwhile). */
  private reportRelease(status: RunStatus, release: Release): void {
    switch (status) {
      case "completed":
      case "canceled":
        this.report(status);
        return;
      case "failed": {
        const e = release.error;
        this.report("failed", {
          ...(e && { error: { name: e.name, ...(e.code !== undefined && { code: e.code }) } }),
        });
        return;
      }
      case "paused":
        this.report("paused", release.reason ? { reason: release.reason } : {});
        return;
      default:
        this.report("released", {
          status,
          ...(release.wakeAt != null && { wakeAt: new Date(release.wakeAt).toISOString() }),
          ...(release.waitingFor?.length ? { waitingFor: release.waitingFor } : {}),
        });
    }
  }
}

/** The outcomes released to a status of their own (release-of.ts). */
const RELEASED_KINDS = new Set<Outcome["kind"]>([
  "completed",
  "failed",
  "canceled",
  "paused",
  "suspended",
]);

/** Whether a run handed back still has a crash to charge: yes, no, or "if-recovered" (a run
 *  leased by a claim whose answer was lost: whether that claim took it from a crashed worker
 *  is the store's to say). */
export type CrashUnjudged = boolean | "if-recovered";

/** What a Context is constructed with (context.ts). */
type ContextHost = ConstructorParameters<typeof Context>[0];
type WorkspaceHost = NonNullable<ContextHost["workspace"]>;

/** The PayloadKeyError an error is or was caused by. */
export function payloadKeyError(err: unknown): PayloadKeyError | undefined {
  for (let e = err, depth = 0; e && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    if (e instanceof PayloadKeyError) return e;
  }
  return undefined;
}

/** What a trace says of a store error that interrupted an execution. */
function errorFields(err: unknown): { name: string; code: string | undefined; message: string } {
  return {
    name: (err as Error)?.name ?? "Error",
    code: (err as { code?: string })?.code,
    message: "",
  };
}

/** The run's input; text the codec cannot read says it is the input. */
function decodeInput(text: string): unknown {
  try {
    return decode(text);
  } catch (err) {
    if (!(err instanceof UndecodableError)) throw err;
    throw new UndecodableError(`its input ${err.message}`, { cause: err });
  }
}

/** Why no worker can go on with the run until someone acts: a stored payload it cannot
 *  decrypt (the key) or decode (damaged, or written by a cairn that knows more types). */
function stuckReason(runId: string, err: unknown): string | undefined {
  const keyError = payloadKeyError(err);
  if (keyError) return unreadablePayloadReason(runId, keyError);
  // Every worker without the keys would be refused the same: handed back, the run would be
  // claimed again at once. Paused, it waits for a keyed worker to be told to resume it.
  if (err instanceof EncryptionKeyMissingError) {
    return `run "${runId}": this worker writes without encryption keys to the store ${JSON.stringify(err.store)}, which is marked encrypted, so ${err.what} was refused (nothing was written); give the worker the keys and resume the run`;
  }
  if (!(err instanceof UndecodableError)) return undefined;
  const what = err.message.startsWith("cannot") ? `a stored value ${err.message}` : err.message;
  return `run "${runId}": ${what}; it was damaged or written by another version of cairn: repair it and resume the run, or cancel it`;
}

/** What handBackRun left: the run as released (to pending, or canceled), or its lease
 *  ended with the run still running. */
export type HandedBack = ReleasedRun | "lease-ended";

/** Whether a hand-back ended the run canceled (a cancel was asked while it was held): its
 *  unfinished children are to be canceled with it. */
export function endedCanceled(back: HandedBack): back is ReleasedRun {
  return back !== "lease-ended" && back.status === "canceled";
}

/** The lifecycle line of a hand-back (event and status): released to pending, or running
 *  with its lease ended; "canceled" when a cancel asked meanwhile ended the run, which a
 *  "released" line would misreport. */
export function handBackLine(back: HandedBack): Pick<WorkerEventFields, "event" | "status"> {
  if (endedCanceled(back)) return { event: "canceled" };
  return { event: "released", status: back === "lease-ended" ? "running" : "pending" };
}

/** Releases a claimed run to pending, ready now, fenced by `epoch`: another worker (or this
 *  one) resumes it from its journal. If even that fails, the lease runs out instead.
 *  Returns the run as released (canceled if a cancel was requested), if it was.
 *  `crashUnjudged`: the run was taken from a crashed worker whose crash no replay has
 *  charged yet: only its lease ends ("lease-ended"), it stays running, and its next
 *  claimer takes it over as recovered and charges that crash (a cancel asked meanwhile
 *  is carried out by that claimer). Released to pending, the crash was lost: a step that
 *  kills its worker ran more often than its maxAttempts. Not a run with a cancel asked
 *  (expireLease refuses it): whoever takes it ends it canceled without replaying it, so no
 *  crash is charged anyway, and released now it ends canceled at once (left running, with
 *  no other worker, its cancel waited for the next worker to come). "if-recovered": this
 *  worker does not know (its claim's answer was lost), the store does. */
export async function handBackRun(
  store: Store,
  run: Pick<RunRecord, "id" | "epoch" | "parentId">,
  { crashUnjudged = false }: { crashUnjudged?: CrashUnjudged } = {},
): Promise<HandedBack | undefined> {
  try {
    if (crashUnjudged !== false) {
      const ended = await store.expireLease({
        runId: run.id,
        epoch: run.epoch,
        ...(crashUnjudged === "if-recovered" && { onlyIfRecovered: true }),
      });
      if (ended.ok) return "lease-ended";
      // Not ended: the run is another worker's now (the release below is refused too), or
      // a cancel was asked for it (the store looks): released, it ends canceled at once.
    }
    const res = await store.releaseRun({
      runId: run.id,
      epoch: run.epoch,
      status: "pending",
      readyAt: await store.now(),
      reason: null,
      ...eventsIfCanceled(run),
    });
    return res.ok ? res.run : undefined;
  } catch {
    return undefined;
  }
}

/** A Context's write as the store takes it: of run `runId`, fenced by `epoch`. Not
 *  `{ ...w, runId, epoch }`: that object spread, of writes of several shapes, took V8's slow
 *  path, ~10,000 instructions a write under callgrind (one write a step), where this takes
 *  a few hundred (issue 13). */
function fenced(w: Omit<RunWrite, "runId" | "epoch">, runId: string, epoch: number): RunWrite {
  const write: RunWrite = { runId, epoch };
  if (w.steps !== undefined) write.steps = w.steps;
  if (w.attempts !== undefined) write.attempts = w.attempts;
  if (w.intents !== undefined) write.intents = w.intents;
  if (w.consume !== undefined) write.consume = w.consume;
  return write;
}
