// How a child run's end reaches its parent. ctx.child waits for an event named
// CHILD_EVENT_PREFIX + child id whose payload is the codec text of { output } or { error }.
// The Execution sends it with the child's release (childResultEvents); a child canceled
// while it was not executing (waiting, sleeping, pending, paused) gets it from
// canceledChildEvent, stored by requestCancel in the cancel's own transaction, so its
// parent never waits forever. A parent that finds the child already ended reads its
// outcome from the child's run (childOutcome).

import { encode } from "../codec/codec.js";
import { SerializationError } from "../errors.js";
// The error a canceled run ends with and the child-result event of a canceled child are
// cairn's own words (store/cancel-texts.ts: a keyless process may store them plain).
import { canceledRunError } from "../store/cancel-texts.js";
import type { ErrorRecord, NewEvent, RunRecord, Store } from "../store/store.js";
import { CHILD_EVENT_PREFIX } from "../workflow/child-calls.js";
import type { ChildOutcome } from "../workflow/context.js";

export { canceledChildEvent, canceledRunError } from "../store/cancel-texts.js";

/** The child-result event a release of `run` carries to its parent, if it has one: the
 *  output (held to the payload limit by the release), or the error as errorForParent
 *  hands it over. */
export function childResultEvents(
  run: RunRecord,
  result: { output?: unknown; error?: ErrorRecord },
  maxPayloadBytes: number,
): NewEvent[] | undefined {
  if (!run.parentId) return undefined;
  let payload: string;
  try {
    // An output was held to the limit as the run's own (its release stores it): the bytes
    // the event's wrapper adds must not refuse here an output the child stored.
    payload = encode(
      result.error ? { error: errorForParent(run.id, result.error, maxPayloadBytes) } : result,
      Number.POSITIVE_INFINITY,
    );
  } catch (err) {
    payload = encode({ error: notHandedOver(run.id, err) });
  }
  return [{ runId: run.parentId, name: `${CHILD_EVENT_PREFIX}${run.id}`, payload }];
}

/** A child's error as its parent gets it: name, code and message, within the payload
 *  limit; one too big for it is a SerializationError that says so. The same on both paths
 *  (the result event, and childOutcome reading the child's run), or what the parent sees
 *  would depend on whether it could receive the event when the child ended. */
function errorForParent(childId: string, error: ErrorRecord, maxPayloadBytes: number): ErrorRecord {
  const handed: ErrorRecord = { name: error.name, code: error.code, message: error.message };
  // A cancel's error is handed over whatever its reason's length (canceledChildEvent).
  if (error.code === "RUN_CANCELED") return handed;
  try {
    encode({ error: handed }, maxPayloadBytes);
    return handed;
  } catch (err) {
    return notHandedOver(childId, err);
  }
}

function notHandedOver(childId: string, err: unknown): ErrorRecord {
  const e = new SerializationError(
    `The result of child run "${childId}" ${(err as Error).message}; it cannot be handed to its parent`,
  );
  return { name: e.name, code: e.code, message: e.message };
}

/** A child run's outcome, if it has finished. A child that no longer exists (retention
 *  deleted it: a parent asks only for a child it started; its id may since name another
 *  run) can never send its result: the parent gets an error that says so instead of
 *  waiting forever. */
export async function childOutcome(
  store: Store,
  childId: string,
  parentId: string,
  maxPayloadBytes: number,
): Promise<ChildOutcome | undefined> {
  const child = await store.getRun(childId);
  if (!child || child.parentId !== parentId) return { error: childNotFound(childId) };
  if (child.status === "completed") return { output: child.output ?? encode(undefined) };
  if (child.status === "failed" || child.status === "canceled") {
    const error: ErrorRecord =
      child.error ??
      (child.status === "canceled"
        ? canceledRunError(childId, child.reason ?? "no reason given")
        : { name: "Error", message: child.reason ?? "failed" });
    return { error: errorForParent(childId, error, maxPayloadBytes) };
  }
  return undefined;
}

/** The error a call gets for its child once no child of its run is under the child's id:
 *  deleted (retention), maybe with a run of its own under that id since. */
function childNotFound(childId: string): ErrorRecord {
  return {
    name: "RunNotFoundError",
    code: "RUN_NOT_FOUND",
    message: `Child run "${childId}" no longer exists (deleted, e.g. by retention); its outcome cannot be read`,
  };
}

/** childNotFound's error when no child of run `parentId` is under `childId` any more, else
 *  undefined (the child is there). */
export async function deletedChild(
  store: Store,
  childId: string,
  parentId: string,
): Promise<ErrorRecord | undefined> {
  const child = await store.getRun(childId);
  return !child || child.parentId !== parentId ? childNotFound(childId) : undefined;
}
