// Runs that ended canceled without an execution releasing them here (canceled as unserved by
// a sweep, or handed back by the worker while a cancel was requested): their children are
// canceled with them, off the path (heartbeat, claim round) that found them. A hand-back
// made by close() (or after it) waits for the cascade: the store closes after it.

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
