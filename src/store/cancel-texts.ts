// The texts a cancel stores in cairn's own words rather than its caller's: the reason of a
// cancel given none (engine.cancel's default), the reason a child canceled with its parent
// ends with, and the RunCanceledError a waiting parent is handed (its child-result event).
// A cancel whose reason is only such words holds nothing to keep secret beyond run ids, which
// every store keeps plain: a store marked encrypted lets a process without keys store it as
// it is (plain-payloads.ts), so a keyless `cairn cancel <id>` works. An encryptedStore still
// encrypts it like any reason, and reads back either form.

import { encode } from "../codec/codec.js";
import type { ErrorRecord } from "./store.js";

/** The reason of a cancel given none. */
export const DEFAULT_CANCEL_REASON = "canceled by request";

/** The event name ctx.child waits for (workflow/child-calls.ts's CHILD_EVENT_PREFIX). */
const CHILD_EVENT_PREFIX = "cairn.child:";

const PARENT_HEAD = 'its parent run "';
const PARENT_TAIL = '" was canceled: ';

/** The reason a child canceled with its parent ends with. */
export function parentCanceledReason(parentId: string, reason: string): string {
  return `${PARENT_HEAD}${parentId}${PARENT_TAIL}${reason}`;
}

/** The error a canceled run ends with (stored on the run, and what a parent sees of a
 *  canceled child): a RunCanceledError with the reason. */
export function canceledRunError(runId: string, reason: string): ErrorRecord {
  return {
    name: "RunCanceledError",
    code: "RUN_CANCELED",
    message: `Run "${runId}" was canceled: ${reason}`,
  };
}

/** The child-result event of a child canceled with `reason`, as ctx.child reads it: the
 *  parent sees a RunCanceledError it can catch. */
export function canceledChildEvent(
  childId: string,
  reason: string,
): { name: string; payload: string } {
  const error = canceledRunError(childId, reason);
  // No size limit: a cancel must not fail because its reason is long.
  return {
    name: `${CHILD_EVENT_PREFIX}${childId}`,
    payload: encode({ error }, Number.POSITIVE_INFINITY),
  };
}

/** Who a run's parent is, as the store records it: null for a run without one, undefined
 *  for a run the store does not know. */
export type ParentOf = (runId: string) => string | null | undefined;

/** A cancel reason of `runId`, read once as a cascade's wrapping: each run it says was
 *  canceled with its parent, beside the parent it names (the first `runId`, each next the
 *  parent before it), then the words the cascade's root was canceled with. A reason that
 *  names no parent is all `root`. */
export interface CancelReason {
  readonly runId: string;
  readonly reason: string;
  readonly links: ReadonlyArray<{ readonly child: string; readonly parent: string }>;
  readonly root: string;
}

export function readCancelReason(runId: string, reason: string): CancelReason {
  const links: Array<{ child: string; parent: string }> = [];
  let r = reason;
  let child = runId;
  while (r.startsWith(PARENT_HEAD)) {
    const tail = r.indexOf(PARENT_TAIL, PARENT_HEAD.length);
    if (tail < 0) break;
    const parent = r.slice(PARENT_HEAD.length, tail);
    links.push({ child, parent });
    child = parent;
    r = r.slice(tail + PARENT_TAIL.length);
  }
  return { runId, reason, links, root: r };
}

/** The runs whose parents a cancel reason names, in order: its run itself, then each run
 *  it says was canceled but the last (the cascade's root). Empty for a reason that names
 *  no parent: its judging reads no run. */
export function runsNamedAsChildren(c: CancelReason): string[] {
  return c.links.map((l) => l.child);
}

/** The parents of `runs` as `parentOf` reads them now, kept for a judge made later. */
export function parentsRead(
  parentOf: ParentOf,
  runs: readonly string[],
): Map<string, string | null> {
  const parents = new Map<string, string | null>();
  for (const id of runs) {
    const parent = parentOf(id);
    if (parent !== undefined) parents.set(id, parent);
  }
  return parents;
}

/** True for a cancel reason in cairn's words only: the default, or a cascade's wrapping of
 *  one, each id in it the parent of the run before it (the first the reason's run's own
 *  parent), as `parentOf` reads the store. Any other text in an id's place (a keyless
 *  caller's engine.cancel(id, reason) shaped so) is the caller's, and may be a secret. A
 *  wrapping cut short leaves its head in `root`: not the default. */
export function isCairnCancelReason(c: CancelReason, parentOf: ParentOf): boolean {
  return c.root === DEFAULT_CANCEL_REASON && c.links.every((l) => parentOf(l.child) === l.parent);
}
