// A canceled run's unfinished children are canceled with it, and theirs: the canceled parent
// no longer awaits them, so they would go on working (and spending) for nobody. Temporal's
// default parent-close policy and Restate's cancellation do the same. Each child is canceled
// in a transaction of its own (as engine.cancel does: the child's row, then its parent's
// event), so a cascade never holds a parent's lock while it takes a child's.

import type { RunStatus, Store } from "../store/store.js";
import { canceledChildEvent } from "./child-result.js";

const UNFINISHED: RunStatus[] = ["pending", "running", "waiting", "paused"];

/** The reason a child canceled with its parent ends with (store/cancel-texts.ts). */
import { parentCanceledReason } from "../store/cancel-texts.js";

export { parentCanceledReason };

/**
 * Cancels every unfinished child of run `parentId` (canceled for `reason`) and, depth first,
 * theirs. A child executing somewhere stops within a heartbeat, as after engine.cancel, and
 * cancels its own children when released canceled; `executing(id, reason)` tells this
 * process's own execution at once. A child that finished meanwhile is left as it is.
 */
export async function cancelChildren(
  store: Store,
  parentId: string,
  reason: string,
  executing?: (runId: string, reason: string) => void,
): Promise<void> {
  const children = await store.listRuns({ parentId, status: UNFINISHED });
  for (const child of children) await cancelChild(store, parentId, child.id, reason, executing);
}

/**
 * Cancels run `childId`, a child of run `parentId` canceled for `reason`, and, depth first,
 * its unfinished children: one step of cancelChildren, also taken by the worker's sweep of
 * children a cascade left behind (children-of-canceled.ts).
 */
export async function cancelChild(
  store: Store,
  parentId: string,
  childId: string,
  reason: string,
  executing?: (runId: string, reason: string) => void,
): Promise<void> {
  const why = parentCanceledReason(parentId, reason);
  const res = await store.requestCancel(childId, why, {
    parentEvent: canceledChildEvent(childId, why),
  });
  if (res.state === "not-found") return; // deleted meanwhile
  // A child canceled before keeps its first reason; one still executing cancels its own
  // children when it is released canceled.
  const kept = res.run.reason ?? why;
  if (res.state === "requested") executing?.(childId, kept);
  if (res.state === "canceled") await cancelChildren(store, childId, kept, executing);
}
