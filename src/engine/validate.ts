// Checks of what users hand the engine, shared so that every verb refuses the same things
// in the same words: run ids (start, fork, children), budgets (start, resume), event names,
// cancel reasons, and the numeric engine options. Each throws a TypeError naming the call
// and the field; nothing is recorded.

import { looksLikeEnvelope } from "../codec/stored-text.js";
import { amountNameProblem } from "../lib/amounts.js";
import { MAX_DURATION_MS } from "../lib/duration.js";
import { checkText, quoteGiven } from "../lib/text.js";
import { isCallName } from "../workflow/context.js";
import type { EngineOptions } from "./engine.js";

const RUN_ID = /^\S.{0,255}$/s;

/** A run id: 1-256 characters, not starting with whitespace, storable text. */
export function checkRunId(id: unknown, verb: string): asserts id is string {
  if (typeof id !== "string" || !RUN_ID.test(id)) {
    throw new TypeError(
      `${verb}: run id ${JSON.stringify(id)} is invalid; use 1-256 characters, not starting with a space`,
    );
  }
  checkText(id, `${verb}: run id`);
}

/** Budget limits: an object of finite amounts >= 0 under storable names. */
export function checkBudget(budget: unknown, verb: string): void {
  if (budget === undefined) return;
  if (typeof budget !== "object" || budget === null || Array.isArray(budget)) {
    throw new TypeError(
      `${verb}: budget must be an object of named amounts, e.g. { usd: 5, tokens: 100000 }`,
    );
  }
  for (const [name, v] of Object.entries(budget)) {
    checkText(name, `${verb}: budget name`);
    const nameProblem = amountNameProblem(name);
    if (nameProblem) throw new TypeError(`${verb}: budget ${nameProblem}`);
    if (typeof v !== "number" || !Number.isFinite(v) || v < 0) {
      throw new TypeError(
        `${verb}: budget "${name}" must be a finite number >= 0 (got ${typeof v === "string" ? JSON.stringify(v) : String(v)})`,
      );
    }
  }
}

/** An event name a user sends: 1-200 characters, not in the reserved "cairn." space. */
export function checkEventName(name: unknown, runId: string): asserts name is string {
  if (
    typeof name !== "string" ||
    name.length === 0 ||
    name.length > 200 ||
    name.startsWith("cairn.")
  ) {
    throw new TypeError(
      `sendEvent(): event name ${quoteGiven(name)} for run "${runId}" is invalid; use 1-200 characters not starting with "cairn."`,
    );
  }
  checkText(name, `sendEvent(): event name for run "${runId}"`);
  // A wait's name is a call name: an event no wait can be named for would be stored,
  // count against maxPendingEventsPerRun, and never be delivered.
  if (!isCallName(name)) {
    throw new TypeError(
      `sendEvent(): event name ${quoteGiven(name)} for run "${runId}" is one no wait can have, so it would never be delivered; names have no "#" and do not start with "@" or a space`,
    );
  }
}

/** A cancel reason: text a person reads, stored with the run. */
export function checkCancelReason(reason: unknown, runId: string): asserts reason is string {
  if (typeof reason !== "string") {
    throw new TypeError(`cancel(): the reason for run "${runId}" must be a string`);
  }
  checkText(reason, `cancel(): the reason for run "${runId}"`);
  if (looksLikeEnvelope(reason)) {
    throw new TypeError(
      `cancel(): the reason for run "${runId}" begins with "cairn:enc:", which marks an encrypted payload in the store (it would be read back as one); reword it`,
    );
  }
}

type NumericOption =
  | "concurrency"
  | "leaseMs"
  | "heartbeatMs"
  | "pollIntervalMs"
  | "closeGraceMs"
  | "maxPayloadBytes"
  | "inProcessRetryMs"
  | "abortGraceMs"
  | "replayStallMs";

/** What each numeric option must be, and what it is for (said in the error). */
const NUMERIC: Record<NumericOption, { whole: boolean; min: number; what: string }> = {
  concurrency: { whole: true, min: 1, what: "how many runs this process executes at once" },
  // At least 1 ms: PostgreSQL keeps leases in whole milliseconds, and a lease below 0.5 ms
  // rounded to none there (every claim expired at once).
  leaseMs: { whole: false, min: 1, what: "how long a claim on a run lasts" },
  heartbeatMs: { whole: false, min: Number.MIN_VALUE, what: "how often leases are renewed" },
  pollIntervalMs: {
    whole: false,
    min: Number.MIN_VALUE,
    what: "how often the store is polled for runnable runs",
  },
  closeGraceMs: { whole: false, min: 0, what: "how long close() waits for running steps" },
  maxPayloadBytes: { whole: true, min: 1, what: "the largest encoded value a run may store" },
  inProcessRetryMs: {
    whole: false,
    min: 0,
    what: "the longest retry backoff waited in process",
  },
  // Checked as the others: unchecked, "1s" or NaN made the grace about 1 ms and a negative
  // replayStallMs judged every late call of a replay a divergence at once.
  abortGraceMs: {
    whole: false,
    min: Number.MIN_VALUE,
    what: "how long an aborted attempt may take to stop and report its spend",
  },
  replayStallMs: {
    whole: false,
    min: Number.MIN_VALUE,
    what: "how long a replay waits for a call the first run made late",
  },
};

/** Refuses numeric engine options with which nothing would ever run (0, negative, NaN). */
export function checkEngineOptions(options: EngineOptions): void {
  for (const [name, rule] of Object.entries(NUMERIC) as Array<
    [NumericOption, (typeof NUMERIC)[NumericOption]]
  >) {
    const v = options[name];
    if (v === undefined) continue;
    // A time span (not a count) stays within MAX_DURATION_MS: a lease of 1e19 ms was
    // accepted, then every start() on PostgreSQL failed (its lease end overflowed bigint).
    const ok =
      typeof v === "number" &&
      Number.isFinite(v) &&
      v >= rule.min &&
      (!rule.whole || Number.isInteger(v)) &&
      (rule.whole || v <= MAX_DURATION_MS);
    if (!ok) {
      const must = rule.whole
        ? `a whole number >= ${rule.min}`
        : rule.min >= 1
          ? `a finite number of milliseconds >= ${rule.min}, at most 100,000 years`
          : rule.min > 0
            ? "a finite number of milliseconds > 0, at most 100,000 years"
            : "a finite number of milliseconds >= 0, at most 100,000 years";
      throw new TypeError(
        `createEngine(): ${name} must be ${must} (got ${typeof v === "string" ? JSON.stringify(v) : String(v)}); it is ${rule.what}`,
      );
    }
  }
}
