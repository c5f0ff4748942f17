// A worker's heartbeat: renews the leases of the runs it executes (stopping those whose lease
// is gone), delivers cancel requests made in other processes, stamps its row, and says
// whether a lease may still be this worker's (leaseFresh). Heartbeats go on through
// close()'s grace period, so leases outlive it; close() stops them after.

import { timerMs } from "../lib/timers.js";
import type { Execution } from "./execution.js";
import type { WorkerOptions } from "./worker-options.js";

export class WorkerHeartbeat {
  private timer: NodeJS.Timeout | undefined;
  private stoppedNow = false;
  private lastRenewOk: number;
  /** The heartbeat in flight, if any: close() waits for it before the store closes. */
  private beating: Promise<void> | undefined;
  private again = false;
  /** Holds whose ending (endHold) the store failed: sent again with each round until one
   *  answers, or until a lease has passed since (the hold has run out by then anyway). */
  private readonly holdsToEnd = new Map<string, { epoch: number; since: number }>();

  constructor(
    private readonly options: WorkerOptions,
    private readonly active: ReadonlyMap<string, Execution>,
    /** A round renewed everything: the worker table is swept beside it. */
    private readonly renewed: () => void,
    /** Runs no execution here holds whose step body still runs here: claims kept
     *  unexecuted (their leases), runs released held for it (their holds). Renewed with
     *  the executions' leases while the body runs, or another worker would take the run
     *  once a lease had passed and begin the same call beside it. */
    private readonly keptForBodies: () => {
      leased: Array<{ runId: string; epoch: number }>;
      held: string[];
    } = () => ({ leased: [], held: [] }),
  ) {
    this.lastRenewOk = options.clock.now();
  }

  /** Registering this worker (asked at `askedAt`) was its first heartbeat (a start tried
   *  again may come long after the constructor). */
  registeredAt(askedAt: number): void {
    this.lastRenewOk = askedAt;
  }

  /** Beats every heartbeatMs from now on. */
  startTimer(): void {
    this.timer = setInterval(() => void this.beat(), timerMs(this.options.heartbeatMs));
    this.timer.unref?.();
  }

  get stopped(): boolean {
    return this.stoppedNow;
  }

  /** The heartbeat in flight, if any. */
  get inFlight(): Promise<void> | undefined {
    return this.beating;
  }

  stop(): void {
    this.stoppedNow = true;
    if (this.timer) clearInterval(this.timer);
  }

  /** Renews the leases of executing runs; stops those whose lease is gone; delivers
   *  cancel requests made in other processes. */
  async beat(): Promise<void> {
    if (this.stoppedNow) return;
    if (this.beating !== undefined) {
      this.again = true;
      return this.beating;
    }
    this.beating = (async () => {
      try {
        do {
          this.again = false;
          await this.beatOnce();
        } while (this.again && !this.stoppedNow);
      } finally {
        this.beating = undefined;
      }
    })();
    return this.beating;
  }

  /** Ends the hold on `runId` set at `epoch` with the next round: the write that ended it
   *  failed, and a hold no round looks at again kept other workers off for a whole lease. */
  endHoldLater(runId: string, epoch: number): void {
    this.holdsToEnd.set(runId, { epoch, since: this.options.clock.now() });
  }

  /** The holds whose ending the store failed, still to end (close() sends them: no round
   *  follows it). */
  pendingHoldEnds(): Array<{ runId: string; epoch: number }> {
    return this.holdEnds(this.options.clock.now());
  }

  /** The holds still to end, those a lease old dropped. */
  private holdEnds(now: number): Array<{ runId: string; epoch: number }> {
    for (const [runId, { since }] of this.holdsToEnd) {
      if (now - since >= this.options.leaseMs) this.holdsToEnd.delete(runId);
    }
    return [...this.holdsToEnd].map(([runId, { epoch }]) => ({ runId, epoch }));
  }

  /** Whether a lease taken at `claimedAt` may still be this worker's: the claim or the last
   *  renewal round was asked less than a lease ago. A process stopped past its lease
   *  (SIGSTOP, a long pause) finds this false on waking, before its heartbeat learns the
   *  runs were taken. */
  leaseFresh(claimedAt: number): boolean {
    const since = Math.max(claimedAt, this.lastRenewOk);
    return this.options.clock.now() - since < this.options.leaseMs;
  }

  private async beatOnce(): Promise<void> {
    const { store, clock, leaseMs } = this.options;
    const executing = [...this.active.values()].map((e) => ({ runId: e.runId, epoch: e.epoch }));
    const kept = this.keptForBodies();
    const runs = [...executing, ...kept.leased];
    // Taken before asking: the store extended the leases after this moment, not when its
    // answer arrived.
    const askedAt = clock.now();
    const endHolds = this.holdEnds(askedAt);
    try {
      if (runs.length > 0 || kept.held.length > 0 || endHolds.length > 0) {
        const res = await store.renewLeases({
          workerId: this.options.id,
          runs,
          leaseMs,
          ...(kept.held.length > 0 && { holds: kept.held }),
          ...(endHolds.length > 0 && { endHolds }),
        });
        // Fenced by worker and epoch: sent once, a hold that was not ours to end stays.
        for (const { runId, epoch } of endHolds) {
          if (this.holdsToEnd.get(runId)?.epoch === epoch) this.holdsToEnd.delete(runId);
        }
        // Only the execution the renewal was for: while it was in flight the run may have
        // been released and claimed again here, under a new epoch that is not lost.
        const renewed = new Map(executing.map((r) => [r.runId, r.epoch]));
        for (const id of res.lost) {
          const ex = this.active.get(id);
          // An execution releasing the run learns from its release whether it still held it.
          if (ex && ex.epoch === renewed.get(id) && !ex.releasing) {
            ex.stopWithoutWriting();
            ex.leaseLost();
          }
        }
        // A kept claim's cancel is carried out by its hand-back (orphan-runs.ts).
        for (const id of res.cancelRequested.filter((runId) => renewed.has(runId))) {
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
      if (!this.stoppedNow) this.renewed();
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
}
