// The claim loop: claims runnable runs of the registered name@version pairs, holds their
// leases (heartbeats renew them; a renewal that reports a lost lease stops the execution),
// reports runs whose version no live worker has, and on every heartbeat takes over the runs
// of workers on this host whose process is gone (dead-workers.ts). Polling is the source of
// truth; store hints and virtual-clock jumps only make the next poll come sooner.

import { hostname } from "node:os";
import { type Clock, shiftedClock } from "../lib/clock.js";
import { pidNamespace } from "../lib/process-identity.js";
import { displayText } from "../lib/text.js";
import { settlesWithin, timerMs, waitAtMost } from "../lib/timers.js";
import type { ClaimedRun, Journal, RunRecord, Store } from "../store/store.js";
import type { Workflow } from "../workflow/define.js";
import { isDeadLocalWorker, pidKnownDead, workerLive } from "./dead-workers.js";
import { Execution, type ExecutionDeps, handBackRun, payloadKeyError } from "./execution.js";
import { runsLeasedTo } from "./runs-leased-to.js";

export interface WorkerOptions {
  id: string;
  store: Store;
  clock: Clock;
  workflows: Map<string, Workflow<unknown, unknown>>;
  concurrency: number;
  leaseMs: number;
  heartbeatMs: number;
  pollIntervalMs: number;
  execution: ExecutionDeps;
  /** An execution of `runId` ended; `run` is the run as its release left it, if it
   *  released the run (durably) itself. */
  ended?(runId: string, run: RunRecord | undefined): void;
}

/** A freshly created run's journal: nothing recorded yet, no event can have arrived. */
function emptyJournal(): Journal {
  return { steps: [], attempts: [], intents: [], events: [] };
}

export class Worker {
  readonly active = new Map<string, Execution>();
  private pollTimer: NodeJS.Timeout | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  /** The claim round in flight, if any: close() waits for it. */
  private polling: Promise<void> | undefined;
  /** Releases of runs claimed after close() began. */
  private readonly handingBack = new Set<Promise<void>>();
  /** Work close() stopped waiting for when its bound ended (a claim round, a create claimed
   *  by this worker, a child's create) that hands runs back once it answers: the store
   *  stays open until it has (afterClose). */
  private readonly late: Promise<void>[] = [];
  /** Runs whose execution here ended without letting them go (it stopped without writing: a
   *  lease judged stale, a store error on the hand-back), by the epoch it held. The store may
   *  still lease them to this worker, and claimRuns never gives a worker its own runs: with
   *  no other worker they would sit forever. Once such a lease has expired, as another
   *  worker would take the run over, this worker hands it back (claimRound). */
  private readonly orphans = new Map<string, number>();
  /** A claim failed without an answer: on PostgreSQL it may have committed (its answer
   *  lost, every retry failed), leasing runs to this worker that it never learned of and
   *  that claimRuns will never give it. The next claim round looks for them (orphans). */
  private claimMayHaveLeased = false;
  private pollAgain = false;
  /** A claim round (or a start) found no free slot: the next freed slot asks for a round. */
  private roundSkippedWhileFull = false;
  /** Slots held for runs this engine is creating claimed (createRun with claimBy). */
  private reserved = 0;
  /** close() waiting for the creates that hold those slots to answer. */
  private readonly reservedSettled: Array<() => void> = [];
  private closed = false;
  /** Heartbeats go on through close()'s grace period, so leases outlive it. */
  private heartbeatsStopped = false;
  private lastRenewOk: number;
  /** The heartbeat in flight, if any: close() waits for it before the store closes. */
  private heartbeating: Promise<void> | undefined;
  private heartbeatAgain = false;
  /** The write of this worker's row in flight, if any: close() removes the row after it. */
  private registering: Promise<void> | undefined;
  /** The sweep of the worker table in flight, if any (sweepAside). */
  private sweeping: Promise<void> | undefined;
  private unsubscribe: Array<() => void> = [];
  readonly stats = { claimed: 0, executions: 0 };

  constructor(private readonly options: WorkerOptions) {
    this.lastRenewOk = options.clock.now();
  }

  /** Registers this worker and takes over dead local workers' runs, then starts claiming.
   *  The store calls come first: when one fails (the engine tries again later, see
   *  engine-open.ts), no subscription or timer is left behind to be doubled. */
  async start(): Promise<void> {
    const { store } = this.options;
    const askedAt = this.options.clock.now();
    await this.register();
    // Registering is this worker's first heartbeat (a start tried again may come long after
    // the constructor).
    this.lastRenewOk = askedAt;
    // The first sweep: dead local workers' runs are claimable before our first claim.
    await this.sweepWorkers();
    if (this.closed) return;
    this.unsubscribe.push(
      store.subscribe((hint) => {
        if (hint.kind === "runnable") {
          if (hint.runId) this.active.get(hint.runId)?.refreshEvents();
          this.requestClaimRound();
        } else if (hint.kind === "cancel" && hint.runId && this.active.has(hint.runId)) {
          void this.heartbeat();
        }
      }),
    );
    const onAdvance = this.options.clock.onAdvance?.(() => {
      void this.heartbeat();
      this.requestClaimRound();
    });
    if (onAdvance) this.unsubscribe.push(onAdvance);
    this.heartbeatTimer = setInterval(
      () => void this.heartbeat(),
      timerMs(this.options.heartbeatMs),
    );
    this.heartbeatTimer.unref?.();
    this.requestClaimRound();
  }

  /** Writes this worker's row (an upsert): who it is and what it serves. */
  private register(): Promise<void> {
    const writing = this.options.store.registerWorker({
      id: this.options.id,
      host: hostname(),
      pid: process.pid,
      pidNamespace: pidNamespace(),
      workflows: [...this.options.workflows.keys()],
      leaseMs: this.options.leaseMs,
    });
    this.registering = writing;
    const done = () => {
      if (this.registering === writing) this.registering = undefined;
    };
    writing.then(done, done);
    return writing;
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
    await this.handBackOrphans();
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
      this.claimMayHaveLeased = true;
      this.options.execution.log("claiming runs failed; retrying at the next poll", err);
    }
  }

  /** Hands back each orphan whose lease expired and is still ours (see `orphans`); forgets
   *  those another worker took or that changed since. A store error leaves them for the
   *  next round. */
  private async handBackOrphans({
    expiredOnly = true,
    keep = new Set<string>(),
  }: {
    expiredOnly?: boolean;
    keep?: ReadonlySet<string>;
  } = {}): Promise<void> {
    if (this.claimMayHaveLeased) await this.findUnknownClaims();
    if (this.orphans.size === 0) return;
    const { store, id: workerId } = this.options;
    try {
      const now = await store.now();
      for (const [runId, epoch] of this.orphans) {
        // Never a run executing here (a run created claimed while the claims were looked
        // for), nor one whose attempt close() left running: its lease is this worker's.
        if (this.active.has(runId) || keep.has(runId)) {
          this.orphans.delete(runId);
          continue;
        }
        // One run this process cannot read (a payload under a key it was not given) must
        // not keep the others from being handed back: it is left for the next round.
        const run = await store.getRun(runId).catch((err: unknown) => {
          if (payloadKeyError(err) !== undefined) return null;
          throw err;
        });
        if (run === null) continue;
        const ours =
          run?.status === "running" && run.epoch === epoch && run.leaseOwner === workerId;
        if (!ours) {
          this.orphans.delete(runId);
          continue;
        }
        if (expiredOnly && (run.leaseUntil ?? 0) > now) continue;
        const released = await handBackRun(store, run);
        if (released) {
          if (released.status === "canceled") this.cancelChildrenOf([runId]);
          this.orphans.delete(runId);
          this.pollAgain = true;
          this.options.execution.lifecycle({
            event: "released",
            runId,
            workflow: run.workflow,
            version: run.version,
            epoch,
            status: "pending",
          });
        }
      }
    } catch {
      // The store is away (the claim that follows reports it); the next round tries again.
    }
  }

  /** After a claim that failed (claimMayHaveLeased): the running runs leased to this worker
   *  that it does not execute become orphans, handed back once their leases expire. A
   *  store error leaves the search for the next round. */
  private async findUnknownClaims(): Promise<void> {
    try {
      const leased = await runsLeasedTo(this.options.store, this.options.id);
      for (const [runId, epoch] of leased) {
        if (!this.active.has(runId) && !this.orphans.has(runId)) this.orphans.set(runId, epoch);
      }
      this.claimMayHaveLeased = false;
    } catch {
      // The store is away: the next round looks again.
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
      // Claimed by a round that was in flight when close() began: hand it straight back,
      // unless it was taken from a crashed worker: that crash is for its next claimer to
      // charge (Execution.crashUnjudged), so it stays leased, as the crash left it.
      if (claim.recovered) return;
      const p = this.handBack(claim).finally(() => this.handingBack.delete(p));
      this.handingBack.add(p);
      return;
    }
    const wf = this.options.workflows.get(`${claim.run.workflow}@${claim.run.version}`);
    if (!wf) return; // cannot happen: claims are filtered by our workflows
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
      { ...this.options.execution, clock, leaseFresh: () => this.leaseFresh(claimedAt) },
      claim,
      wf,
      journal,
    );
    this.active.set(claim.run.id, ex);
    void ex.finished.then(() => {
      if (this.active.get(claim.run.id) === ex) this.active.delete(claim.run.id);
      if (!ex.letGo && !this.closed) this.orphans.set(claim.run.id, ex.epoch);
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

  /** Renews the leases of executing runs; stops those whose lease is gone; delivers
   *  cancel requests made in other processes. */
  private async heartbeat(): Promise<void> {
    if (this.heartbeatsStopped) return;
    if (this.heartbeating !== undefined) {
      this.heartbeatAgain = true;
      return this.heartbeating;
    }
    this.heartbeating = (async () => {
      try {
        do {
          this.heartbeatAgain = false;
          await this.heartbeatOnce();
        } while (this.heartbeatAgain && !this.heartbeatsStopped);
      } finally {
        this.heartbeating = undefined;
      }
    })();
    return this.heartbeating;
  }

  /** Whether a lease taken at `claimedAt` may still be this worker's: the claim or the last
   *  renewal round was asked less than a lease ago. A process stopped past its lease
   *  (SIGSTOP, a long pause) finds this false on waking, before its heartbeat learns the
   *  runs were taken. */
  leaseFresh(claimedAt: number): boolean {
    const since = Math.max(claimedAt, this.lastRenewOk);
    return this.options.clock.now() - since < this.options.leaseMs;
  }

  private async heartbeatOnce(): Promise<void> {
    const { store, clock, leaseMs } = this.options;
    const runs = [...this.active.values()].map((e) => ({ runId: e.runId, epoch: e.epoch }));
    // Taken before asking: the store extended the leases after this moment, not when its
    // answer arrived.
    const askedAt = clock.now();
    try {
      if (runs.length > 0) {
        const res = await store.renewLeases({ workerId: this.options.id, runs, leaseMs });
        // Only the execution the renewal was for: while it was in flight the run may have
        // been released and claimed again here, under a new epoch that is not lost.
        const renewed = new Map(runs.map((r) => [r.runId, r.epoch]));
        for (const id of res.lost) {
          const ex = this.active.get(id);
          // An execution releasing the run learns from its release whether it still held it.
          if (ex && ex.epoch === renewed.get(id) && !ex.releasing) {
            ex.stopWithoutWriting();
            ex.leaseLost();
          }
        }
        for (const id of res.cancelRequested) {
          // The reason is only words for the run's end: one this process cannot read (a
          // key it was not given, a store error) must not fail the heartbeat, which would
          // stop every run of this worker and never deliver the cancel.
          const reason = await store.getRun(id).then(
            (run) => run?.reason ?? "canceled",
            (err: unknown) => {
              this.options.execution.log(`run "${id}": reading the cancel's reason failed`, err);
              return "canceled";
            },
          );
          this.active.get(id)?.cancel(reason);
        }
      }
      await store.heartbeatWorker(this.options.id);
      this.lastRenewOk = askedAt;
      this.sweepAside();
    } catch (err) {
      this.options.execution.log("renewing leases failed", err);
      // Past our own lease we may no longer own anything: stop rather than act as a zombie.
      if (clock.now() - this.lastRenewOk > leaseMs) {
        for (const ex of this.active.values()) {
          ex.stopWithoutWriting();
          ex.leaseLost();
        }
      }
    }
  }

  /** Sweeps the worker table beside the heartbeat, one sweep at a time: a slow one (a lock
   *  wait, a scan of a large backlog) must not hold up the renewals of the next heartbeats,
   *  or the leases of running runs would run out under them. */
  private sweepAside(): void {
    if (this.sweeping !== undefined || this.heartbeatsStopped) return;
    this.sweeping = this.sweepWorkers()
      .catch((err: unknown) => this.options.execution.log("sweeping the worker table failed", err))
      .finally(() => {
        this.sweeping = undefined;
      });
  }

  /** Takes over the runs of dead workers on this host (removing a row makes the runs it
   *  leases claimable now; fencing keeps that safe should the worker still write), then
   *  pauses runs whose version no live worker has. */
  private async sweepWorkers(): Promise<void> {
    const { store, leaseMs } = this.options;
    // Heartbeats are stamped by the store's clock (the database's on PostgreSQL): judge
    // them by the same clock, never this worker's, or skew would make live workers "dead".
    const now = await store.now();
    const here = {
      workerId: this.options.id,
      host: displayText(hostname()),
      pid: process.pid,
      pidNamespace: pidNamespace(),
      now,
      leaseMs,
    };
    const served = new Set<string>();
    const rows = await store.listWorkers();
    // Our row is gone while we live: another worker judged us dead (a heartbeat held up past
    // our lease: a step that blocked the event loop, a paused container). A heartbeat only
    // updates the row, so we would stay invisible for good: starts by name would find no
    // live worker for our workflows, and other workers would pause their runs as unserved.
    // Not once close() began: the row is about to go, and a write landing after its removal
    // would leave it behind.
    if (!this.closed && !rows.some((w) => w.id === this.options.id)) {
      await this.register();
    }
    for (const w of rows) {
      if (isDeadLocalWorker(w, here)) {
        // Only a pid known dead (same PID namespace) frees its leases at once. A worker
        // judged by its heartbeat alone may have a longer lease (and heartbeat interval)
        // than ours: its runs are taken when their own leases end.
        await store.removeWorker(w.id, { expireLeases: pidKnownDead(w, here) });
        this.options.execution.lifecycle({ event: "takeover", deadWorkerId: w.id });
      } else if (workerLive(w, now, leaseMs)) for (const wf of w.workflows) served.add(wf);
    }
    for (const wf of this.options.workflows.keys()) served.add(wf);
    await store.markUnserved({
      served: [...served],
      graceMs: Math.min(leaseMs, 5_000),
      canceled: (ids) => this.cancelChildrenOf(ids),
    });
  }

  /** Runs canceled as unserved (their worker gone with a cancel requested) were released
   *  by no execution: their children are canceled here, off the heartbeat's path. */
  private cancelChildrenOf(runIds: string[]): void {
    const { cancelChildren, log } = this.options.execution;
    if (!cancelChildren) return;
    void (async () => {
      for (const id of runIds) {
        const run = await this.options.store.getRun(id);
        if (run?.status !== "canceled") continue;
        await cancelChildren(id, run.reason ?? "");
      }
    })().catch((err: unknown) => log("canceling the children of canceled runs failed", err));
  }

  private async handBack(claim: ClaimedRun): Promise<void> {
    const released = await handBackRun(this.options.store, claim.run);
    if (!released) {
      this.options.execution.log(
        `handing back run "${claim.run.id}" failed; its lease will expire`,
      );
    } else if (released.status === "canceled") this.cancelChildrenOf([claim.run.id]);
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
    const bodyRunning = new Set(
      stopped
        .filter((ex) => ex.attemptsInFlight > 0 || ex.childStartsInFlight > 0)
        .map((ex) => ex.runId),
    );
    for (const ex of stopped) ex.stopWithoutWriting();
    // A run kept leased for a child's create alone (no attempt of it runs here) goes back
    // once that create answers: left leased, its next claimer would take it for a crash and
    // charge a lost attempt to a call that never began.
    for (const ex of await this.backOnceChildrenCreated(stopped, bound)) {
      this.late.push(ex.childStartsLanded().then(() => ex.handBackStopped()));
    }
    this.heartbeatsStopped = true;
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    // Let a heartbeat in flight finish before the store closes, but never wait on a store
    // that hangs.
    if (this.heartbeating !== undefined) {
      await waitAtMost(this.heartbeating, Math.min(graceMs, 2_000));
    }
    if (this.sweeping !== undefined) await waitAtMost(this.sweeping, Math.min(graceMs, 2_000));
    await Promise.all(this.handingBack);
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
    // its next claimer charges nothing): only those that do stay leased (below).
    const handedBack = Promise.all([
      ...stopped.filter((ex) => !bodyRunning.has(ex.runId)).map((ex) => ex.handBackStopped()),
      this.handBackOrphans({ expiredOnly: false, keep: bodyRunning }),
    ]);
    if (!(await settlesWithin(handedBack, bound))) {
      this.options.execution.log("close(): handing back runs timed out; the store hangs");
    }
    // A write of the row in flight (a sweep found it gone) lands first, or it would outlive
    // this worker.
    if (this.registering !== undefined && !(await settlesWithin(this.registering, bound))) {
      this.options.execution.log("close(): writing this worker's row timed out; the store hangs");
    }
    const removed = this.options.store.removeWorker(this.options.id, {
      expireLeases: bodyRunning.size === 0,
    });
    if (await settlesWithin(removed, bound))
      await removed; // its error, if any, is close()'s
    else
      this.options.execution.log("close(): removing this worker's row timed out; the store hangs");
  }
}

/** How far the store's clock is ahead of this host's (negative: behind), as far as one claim
 *  can tell: the store stamped the lease (its now + leaseMs) at some moment between
 *  `askedAt` and `answeredAt` by this host's clock, so only a stamp outside that window is
 *  skew, counted from the window's nearer edge. 0 when the store reads this host's clock
 *  (SQLite, a virtual clock). */
export function storeClockAhead(
  run: Pick<RunRecord, "leaseUntil">,
  leaseMs: number,
  askedAt: number,
  answeredAt: number,
): number {
  if (run.leaseUntil === null) return 0;
  const storeNow = run.leaseUntil - leaseMs;
  if (storeNow < askedAt) return storeNow - askedAt;
  if (storeNow > answeredAt) return storeNow - answeredAt;
  return 0;
}
