// A handle on a run (engine.handle, and what start/resume/fork return): its id, its view,
// and result(), which waits for the run to finish by reading it again each poll interval
// or sooner when woken (run-waiters.ts), and settles as the run ended.

import { decode } from "../codec/codec.js";
import { EngineClosedError, errorFromRecord, RunCanceledError, runNotFound } from "../errors.js";
import type { ReleasedRun } from "../store/store.js";
import type { AnyWorkflow } from "../workflow/define.js";
import type { RunHandle } from "./engine.js";
import { closedUnder, type EngineInternals, openNow, ready } from "./engine-internals.js";
import { getRunView } from "./inspection.js";

/** engine.handle(id), or engine.handle(workflow, id) (the workflow only types the output). */
export function handleFor<O>(
  internals: EngineInternals,
  idOrWorkflow: string | AnyWorkflow,
  maybeId?: string,
): RunHandle<O> {
  return runHandle(internals, typeof idOrWorkflow === "string" ? idOrWorkflow : (maybeId ?? ""));
}

/** `completed`: the run as a durable write of this process left it, completed (start()
 *  of a run created and released at once): result() needs no read (a completed run never
 *  changes). */
export function runHandle<O>(
  internals: EngineInternals,
  id: string,
  completed?: ReleasedRun,
): RunHandle<O> {
  const known = completed?.status === "completed" ? completed : undefined;
  return {
    id,
    info: () =>
      getRunView(internals, id).catch((err: unknown) => {
        throw closedUnder(internals, `handle("${id}").info()`, err);
      }),
    result: () => awaitResult<O>(internals, id, known),
  };
}

/** The run's output once it completes; its error once it fails or is canceled. */
async function awaitResult<O>(
  internals: EngineInternals,
  id: string,
  completed: ReleasedRun | undefined,
): Promise<O> {
  if (!openNow(internals)) await ready(internals);
  const { waiters, worker, config } = internals;
  // A run executing in this process: its execution's end hands over the run as its release
  // left it (durable), so no read is needed. Only another worker could end it sooner, and
  // only once our lease ran out: past that, polling takes over.
  let known =
    completed ??
    (worker?.active.has(id)
      ? await waiters.waitForChange(id, Math.max(config.pollIntervalMs, config.leaseMs))
      : undefined);
  if (internals.closed) throw closedWhileWaiting(id);
  for (;;) {
    let run: ReleasedRun | undefined = known;
    known = undefined;
    try {
      run ??= await config.store.getRun(id);
    } catch (err) {
      if (internals.closed) throw closedWhileWaiting(id, err);
      throw err;
    }
    if (!run) throw runNotFound(id);
    if (run.status === "completed") return decode<O>(run.output ?? "");
    if (run.status === "failed") {
      throw errorFromRecord(run.error ?? { name: "Error", message: run.reason ?? "failed" });
    }
    if (run.status === "canceled") {
      throw new RunCanceledError(`Run "${id}" was canceled: ${run.reason ?? "no reason given"}`);
    }
    known = await waiters.waitForChange(id, config.pollIntervalMs);
    if (internals.closed) throw closedWhileWaiting(id);
  }
}

/** A result() that was waiting when close() came. */
function closedWhileWaiting(id: string, cause?: unknown): EngineClosedError {
  return new EngineClosedError(
    `The engine was closed while waiting for the result of run "${id}"; the run itself goes on in the store. Wait for it with handle("${id}").result() on a new engine (createEngine()).`,
    { cause },
  );
}
