// engine.cancel() and engine.resume(): the store decides (a run not executing is canceled
// in the cancel's own transaction; only a paused or failed run resumes), and this engine
// passes the news on to its own execution of the run, its worker and its result() waiters.

import { RunConflictError, runNotFound, StoreError } from "../errors.js";
import type { Amounts } from "../store/store.js";
import { CHILD_EVENT_PREFIX } from "../workflow/child-calls.js";
import { cancelChildren } from "./cancel-children.js";
import { canceledChildEvent } from "./child-result.js";
import type { RunHandle } from "./engine.js";
import { type EngineInternals, ready } from "./engine-internals.js";
import { runHandle } from "./run-handle.js";
import { checkBudget, checkCancelReason } from "./validate.js";

export async function cancelRun(
  internals: EngineInternals,
  id: string,
  reason: string,
): Promise<void> {
  await ready(internals);
  checkCancelReason(reason, id);
  const res = await internals.config.store.requestCancel(id, reason, {
    parentEvent: canceledChildEvent(id, reason),
  });
  if (res.state === "not-found") throw runNotFound(id);
  if (res.state === "finished") {
    throw new RunConflictError(`Run "${id}" is already ${res.run.status}; it cannot be canceled`);
  }
  // The first reason given is the one the run ends with (and its children cite): this
  // process's execution stops with the one the store kept, or its release writes ours over it.
  const kept = res.run.reason ?? reason;
  if (res.state === "requested") internals.worker?.active.get(id)?.cancel(kept);
  internals.waiters.wake(id);
  // A run still executing cancels its children when it is released canceled (Execution):
  // canceled now, they would fail a parent that has not heard of its cancel yet, and the
  // children of a parent that ends completed or failed instead must go on.
  if (res.state !== "canceled") return;
  try {
    await cancelChildren(internals.config.store, id, kept, (child, why) =>
      internals.worker?.active.get(child)?.cancel(why),
    );
  } catch (err) {
    // The run is canceled (its own transaction committed); its children are canceled one
    // by one after it, and nothing else cancels those left behind: say so, and what to do.
    throw new StoreError(
      `Run "${id}" was canceled, but canceling its unfinished child runs failed (${errorText(err)}); cancel run "${id}" again to cancel them`,
      { cause: err, runId: id },
    );
  }
}

function errorText(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

export async function resumeRun(
  internals: EngineInternals,
  id: string,
  options: { budget?: Amounts },
): Promise<RunHandle> {
  await ready(internals);
  checkBudget(options.budget, "resume()");
  // A child's end kept for its failed parent is withdrawn: the child's next end is its
  // outcome (a resumed parent took the stale one, a failure the child was resumed from).
  const res = await internals.config.store.resumeRun(id, {
    ...(options.budget && { budgetLimit: options.budget }),
    sentEnd: `${CHILD_EVENT_PREFIX}${id}`,
  });
  if (!res.ok) {
    if (res.reason === "not-found") throw runNotFound(id);
    if (res.reason === "parent-canceled") {
      throw new RunConflictError(
        `Run "${id}" cannot be resumed: its parent run "${res.run.parentId}" was canceled, so it would work for nobody. Start the work as a new run instead (or fork the parent).`,
      );
    }
    throw new RunConflictError(
      `Run "${id}" is ${res.run.status}; only paused or failed runs can be resumed`,
    );
  }
  internals.worker?.requestClaimRound();
  return runHandle(internals, id);
}
