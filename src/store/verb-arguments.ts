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
// And what the verbs that read a page (listRuns, claimRuns, listChildrenOfCanceled,
// readStream) refuse by name: a count (a `limit`, a position) that is not a finite number.
// SQLite refused NaN, Infinity and 2^64 as a "datatype mismatch", PostgreSQL as "invalid
// input syntax for type bigint", and -Infinity listed none; a string or null was taken as a
// number by one backend and not the other. A finite count is bound alike by both (pageCount).

import { StoreError } from "../errors.js";
import { isWellFormed } from "../lib/text.js";
import type { NewRun, Release, RunFilter } from "./store.js";

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

/** The error for the first of `fields` (counts `verb` takes: a page's limit, a position)
 *  that is not a finite number (undefined is fine unless the field is `required`), or
 *  undefined. `give` says what to pass instead. */
export function countProblem(
  verb: string,
  fields: Record<string, unknown>,
  give: string,
  required: readonly string[] = [],
): StoreError | undefined {
  for (const name in fields) {
    const value = fields[name];
    if (value === undefined && !required.includes(name)) continue;
    if (typeof value === "number" && Number.isFinite(value)) continue;
    return new StoreError(`${verb}: ${name} is ${shownCount(value)}; ${give}.`);
  }
  return undefined;
}

function shownCount(value: unknown): string {
  if (typeof value === "number") return String(value);
  if (typeof value === "string") return `the string ${JSON.stringify(value.slice(0, 40))}`;
  return value === null || value === undefined ? String(value) : `a ${typeof value}`;
}

/** A finite count (countProblem let it through) as both backends bind it: a fraction
 *  floored, below 0 as 0, above Number.MAX_SAFE_INTEGER as that (past any count a store
 *  holds; 2^64 was out of range for PostgreSQL's bigint and a mismatch to SQLite). */
export function pageCount(n: number): number {
  return Math.min(Number.MAX_SAFE_INTEGER, Math.max(0, Math.floor(n)));
}

/** Why listRuns cannot list by `filter` as given, or undefined. */
export function listRunsProblem(filter: RunFilter): StoreError | undefined {
  return countProblem(
    "listRuns",
    { limit: filter.limit },
    "give a finite number of runs (0 or more), or leave limit out to list every run",
  );
}

/** Why claimRuns cannot claim as asked, or undefined (a lease of NaN ms was stored by
 *  SQLite as no lease end at all). */
export function claimRunsProblem(p: { limit: number; leaseMs: number }): StoreError | undefined {
  return countProblem(
    "claimRuns",
    { limit: p.limit, leaseMs: p.leaseMs },
    "give a finite number (limit: the most runs to claim; leaseMs: the lease in milliseconds)",
    ["limit", "leaseMs"],
  );
}

/** Why listChildrenOfCanceled cannot list as asked, or undefined. */
export function childrenOfCanceledProblem(p: { limit: number }): StoreError | undefined {
  return countProblem(
    "listChildrenOfCanceled",
    { limit: p.limit },
    "give a finite number of runs (1 or more)",
    ["limit"],
  );
}

/** Why readStream cannot read as asked, or undefined. */
export function readStreamProblem(p: {
  runId: string;
  from: number;
  limit?: number;
}): StoreError | undefined {
  return countProblem(
    `readStream: run ${JSON.stringify(String(p.runId).slice(0, 80))}`,
    { from: p.from, limit: p.limit },
    "give a finite number (from: the first chunk's offset, 0 or more; limit: the most chunks, or leave it out for 1,000)",
    ["from"],
  );
}
