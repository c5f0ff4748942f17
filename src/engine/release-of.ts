// What an execution writes when its run stops here for good or for now: the Release (the
// store's releaseRun) for each way an execution can end with a status of its own —
// completed, failed, canceled, paused (budget) or waiting (suspended). Pure: the Execution
// decides when to release and reports what the store made of it.

import { encode } from "../codec/codec.js";
import { fromStoredText, toStoredText } from "../codec/stored-text.js";
import { SerializationError, toErrorRecord } from "../errors.js";
import { type Release, type RunRecord, TERMINAL_STATUSES } from "../store/store.js";
import type { Outcome } from "../workflow/context.js";
import { canceledChildEvent, canceledRunError, childResultEvents } from "./child-result.js";
import { retryBackoffReason } from "./views.js";

/** The outcomes that end an execution with a release to a status of their own (the others
 *  write nothing, or hand the run back as pending). */
export type ReleasedOutcome = Extract<
  Outcome,
  { kind: "completed" | "failed" | "canceled" | "paused" | "suspended" }
>;

/** The release of `run` (as claimed, fenced by its epoch) for `outcome`. */
export function releaseOf(
  run: RunRecord,
  outcome: ReleasedOutcome,
  maxPayloadBytes: number,
): Release {
  const release = statusRelease(run, outcome, maxPayloadBytes);
  if (!TERMINAL_STATUSES.has(release.status)) Object.assign(release, eventsIfCanceled(run));
  return release;
}

/** A release to pending, waiting or paused becomes canceled when a cancel was requested
 *  meanwhile (the store decides, in the release's transaction): a child's parent must hear
 *  of it then, or it waits for the child for ever. Also for a hand-back (execution.ts). */
export function eventsIfCanceled(
  run: Pick<RunRecord, "id" | "parentId">,
): Pick<Release, "eventsIfCanceled"> {
  if (!run.parentId) return {};
  const ev = canceledChildEvent(run.id, "the cancel came while it was being executed");
  return { eventsIfCanceled: [{ runId: run.parentId, ...ev }] };
}

function statusRelease(run: RunRecord, outcome: ReleasedOutcome, maxPayloadBytes: number): Release {
  const fence = { runId: run.id, epoch: run.epoch };
  switch (outcome.kind) {
    case "completed":
      return completedRelease(run, outcome.output, maxPayloadBytes);
    case "failed":
      return {
        ...failedRelease(run, outcome.error, maxPayloadBytes),
        failedKeys: outcome.failedKeys,
      };
    case "canceled": {
      const error = canceledRunError(run.id, outcome.reason);
      return {
        ...fence,
        status: "canceled",
        reason: outcome.reason,
        error,
        readyAt: null,
        events: childResultEvents(run, { error }, maxPayloadBytes),
      };
    }
    case "paused":
      return {
        ...fence,
        status: "paused",
        pausedFor: "budget",
        reason: outcome.reason,
        readyAt: null,
      };
    case "suspended":
      return {
        ...fence,
        status: "waiting",
        readyAt: outcome.wakeAt,
        wakeAt: outcome.wakeAt,
        waitingFor: outcome.waitingFor,
        reason:
          outcome.backoff && outcome.wakeAt !== null
            ? retryBackoffReason(outcome.backoff, outcome.wakeAt)
            : null,
      };
  }
}

/** Completed with `output`; failed instead if the output cannot be stored. */
function completedRelease(run: RunRecord, output: unknown, maxPayloadBytes: number): Release {
  let encoded: string;
  try {
    encoded = encode(output, maxPayloadBytes);
  } catch (err) {
    const e = new SerializationError(
      `Run "${run.id}" returned an output that ${(err as Error).message}; workflow outputs must be serializable and within the payload limit`,
      { cause: err },
    );
    return failedRelease(run, e, maxPayloadBytes);
  }
  return {
    runId: run.id,
    epoch: run.epoch,
    status: "completed",
    output: encoded,
    readyAt: null,
    reason: null,
    events: childResultEvents(run, { output }, maxPayloadBytes),
  };
}

function failedRelease(run: RunRecord, err: Error, maxPayloadBytes: number): Release {
  const error = toErrorRecord(err);
  return {
    runId: run.id,
    epoch: run.epoch,
    status: "failed",
    error,
    // The name may begin like an encrypted payload too (codec/stored-text.ts).
    reason: toStoredText(`${error.name}: ${fromStoredText(error.message)}`),
    readyAt: null,
    events: childResultEvents(
      run,
      { error: { name: error.name, code: error.code, message: error.message } },
      maxPayloadBytes,
    ),
  };
}
