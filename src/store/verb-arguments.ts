// What createRun and releaseRun refuse by name, on both backends, before anything is
// written: values a backend would otherwise change silently or refuse with a message that
// names neither the run nor the field (the engine never sends them; a direct caller of the
// store can).
// - Times and durations that are not finite numbers: SQLite stores NaN as NULL (a waiting
//   run with no timer, never woken) and Infinity as is (a lease that never ends);
//   PostgreSQL's grouped writes travel as JSON, where both would become null.
// - Text with a lone surrogate (half of a UTF-16 pair, lib/text.ts): SQLite and PostgreSQL
//   text replace it with U+FFFD, and PostgreSQL's JSON refuses it as "invalid input syntax
//   for type json". (A NUL is left to each backend, as before: SQLite stores it, and
//   PostgreSQL refuses it with a message that says so.)

import { StoreError } from "../errors.js";
import { isWellFormed } from "../lib/text.js";
import type { NewRun, Release } from "./store.js";

/** Why `run` cannot be created as given, or undefined. */
export function createRunProblem(run: NewRun): StoreError | undefined {
  return (
    notFinite("createRun", run.id, { "claimBy.leaseMs": run.claimBy?.leaseMs }) ??
    unstorable("createRun", run.id, {
      id: run.id,
      workflow: run.workflow,
      version: run.version,
      input: run.input,
      parentId: run.parentId,
      traceContext: run.traceContext,
      handedInputDigest: run.handedInputDigest,
      "claimBy.workerId": run.claimBy?.workerId,
    })
  );
}

/** Why `r` cannot be applied as given, or undefined. */
export function releaseProblem(r: Release): StoreError | undefined {
  return (
    notFinite("releaseRun", r.runId, {
      epoch: r.epoch,
      readyAt: r.readyAt,
      wakeAt: r.wakeAt,
      "heldFor.ms": r.heldFor?.ms,
    }) ??
    heldForProblem(r) ??
    unstorable("releaseRun", r.runId, {
      status: r.status,
      pausedFor: r.pausedFor,
      output: r.output,
      "heldFor.workerId": r.heldFor?.workerId,
      ...Object.fromEntries((r.failedKeys ?? []).map((key, i) => [`failedKeys[${i}]`, key])),
      ...Object.fromEntries((r.waitingFor ?? []).map((name, i) => [`waitingFor[${i}]`, name])),
    })
  );
}

/** Why Release's heldFor (finite, or notFinite said so) cannot be kept as given: a hold
 *  for no one (no workerId: neither backend holds the run) or for a negative time (no
 *  hold) is not what its caller meant; one beyond MAX_SAFE_INTEGER ms was kept for ever by
 *  SQLite and failed PostgreSQL's release with "out of range for type bigint". */
function heldForProblem(r: Release): StoreError | undefined {
  if (r.heldFor === undefined) return undefined;
  const { workerId, ms } = r.heldFor;
  const at = `releaseRun: run ${JSON.stringify(r.runId.slice(0, 80))}`;
  if (typeof workerId !== "string" || workerId === "") {
    return new StoreError(
      `${at}: heldFor.workerId is ${JSON.stringify(workerId) ?? "undefined"}; pass the id of the worker whose step body still runs (or no heldFor).`,
    );
  }
  if (typeof ms !== "number" || ms < 0 || ms > Number.MAX_SAFE_INTEGER) {
    return new StoreError(
      `${at}: heldFor.ms is ${JSON.stringify(ms) ?? "undefined"}; it must be a number of milliseconds from 0 to ${Number.MAX_SAFE_INTEGER} (the releasing worker's leaseMs).`,
    );
  }
  return undefined;
}

/** The error for the first of `fields` that is a number but not finite (null and absent
 *  fields are fine), or undefined. */
function notFinite(
  verb: string,
  runId: string,
  fields: Record<string, number | null | undefined>,
): StoreError | undefined {
  for (const name in fields) {
    const value = fields[name];
    if (value != null && !Number.isFinite(value)) {
      return new StoreError(
        `${verb}: run "${runId}": ${name} is ${String(value)}; it must be a finite number.`,
      );
    }
  }
  return undefined;
}

/** The error for the first of `fields` that is text with a lone surrogate. */
function unstorable(
  verb: string,
  runId: string,
  fields: Record<string, unknown>,
): StoreError | undefined {
  for (const name in fields) {
    const value = fields[name];
    if (typeof value !== "string" || isWellFormed(value)) continue;
    return new StoreError(
      `${verb}: run ${JSON.stringify(runId.slice(0, 80))}: ${name} contains a lone surrogate (half of a UTF-16 pair, e.g. an emoji cut in two), which no store can hold exactly; pass well-formed text.`,
    );
  }
  return undefined;
}

/** A fork's source deleted, and its id taken by another run, since the fork read it. */
export const FORK_SOURCE_REPLACED =
  "it was deleted while it was being forked (another run has taken its id since); nothing was forked";
