// Runs the store may still lease to this worker though nothing here executes them: an
// execution that ended without letting its run go (it stopped without writing: a lease
// judged stale, a store error on the hand-back), or a claim that failed without an answer
// (on PostgreSQL it may have committed, its answer lost, every retry failed). claimRuns never
// gives a worker its own runs: with no other worker they would sit forever. Once such a
// lease has expired, as another worker would take the run over, this worker hands it back.

import type { RunRecord } from "../store/store.js";
import {
  type CrashUnjudged,
  endedCanceled,
  handBackLine,
  handBackRun,
  payloadKeyError,
} from "./execution.js";
import { runsLeasedTo } from "./runs-leased-to.js";
import type { WorkerOptions } from "./worker-options.js";

/** An orphan: the epoch this worker held it at, and whether it was taken from a crashed
 *  worker whose crash no replay has charged yet (then it goes back as that crash left it,
 *  see handBackRun). */
interface Orphan {
  epoch: number;
  crashUnjudged: CrashUnjudged;
  /** Kept for a step body of it that ran here when it became an orphan: once that body has
   *  ended nothing holds the run here, so it goes back without waiting out its lease (a
   *  claim kept unexecuted holds a fresh lease: the run sat idle for a whole lease). */
  heldForBody: boolean;
}

export class OrphanRuns {
  /** The orphans, by run id. */
  private readonly orphans = new Map<string, Orphan>();
  /** A claim failed without an answer: it may have leased runs to this worker that it
   *  never learned of. The next hand-back looks for them. */
  private claimMayHaveLeased = false;

  constructor(
    private readonly options: WorkerOptions,
    private readonly hooks: {
      /** Whether the run executes here (its lease is this worker's to keep). */
      executing(runId: string): boolean;
      /** Whether a step body of the run still runs here: it is not handed back meanwhile
       *  (this worker would claim it again, and begin the same call beside it). */
      bodyRunning(runId: string): boolean;
      /** A run was handed back (pending, or canceled: `canceled`); settles once what
       *  follows (a canceled run's children canceled) is done. */
      handedBack(runId: string, canceled: boolean): Promise<void>;
    },
  ) {}

  /** `runId` is leased to this worker at `epoch` though nothing here executes it: an
   *  execution ended without letting it go, a claim of it was kept unexecuted, or a claim
   *  whose answer was lost took it. */
  add(runId: string, epoch: number, crashUnjudged: CrashUnjudged): void {
    this.orphans.set(runId, { epoch, crashUnjudged, heldForBody: this.hooks.bodyRunning(runId) });
  }

  /** The orphans `bodyRunning` says a step body of still runs here, at their epochs: their
   *  leases are renewed meanwhile (worker.ts keptForBodies). */
  keptFor(bodyRunning: (runId: string) => boolean): Array<{ runId: string; epoch: number }> {
    return [...this.orphans]
      .filter(([runId]) => bodyRunning(runId))
      .map(([runId, { epoch }]) => ({ runId, epoch }));
  }

  /** A claim failed without an answer (see claimMayHaveLeased). */
  claimFailed(): void {
    this.claimMayHaveLeased = true;
  }

  /** Hands back each orphan whose lease expired (any, with `expiredOnly` false) and is
   *  still ours; forgets those another worker took or that changed since, and those in
   *  `keep`. A store error leaves them for the next round. */
  async handBack({
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
      // Read together: one round trip for all of them, not one per orphan in turn.
      const orphans = [...this.orphans];
      const [now, runs] = await Promise.all([store.now(), this.readRuns(orphans)]);
      for (const [i, [runId, orphan]] of orphans.entries()) {
        // One added (or added again) meanwhile is looked at by the next round.
        if (this.orphans.get(runId) !== orphan) continue;
        const run = runs[i];
        // Never a run executing here (a run created claimed while the claims were looked
        // for), nor one whose attempt close() left running: its lease is this worker's.
        if (this.hooks.executing(runId) || keep.has(runId)) {
          this.orphans.delete(runId);
          continue;
        }
        if (run === null) continue;
        const ours =
          run?.status === "running" && run.epoch === orphan.epoch && run.leaseOwner === workerId;
        if (!ours) {
          this.orphans.delete(runId);
          continue;
        }
        // A step body of it still runs here: kept, and looked at again once that body has
        // ended. Not one with a cancel asked: released, it ends canceled and nothing of it
        // runs again (kept, with a body that never settles, its cancel would never be
        // carried out while this worker lives).
        if (this.hooks.bodyRunning(runId)) {
          if (!run.cancelRequested) continue;
        } else if (expiredOnly && !orphan.heldForBody && (run.leaseUntil ?? 0) > now) continue;
        await this.handBackOrphan(run, orphan);
      }
    } catch {
      // The store is away (the claim that follows reports it); the next round tries again.
    }
  }

  /** Each orphan's run as the store has it now (undefined: gone). One run this process
   *  cannot read (a payload under a key it was not given) is null, left for the next
   *  round: it must not keep the others from being handed back. */
  private readRuns(orphans: Array<[string, Orphan]>): Promise<Array<RunRecord | null | undefined>> {
    return Promise.all(
      orphans.map(([runId]) =>
        this.options.store.getRun(runId).catch((err: unknown) => {
          if (payloadKeyError(err) !== undefined) return null;
          throw err;
        }),
      ),
    );
  }

  /** Hands back one orphan the store still leases to this worker, and says so. */
  private async handBackOrphan(run: RunRecord, { epoch, crashUnjudged }: Orphan): Promise<void> {
    const back = await handBackRun(this.options.store, run, { crashUnjudged });
    if (back === undefined) return;
    this.orphans.delete(run.id);
    await this.hooks.handedBack(run.id, endedCanceled(back));
    this.options.execution.lifecycle({
      runId: run.id,
      workflow: run.workflow,
      version: run.version,
      epoch,
      ...handBackLine(back),
    });
  }

  /** After a claim that failed (claimMayHaveLeased): the running runs leased to this worker
   *  that it does not execute become orphans, handed back once their leases expire. A
   *  store error leaves the search for the next round. Whether the lost claim took a run
   *  from a crashed worker this worker does not know, the store does (it keeps what each
   *  claim found): handed back as crashed, a run that was pending would have its first call
   *  charged a crash that never was (with maxAttempts 1, failing it); handed back to
   *  pending, a crash that was would be charged nothing. So the hand-back asks the store
   *  ("if-recovered", see expireLease). */
  private async findUnknownClaims(): Promise<void> {
    try {
      const leased = await runsLeasedTo(this.options.store, this.options.id);
      for (const [runId, epoch] of leased) {
        if (!this.hooks.executing(runId) && !this.orphans.has(runId)) {
          this.add(runId, epoch, "if-recovered");
        }
      }
      this.claimMayHaveLeased = false;
    } catch {
      // The store is away: the next round looks again.
    }
  }
}
