// Runs that ended canceled without an execution releasing them here (canceled as unserved by
// a sweep, or handed back by the worker while a cancel was requested): their children are
// canceled with them, off the path (heartbeat, claim round) that found them. A hand-back
// made by close() (or after it) waits for the cascade: the store closes after it.

import { PayloadKeyError } from "../errors.js";
import { cancelChild } from "./cancel-children.js";
import type { WorkerOptions } from "./worker-options.js";

/** Settles (never rejects) once the children are canceled, or their cancel failed. */
export function cancelChildrenOfCanceled(options: WorkerOptions, runIds: string[]): Promise<void> {
  const { cancelChildren, log } = options.execution;
  if (!cancelChildren) return Promise.resolve();
  return (async () => {
    for (const id of runIds) {
      const run = await options.store.getRun(id);
      if (run?.status !== "canceled") continue;
      await cancelChildren(id, run.reason ?? "");
    }
  })().catch((err: unknown) => log("canceling the children of canceled runs failed", err));
}

/** Children of canceled parents listed (and canceled) per store query. */
export const CHILD_SWEEP_BATCH = 100;
/** Batches one sweep takes at most; the rest wait for the next sweep. */
const CHILD_SWEEP_MAX_BATCHES = 10;
/** The sweep runs as the worker starts, then with every this many-th lease renewal round
 *  (with the default heartbeat of leaseMs / 3, every 100 s for a 30 s lease). */
export const CHILD_SWEEP_EVERY_ROUNDS = 10;

/**
 * The worker's sweep of children a cancel's cascade left behind. A cancel commits the parent
 * first and its children one by one after it (cancel-children.ts): when the process that
 * canceled the parent dies (or its store fails) between the two, nothing else would cancel
 * them, and a child waiting without a timeout (or sleeping for a month, or paused) would
 * work for nobody for ever, resume refusing it. The sweep lists a bounded batch of
 * unfinished runs whose parent is canceled (Store.listChildrenOfCanceled: one indexed query;
 * a store without it is not swept) and cancels each as the cascade would: the same reason
 * (naming the parent and quoting its reason), the parent told in the child's transaction,
 * the child's own children cascading, a child executing somewhere told to stop (within a
 * heartbeat), one that finished meanwhile left as it is. Workers sweeping at once cancel each
 * child once: a cancel of a canceled run changes nothing. Retention never deletes a run with
 * a child (deleteRuns keeps it), so a canceled parent stays until its children have ended.
 */
export class ChildrenOfCanceledSweep {
  private rounds = 0;
  private sweeping: Promise<void> | undefined;

  constructor(
    private readonly options: WorkerOptions,
    private readonly hooks: {
      /** close() began: no sweep starts. */
      closed(): boolean;
      /** Tells this worker's own execution of `runId`, if any, that it is canceled. */
      executing(runId: string, reason: string): void;
    },
  ) {}

  /** The sweep in flight, if any: close() lets it finish before the store closes. */
  get inFlight(): Promise<void> | undefined {
    return this.sweeping;
  }

  /** A lease renewal round went through: every CHILD_SWEEP_EVERY_ROUNDS-th one sweeps. */
  renewed(): void {
    this.rounds = (this.rounds + 1) % CHILD_SWEEP_EVERY_ROUNDS;
    if (this.rounds === 0) this.sweepAside();
  }

  /** Sweeps beside the caller, one sweep at a time; never rejects (a failure is logged and
   *  the next sweep tries again). */
  sweepAside(): void {
    if (this.sweeping !== undefined || this.hooks.closed()) return;
    if (!this.options.store.listChildrenOfCanceled) return;
    this.sweeping = this.sweep()
      .catch((err: unknown) =>
        this.options.execution.log(
          "canceling the unfinished children of canceled runs failed; the next sweep tries again",
          err,
        ),
      )
      .finally(() => {
        this.sweeping = undefined;
      });
  }

  /** The reason canceled run `parentId` ended with, which its children cite; undefined when
   *  it is gone or no longer canceled. One whose reason cannot be read here (an encrypted
   *  store without its key: PayloadKeyError) is cited as such: its children are canceled
   *  all the same, or they would fill every batch of every sweep. */
  private async parentReason(parentId: string): Promise<string | undefined> {
    try {
      const parent = await this.options.store.getRun(parentId);
      return parent?.status === "canceled" ? (parent.reason ?? "") : undefined;
    } catch (err) {
      // Any other failure (the store's) ends this sweep; the next one tries again.
      if (!(err instanceof PayloadKeyError)) throw err;
      this.options.execution.log(
        `run "${parentId}": its cancel's reason cannot be read here (no key for it); its unfinished children are canceled citing none`,
        err,
      );
      return "(its reason cannot be read here)";
    }
  }

  /** Cancels the unfinished children of canceled runs, a batch at a time. */
  async sweep(): Promise<void> {
    const { store } = this.options;
    if (!store.listChildrenOfCanceled) return;
    for (let batch = 0; batch < CHILD_SWEEP_MAX_BATCHES; batch++) {
      if (this.hooks.closed()) return;
      const found = await store.listChildrenOfCanceled({ limit: CHILD_SWEEP_BATCH });
      const byParent = new Map<string, string[]>();
      for (const { runId, parentId } of found) {
        const ids = byParent.get(parentId);
        if (ids) ids.push(runId);
        else byParent.set(parentId, [runId]);
      }
      for (const [parentId, children] of byParent) {
        if (this.hooks.closed()) return;
        const reason = await this.parentReason(parentId);
        if (reason === undefined) continue; // gone meanwhile
        for (const childId of children) {
          try {
            await cancelChild(store, parentId, childId, reason, (id, why) =>
              this.hooks.executing(id, why),
            );
          } catch (err) {
            this.options.execution.log(
              `run "${childId}": canceling it (its parent run "${parentId}" is canceled) failed; the next sweep tries again`,
              err,
            );
            return;
          }
        }
      }
      if (found.length < CHILD_SWEEP_BATCH) return;
    }
  }
}
