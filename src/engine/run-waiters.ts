// The result() calls of this engine waiting for a run to change. Each waits at most one
// poll interval and then reads the run again; a store hint that the run finished, or a
// verb of this engine that changed it (cancel, an approval's answer), wakes it sooner.
// Polling stays the source of truth: a missed wake-up costs one interval, never a result.

import { timerMs } from "../lib/timers.js";
import type { ReleasedRun } from "../store/store.js";

export class RunWaiters {
  private readonly byRun = new Map<string, Set<(run?: ReleasedRun) => void>>();

  /** Wakes every waiter of `runId` now. `run`: the run as a durable write of this process
   *  left it (an execution's release), when the waker has it; waiters then need no read. */
  wake(runId: string, run?: ReleasedRun): void {
    const set = this.byRun.get(runId);
    if (!set) return;
    this.byRun.delete(runId);
    for (const fn of set) fn(run);
  }

  /** Wakes every waiter of every run (the engine closes). */
  wakeAll(): void {
    for (const runId of [...this.byRun.keys()]) this.wake(runId);
  }

  /** Resolves when `runId` is woken (with the run, when the waker had it), or after `ms`
   *  (with nothing), whichever comes first. */
  waitForChange(runId: string, ms: number): Promise<ReleasedRun | undefined> {
    return new Promise((resolve) => {
      const set = this.byRun.get(runId) ?? new Set();
      this.byRun.set(runId, set);
      const done = (run?: ReleasedRun) => {
        clearTimeout(timer);
        set.delete(done);
        if (set.size === 0 && this.byRun.get(runId) === set) this.byRun.delete(runId);
        resolve(run);
      };
      const timer = setTimeout(done, timerMs(ms));
      set.add(done);
    });
  }
}
