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

/** True for a reason in cairn's words only: the default, or a cascade's wrapping of one
 *  (its parent's id, which the store keeps plain, is the only other text in it). */
export function isCairnCancelReason(reason: string): boolean {
  let r = reason;
  while (r.startsWith(PARENT_HEAD)) {
    const tail = r.indexOf(PARENT_TAIL, PARENT_HEAD.length);
    if (tail < 0) return false;
    r = r.slice(tail + PARENT_TAIL.length);
  }
  return r === DEFAULT_CANCEL_REASON;
}
