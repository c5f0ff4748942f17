// The claim loop: claims runnable runs of the registered name@version pairs and executes
// them, each in a slot of its own; and close(), which drains them and hands their runs back.
// Its pieces: the heartbeat that holds the leases (worker-heartbeat.ts), the worker's row and
// its sweeps of the workers table (worker-table.ts), the runs leased here that nothing
// executes (orphan-runs.ts). Polling is the source of truth; store hints and virtual-clock
// jumps only make the next poll come sooner.

import { shiftedClock } from "../lib/clock.js";
import { settlesWithin, timerMs, waitAtMost } from "../lib/timers.js";
import type { ClaimedRun, Journal, ReleasedRun } from "../store/store.js";
import { ChildrenOfCanceledSweep, cancelChildrenOfCanceled } from "./children-of-canceled.js";
import { Execution, handBackRun } from "./execution.js";
import type { Made, PendingCreate } from "./folded-start.js";
import { OrphanRuns } from "./orphan-runs.js";
import { storeClockAhead } from "./store-clock-ahead.js";
import { WorkerHeartbeat } from "./worker-heartbeat.js";
import type { WorkerOptions } from "./worker-options.js";
import { WorkerTable } from "./worker-table.js";

export type { WorkerOptions } from "./worker-options.js";

/** A freshly created run's journal: nothing recorded yet, no event can have arrived. */
function emptyJournal(): Journal {
  return { steps: [], attempts: [], intents: [], events: [] };
}

/** Whether a release ended the run for good: it never executes again (completed,
 *  canceled; a failed or paused run may be resumed). */
function endedForGood(released: ReleasedRun | undefined): boolean {
  return released?.status === "completed" || released?.status === "canceled";
}

export class Worker {
  readonly active = new Map<string, Execution>();
  private pollTimer: NodeJS.Timeout | undefined;
  /** The claim round in flight, if any: close() waits for it. */
  private polling: Promise<void> | undefined;
  /** Releases of runs claimed after close() began. */
  private readonly handingBack = new Set<Promise<void>>();
  /** Work close() stopped waiting for when its bound ended (a claim round, a create claimed
   *  by this worker, a child's create) that hands runs back once it answers: the store
   *  stays open until it has (afterClose). */
  private readonly late: Promise<void>[] = [];
  private pollAgain = false;
  /** A claim round (or a start) found no free slot: the next freed slot asks for a round. */
  private roundSkippedWhileFull = false;
  /** Slots held for runs this engine is creating claimed (createRun with claimBy). */
  private reserved = 0;
  /** close() waiting for the creates that hold those slots to answer. */
  private readonly reservedSettled: Array<() => void> = [];
  private closed = false;
  private readonly heartbeat: WorkerHeartbeat;
  private readonly table: WorkerTable;
  /** Cancels children a cancel's cascade left behind (children-of-canceled.ts). */
  private readonly childSweep: ChildrenOfCanceledSweep;
  /** Runs leased to this worker that nothing here executes: handed back at claim rounds
   *  once their leases expire, and by close(). */
  private readonly orphans: OrphanRuns;
  /** Runs whose execution here ended while a step body of it still ran (past its abort's
   *  grace), until those bodies settle: such a run (also one released failed or paused,
   *  then resumed) is neither executed here nor handed back by this worker meanwhile, or
   *  the same call would run twice at once. */
  private readonly bodiesLeft = new Map<string, Promise<void>>();
  /** Holds (run id to the release's epoch) whose bodies ended once close() had begun: close()
   *  ends them before this worker's row goes (one left to removeWorker stayed a whole lease
   *  whenever a body of another run still ran here). */
  private readonly holdsEndedClosing = new Map<string, number>();
  private unsubscribe: Array<() => void> = [];
  readonly stats = { claimed: 0, executions: 0 };

  constructor(private readonly options: WorkerOptions) {
    this.table = new WorkerTable(options, {
      closed: () => this.closed,
      canceled: (ids) => void cancelChildrenOfCanceled(options, ids),
    });
    this.childSweep = new ChildrenOfCanceledSweep(options, {
      closed: () => this.closed,
      executing: (runId, reason) => this.active.get(runId)?.cancel(reason),
    });
    this.heartbeat = new WorkerHeartbeat(
      options,
      this.active,
      () => {
        this.table.sweepAside();
        this.childSweep.renewed();
      },
      () => this.keptForBodies(),
    );
    this.orphans = new OrphanRuns(options, {
      executing: (runId) => this.active.has(runId),
      bodyRunning: (runId) => this.bodiesLeft.has(runId),
      handedBack: async (runId, canceled) => {
        this.pollAgain = true;
        if (canceled) await cancelChildrenOfCanceled(options, [runId]);
      },
    });
  }

  /** Registers this worker and takes over dead local workers' runs, then starts claiming.
   *  The store calls come first: when one fails (the engine tries again later, see
   *  engine-open.ts), no subscription or timer is left behind to be doubled. */
  async start(): Promise<void> {
    const { store } = this.options;
    const askedAt = this.options.clock.now();
    await this.table.register();
    this.heartbeat.registeredAt(askedAt);
    // The first sweep: dead local workers' runs are claimable before our first claim.
    await this.table.sweep();
    if (this.closed) return;
    // Children a cancel's cascade left behind (its process died): canceled now, then every
    // so many heartbeats.
    this.childSweep.sweepAside();
    this.unsubscribe.push(
      store.subscribe((hint) => {
        if (hint.kind === "runnable") {
          if (hint.runId) this.active.get(hint.runId)?.refreshEvents();
          this.requestClaimRound();
        } else if (hint.kind === "event" && hint.runId) {
          // No claim round: the run is executing (here, or in another process).
          this.active.get(hint.runId)?.refreshEvents();
        } else if (hint.kind === "cancel" && hint.runId && this.active.has(hint.runId)) {
          void this.heartbeat.beat();
        }
      }),
    );
    const onAdvance = this.options.clock.onAdvance?.(() => {
      void this.heartbeat.beat();
      this.requestClaimRound();
    });
    if (onAdvance) this.unsubscribe.push(onAdvance);
    this.heartbeat.startTimer();
    this.requestClaimRound();
  }

  /** The lease renewal round in flight, if any (engine-heartbeat.ts). */
  get heartbeatInFlight(): Promise<void> | undefined {
    return this.heartbeat.inFlight;
  }

  /** Asks for a claim round now (a run was started, an event sent, a slot freed). */
  requestClaimRound(): void {
    if (this.closed) return;
    if (this.polling !== undefined) {
      this.pollAgain = true;
      return;
    }
    this.schedulePoll(0);
  }

  private schedulePoll(delayMs: number): void {
    if (this.closed) return;
    if (this.pollTimer) clearTimeout(this.pollTimer);
    this.pollTimer = setTimeout(() => {
      this.pollTimer = undefined;
      void this.pollOnce();
    }, timerMs(delayMs));
  }

  private pollOnce(): Promise<void> {
    if (this.closed || this.polling !== undefined) return this.polling ?? Promise.resolve();
    this.polling = this.claimRound().finally(() => {
      this.polling = undefined;
      if (this.pollAgain) {
        this.pollAgain = false;
        this.schedulePoll(0);
      } else {
        this.schedulePoll(this.options.pollIntervalMs);
      }
    });
    return this.polling;
  }

  private async claimRound(): Promise<void> {
    // A wait blocked in this process may be answered by an event another process stored
    // (SQLite sends no hint across processes): look at each poll.
    for (const ex of this.active.values()) if (ex.awaitsEvent) ex.refreshEvents();
    await this.orphans.handBack();
    try {
      const free = this.options.concurrency - this.active.size - this.reserved;
      // Full: a run may be ready that this round cannot take; the next freed slot asks again.
      if (free <= 0) this.roundSkippedWhileFull = true;
      if (free > 0) {
        const limit = Math.min(free, 64);
        // Taken before asking: the store set the leases after this moment.
        const askedAt = this.options.clock.now();
        const claims = await this.options.store.claimRuns({
          workerId: this.options.id,
          workflows: [...this.options.workflows.keys()],
          limit,
          leaseMs: this.options.leaseMs,
        });
        for (const c of claims) this.launch(c, askedAt);
        if (claims.length === limit) {
          this.pollAgain = true;
          this.roundSkippedWhileFull = true;
        }
      }
    } catch (err) {
      this.orphans.claimFailed();
      this.options.execution.log("claiming runs failed; retrying at the next poll", err);
    }
  }

  /** Holds a slot for a run about to be created claimed by this worker; false when the
   *  worker is closing or full (then the run is created pending and claimed by a round). */
  reserveSlot(): boolean {
    if (this.closed) return false;
    if (this.active.size + this.reserved >= this.options.concurrency) {
      this.roundSkippedWhileFull = true;
      return false;
    }
    this.reserved++;
    return true;
  }

  /** Gives back a slot reserveSlot() held (the create failed or found the id taken). */
  releaseSlot(): void {
    this.reserved--;
    this.noteSlotSettled();
  }

  private noteSlotSettled(): void {
    if (this.reserved > 0) return;
    for (const resolve of this.reservedSettled.splice(0)) resolve();
  }

  /** Executes a run this worker created claimed, in the slot reserveSlot() held: at once,
   *  with no claim round and no journal read (a fresh run's journal is empty).
   *  `claimedAt`: taken before the create was asked (the store set the lease after it). */
  adoptCreated(claim: ClaimedRun, claimedAt: number): void {
    this.reserved--;
    this.launch(claim, claimedAt, emptyJournal());
    this.noteSlotSettled();
  }

  private launch(claim: ClaimedRun, claimedAt: number, journal?: Journal): void {
    if (this.closed) {
      // Claimed by a round that was in flight when close() began: hand it straight back
      // (one taken from a crashed worker as that crash left it: see handBack).
      const p = this.handBack(claim).finally(() => this.handingBack.delete(p));
      this.handingBack.add(p);
      return;
    }
    const wf = this.options.workflows.get(`${claim.run.workflow}@${claim.run.version}`);
    if (!wf) return; // cannot happen: claims are filtered by our workflows
    if (this.bodiesLeft.has(claim.run.id)) {
      // A step body of an earlier execution of this run still runs here (the run came back
      // through another worker, or a resume): executed now, the same call could begin
      // beside it. The claim is kept unexecuted, as an orphan: handed back as soon as that
      // body has ended, and claimed again (here, or by another worker).
      this.options.execution.log(
        `run "${claim.run.id}": claimed while a step body of an earlier execution still runs here; it is not executed here until that body has ended`,
      );
      this.orphans.add(claim.run.id, claim.run.epoch, claim.recovered);
      return;
    }
    this.stats.claimed++;
    this.options.execution.lifecycle({
      event: claim.recovered ? "recovered" : "claimed",
      runId: claim.run.id,
      workflow: claim.run.workflow,
      version: claim.run.version,
      epoch: claim.run.epoch,
    });
    // The run's timers and ctx.now() read the store's clock (the database's on PostgreSQL),
    // by which the store decides when the run is due: a host clock behind it had a sleeping
    // run claimed over and over before its end; ahead, a sleep lasted longer than asked.
    // Any other clock's reading is the store's time (passed into SQL, there rounded to whole
    // ms: a virtual clock at a fraction of one was taken for a store ahead of it).
    const ahead = this.options.clock.system
      ? storeClockAhead(claim.run, this.options.leaseMs, claimedAt, this.options.clock.now())
      : 0;
    const clock = shiftedClock(this.options.execution.clock, ahead);
    const ex = new Execution(
      { ...this.options.execution, clock, leaseFresh: () => this.heartbeat.leaseFresh(claimedAt) },
      claim,
      wf,
      journal,
    );
    this.track(claim, ex);
  }

  /** Begins executing a run this engine starts before its create (claimed by this worker)
   *  has committed (folded-start.ts), in the slot reserveSlot() held: it is this worker's
   *  once createAnswered says so. Its store's clock is the engine's (createReleasedRun). */
  executeBeforeCreate(
    claim: ClaimedRun,
    pending: PendingCreate,
    claimedAt: number,
  ): Execution | undefined {
    const wf = this.options.workflows.get(`${claim.run.workflow}@${claim.run.version}`);
    if (!wf || this.closed) return undefined;
    return new Execution(
      { ...this.options.execution, leaseFresh: () => this.heartbeat.leaseFresh(claimedAt) },
      claim,
      wf,
      emptyJournal(),
      pending,
    );
  }

  /** The create of a run executeBeforeCreate began was answered (folded-start.ts OnAnswer):
   *  the claim `ex` holds from now on, tracked as any run this worker executes; undefined
   *  when it holds none (the create failed or found the id taken; or it carried the run's
   *  release: `folded`), or this worker is closing (the run is handed back). */
  createAnswered(ex: Execution, made: Made | undefined, folded: boolean): ClaimedRun | undefined {
    this.reserved--;
    try {
      const held =
        made?.created === true &&
        (folded || (made.run.status === "running" && made.run.leaseOwner === this.options.id));
      if (!made || !held) {
        this.slotFreed();
        return undefined;
      }
      const claim: ClaimedRun = { run: made.run, recovered: false };
      if (this.closed && !folded) {
        // As launch() does for a claim answered after close() began.
        const p = this.handBack(claim).finally(() => this.handingBack.delete(p));
        this.handingBack.add(p);
        return undefined;
      }
      this.stats.claimed++;
      this.options.execution.lifecycle({
        event: "claimed",
        runId: made.run.id,
        workflow: made.run.workflow,
        version: made.run.version,
        epoch: made.run.epoch,
      });
      if (!folded) {
        this.track(claim, ex);
        return claim;
      }
      void ex.finished.then(() => {
        this.stats.executions++;
        this.options.ended?.(made.run.id, ex.released);
        this.slotFreed();
      });
      return undefined;
    } finally {
      this.noteSlotSettled();
    }
  }

  /** A slot freed with no execution ending: a round that found the worker full asks again. */
  private slotFreed(): void {
    if (!this.roundSkippedWhileFull) return;
    this.roundSkippedWhileFull = false;
    this.requestClaimRound();
  }

  /** Tracks `ex`, the execution of `claim`, until it ends. */
  private track(claim: ClaimedRun, ex: Execution): void {
    this.active.set(claim.run.id, ex);
    void ex.finished.then(() => {
      if (this.active.get(claim.run.id) === ex) this.active.delete(claim.run.id);
      // A body still running here (past its abort's grace) holds the run, also one
      // released: a run released failed may be resumed by hand and claimed here again,
      // and begin that call beside it. Not a run that ended for good.
      if (ex.bodiesInFlight > 0 && !endedForGood(ex.released)) {
        this.bodyLeftRunning(claim.run.id, ex);
      } else if (ex.bodiesInFlight === 0 && ex.heldAtRelease && ex.letGo) {
        // Released held for a body that ended while the release was written: nothing looks
        // at the hold again (bodyLeftRunning), which kept other workers off for a lease.
        this.bodyEnded(claim.run.id, ex.epoch);
      }
      if (!ex.letGo && !this.closed) this.orphans.add(claim.run.id, ex.epoch, ex.crashUnjudged);
      this.stats.executions++;
      this.options.ended?.(claim.run.id, ex.released);
      // A freed slot matters when a round found us full (or claimed all it could take), or
      // when the run was not released to a status of its own (handed back, lease lost);
      // otherwise hints and polling find new runs, without a claim round per finished run.
      if (this.roundSkippedWhileFull || ex.released === undefined) {
        this.roundSkippedWhileFull = false;
        this.requestClaimRound();
      }
    });
  }

  /** The runs a step body of which still runs here though no execution holds them: their
   *  claims kept unexecuted (leases), and those released held for the body (holds), whose
   *  heartbeat goes on while the body runs (a lease's worth alone let another worker
   *  begin the same call beside a body that ran longer). */
  private keptForBodies(): { leased: Array<{ runId: string; epoch: number }>; held: string[] } {
    const leased = this.orphans.keptFor((runId) => this.bodiesLeft.has(runId));
    const claimed = new Set(leased.map((r) => r.runId));
    const held = [...this.bodiesLeft.keys()].filter(
      (runId) => !this.active.has(runId) && !claimed.has(runId),
    );
    return { leased, held };
  }

  /** `ex` ended with a step body of it still running here: until that body settles its run
   *  is neither executed nor handed back by this worker (bodiesLeft); then a claim round
   *  looks at it again. */
  private bodyLeftRunning(runId: string, ex: Execution): void {
    const settled: Promise<void> = ex.bodiesSettled().then(() => {
      if (this.bodiesLeft.get(runId) !== settled) return;
      this.bodiesLeft.delete(runId);
      // Released held for that body (Release's heldFor): the hold ends now rather than a
      // lease later, so another worker may take the run at once (this one may be full).
      if (ex.letGo) this.bodyEnded(runId, ex.epoch);
      this.requestClaimRound();
    });
    this.bodiesLeft.set(runId, settled);
  }

  /** The bodies a hold at `epoch` was set for have ended: the hold ends now, or, once
   *  close() has begun, by close() before this worker's row goes. */
  private bodyEnded(runId: string, epoch: number): void {
    if (this.closed) this.holdsEndedClosing.set(runId, epoch);
    else void this.endHold(runId, epoch);
  }

  /** Ends, as close() removes this worker's row, the holds whose bodies have ended (and
   *  those whose ending the store failed): removeWorker leaves every hold of this worker
   *  to run out while a body of any run still runs here. Never waits past `boundMs`. */
  private async endHoldsClosing(boundMs: number): Promise<void> {
    const endHolds = [
      ...this.heartbeat.pendingHoldEnds(),
      ...[...this.holdsEndedClosing].map(([runId, epoch]) => ({ runId, epoch })),
    ].filter(({ runId }) => !this.bodiesLeft.has(runId));
    if (endHolds.length === 0) return;
    const ended = this.options.store.renewLeases({
      workerId: this.options.id,
      runs: [],
      leaseMs: this.options.leaseMs,
      endHolds,
    });
    const settled = ended.then(
      () => true,
      (err: unknown) => {
        this.options.execution.log(
          "close(): ending the holds of runs whose step bodies have ended failed; other workers may claim them once the holds run out",
          err,
        );
        return true;
      },
    );
    if (!(await settlesWithin(settled, boundMs))) {
      this.options.execution.log("close(): ending holds timed out; the store hangs");
    }
  }

  /** Ends this worker's hold on `runId` set by the release at `epoch` (none: nothing is
   *  written). After a store error the heartbeat tries again with its next round: left to
   *  run out, the hold kept every other worker off the run for a whole lease. */
  private async endHold(runId: string, epoch: number): Promise<void> {
    try {
      await this.options.store.renewLeases({
        workerId: this.options.id,
        runs: [],
        leaseMs: this.options.leaseMs,
        endHolds: [{ runId, epoch }],
      });
    } catch (err) {
      this.options.execution.log(
        `run "${runId}": could not end its hold now that no step body of it runs here; trying again with the next lease renewal`,
        err,
      );
      this.heartbeat.endHoldLater(runId, epoch);
    }
  }

  /** A run taken from a crashed worker keeps that crash for its next claimer to charge:
   *  its lease ends and it stays running (handBackRun). */
  private async handBack(claim: ClaimedRun): Promise<void> {
    const released = await handBackRun(this.options.store, claim.run, {
      crashUnjudged: claim.recovered,
    });
    if (!released) {
      this.options.execution.log(
        `handing back run "${claim.run.id}" was not done (another worker holds it now, or the store failed: then its lease will expire)`,
      );
    } else if (released !== "lease-ended" && released.status === "canceled") {
      await cancelChildrenOfCanceled(this.options, [claim.run.id]);
    }
  }

  /** The hand-backs of runs claimed or kept leased by work close() stopped waiting for:
   *  settles once they are done (the store must stay open until then); undefined when
   *  close() left no such work. */
  afterClose(): Promise<void> | undefined {
    if (this.late.length === 0) return undefined;
    return Promise.all(this.late).then(() => {});
  }

  private async handedBack(): Promise<void> {
    await Promise.all(this.handingBack);
  }

  /** The stopped executions with no attempt in flight but a child's create, whose runs go
   *  back once those creates answer. Not one with a cancel asked (or that cannot be read
   *  within `boundMs`): handed back, it would be canceled and cancel its children, and its
   *  child, landing just before, could be claimed by another worker in between; it stays
   *  leased, and whoever takes it over releases it canceled without replaying it. */
  private async backOnceChildrenCreated(
    stopped: Execution[],
    boundMs: number,
  ): Promise<Execution[]> {
    const waiting = stopped.filter((ex) => ex.attemptsInFlight === 0 && ex.childStartsInFlight > 0);
    if (waiting.length === 0) return [];
    const read = Promise.all(
      waiting.map((ex) =>
        this.options.store.getRun(ex.runId).then(
          (run) => (run?.cancelRequested === false ? ex : undefined),
          () => undefined,
        ),
      ),
    );
    let found: Array<Execution | undefined> = [];
    if (
      await settlesWithin(
        read.then((r) => (found = r)),
        boundMs,
      )
    ) {
      return found.filter((ex) => ex !== undefined);
    }
    return [];
  }

  async close(graceMs: number): Promise<void> {
    this.closed = true;
    if (this.pollTimer) clearTimeout(this.pollTimer);
    for (const u of this.unsubscribe) u();
    // From now on no new step starts; attempts in flight get the grace period (leases are
    // still renewed meanwhile), then each run is handed back (or suspended, if it waits):
    // no attempt is cut unless it outlasts the grace.
    const running = [...this.active.values()];
    for (const ex of running) ex.drain();
    // A claim round in flight may still commit: wait for it (bounded, but never by less
    // than the store's own grace: closeGraceMs may be 0), so whatever it claimed is handed
    // back before this worker's row goes and the store closes. Otherwise the run stays
    // leased to a worker that is gone, and its next claimer, taking it for a crash, charges
    // its first call a lost attempt.
    const bound = Math.max(graceMs, 2_000);
    if (this.polling !== undefined && !(await settlesWithin(this.polling, bound))) {
      // Still unanswered: as it answers, launch() hands back what it claimed, on a store
      // kept open for that (afterClose).
      const polling = this.polling;
      this.late.push(polling.then(() => this.handedBack()));
    }
    // Likewise a start() whose create (claimed by this worker) is in flight: the run it
    // makes is handed back below, not left leased to a worker that is gone (its next
    // claimer would take it for a crash and charge its first call a lost attempt).
    if (this.reserved > 0) {
      const created = new Promise<void>((resolve) => this.reservedSettled.push(resolve));
      if (!(await settlesWithin(created, bound))) {
        this.late.push(created.then(() => this.handedBack()));
      }
    }
    if (running.length > 0) {
      await waitAtMost(Promise.all(running.map((e) => e.finished)), graceMs);
      // The grace is for attempts in flight. An execution with none left that is writing
      // (a record landing, its release or hand-back) is only finishing what close() asked
      // of it: it gets the store's grace (at least 2 s, closeGraceMs may be 0), or its run
      // stays leased to this worker and the next claimer, taking it for a crash, charges a
      // lost attempt to a call whose body had ended or never began (with maxAttempts 1,
      // failing the run). One that is not writing (a timer, the workflow's own I/O) is not
      // waited for: it would hold close() for the whole bound.
      // A child run being created (ctx.child) is such a write too: it lands on its own.
      const settling = [...this.active.values()].filter(
        (ex) => ex.attemptsInFlight === 0 && (ex.writing || ex.childStartsInFlight > 0),
      );
      if (settling.length > 0) {
        await waitAtMost(Promise.all(settling.map((e) => e.finished)), bound);
      }
    }
    // An attempt that outlasted the grace may still be running in this process: its run
    // stays leased until the lease ends, or another worker would start the same call while
    // it runs. So does a run whose child's create is still unanswered: handed back (and
    // canceled, if a cancel was asked), its cancel cascade could miss a child that lands
    // after. Every other run goes back (below). Read before the executions stop.
    const stopped = [...this.active.values()];
    const bodyRunning = new Set([
      ...stopped
        .filter(
          (ex) => ex.attemptsInFlight > 0 || ex.bodiesInFlight > 0 || ex.childStartsInFlight > 0,
        )
        .map((ex) => ex.runId),
      // Runs whose execution ended with a body of it running on (bodiesLeft).
      ...this.bodiesLeft.keys(),
    ]);
    for (const ex of stopped) ex.stopWithoutWriting();
    for (const ex of stopped.filter((e) => e.attemptsInFlight > 0 || e.bodiesInFlight > 0)) {
      this.options.execution.log(
        `close(): run "${ex.runId}" stays leased to this worker until its lease ends: a step of it still runs here past the grace (closeGraceMs)`,
      );
    }
    // A run kept leased for a child's create alone (no attempt of it runs here) goes back
    // once that create answers: left leased, its next claimer would take it for a crash and
    // charge a lost attempt to a call that never began.
    for (const ex of await this.backOnceChildrenCreated(stopped, bound)) {
      this.late.push(ex.childStartsLanded().then(() => ex.handBackStopped()));
    }
    this.heartbeat.stop();
    // Let a heartbeat in flight finish before the store closes, but never wait on a store
    // that hangs.
    const beating = this.heartbeat.inFlight;
    if (beating !== undefined) await waitAtMost(beating, Math.min(graceMs, 2_000));
    const sweeping = this.table.sweepInFlight;
    if (sweeping !== undefined) await waitAtMost(sweeping, Math.min(graceMs, 2_000));
    const childSweeping = this.childSweep.inFlight;
    if (childSweeping !== undefined) await waitAtMost(childSweeping, Math.min(graceMs, 2_000));
    // Hand-backs of runs a claim round answered with after close() began: a store that stops
    // answering (a partition) held close() here for ever. Past the bound they go on, on a
    // store kept open for them (afterClose).
    const handingBack = this.handedBack();
    if (!(await settlesWithin(handingBack, bound))) this.late.push(handingBack);
    // Records of attempts that finished are durable before any run of ours is claimable:
    // removing the worker row first would let another worker take a run whose record is
    // still queued, fence that write, and execute the step again.
    // Neither may hang close() on a store that hangs (a silent network: pg has no client-side
    // query timeout): a record not written is redone from the journal, a worker row left
    // behind is judged dead by its stale heartbeat.
    if (!(await settlesWithin(this.options.execution.committer.drain(), bound))) {
      this.options.execution.log("close(): queued records not written in time; the store hangs");
      return;
    }
    // Every run held here whose attempt does not still run here goes back now (pending, so
    // its next claimer charges nothing; one taken from a crashed worker whose crash is not
    // yet charged, as that crash left it): only those that do stay leased (below).
    const handedBack = Promise.all([
      ...stopped.filter((ex) => !bodyRunning.has(ex.runId)).map((ex) => ex.handBackStopped()),
      this.orphans.handBack({ expiredOnly: false, keep: bodyRunning }),
    ]);
    if (!(await settlesWithin(handedBack, bound))) {
      this.options.execution.log("close(): handing back runs timed out; the store hangs");
    }
    // A write of the row in flight (a sweep found it gone) lands first, or it would outlive
    // this worker.
    const registering = this.table.registerInFlight;
    if (registering !== undefined && !(await settlesWithin(registering, bound))) {
      this.options.execution.log("close(): writing this worker's row timed out; the store hangs");
    }
    // With no body running here removeWorker ends every hold of this worker itself.
    if (bodyRunning.size > 0) await this.endHoldsClosing(bound);
    const removed = this.options.store.removeWorker(this.options.id, {
      expireLeases: bodyRunning.size === 0,
    });
    if (await settlesWithin(removed, bound))
      await removed; // its error, if any, is close()'s
    else
      this.options.execution.log("close(): removing this worker's row timed out; the store hangs");
  }
}
