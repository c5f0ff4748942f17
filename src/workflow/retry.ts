// Retry policy and the retry decision, as pure functions of the recorded attempts: the
// attempt proposes (it failed with this error), the policy decides (again, when, or never).
// Defaults: 3 attempts, 1 s initial delay, factor 2, 1 min cap, full jitter. A
// RateLimitError's retryAfter is a floor on the delay.

import { FatalError, RateLimitError, SerializationError } from "../errors.js";
import { type Duration, toMs } from "../lib/duration.js";
import type { AttemptRecord, ErrorRecord } from "../store/store.js";

export interface RetryPolicy {
  maxAttempts: number;
  initialDelay: Duration;
  maxDelay: Duration;
  factor: number;
  jitter: boolean;
}

export const DEFAULT_RETRY: RetryPolicy = {
  maxAttempts: 3,
  initialDelay: "1s",
  maxDelay: "1m",
  factor: 2,
  jitter: true,
};

const DELAY_FIELDS = ["initialDelay", "maxDelay"] as const;
/** Delay strings toMs has read (a pure function of the string): this runs before every
 *  step, and the regular expression showed in a per-step profile. */
const readableDelays = new Set<string>();

/** The policy of a call: the defaults, then each layer's options over them. Every field is
 *  checked here, before any attempt runs: a duration found unreadable only when an attempt
 *  failed would fail the run with that attempt (and its spend) unrecorded. `where` prefixes
 *  the errors (the call and run, say). */
export function resolvePolicy(
  layers: ReadonlyArray<Partial<RetryPolicy> | undefined>,
  where: () => string = () => "",
): RetryPolicy {
  const p: RetryPolicy = { ...DEFAULT_RETRY };
  for (const layer of layers) {
    if (!layer) continue;
    for (const [k, v] of Object.entries(layer)) {
      if (v !== undefined) (p as unknown as Record<string, unknown>)[k] = v;
    }
  }
  // The prefix is built only for an error: this runs before every step.
  const at = () => {
    const w = where();
    return w === "" ? "" : `${w}: `;
  };
  if (!Number.isInteger(p.maxAttempts) || p.maxAttempts < 1) {
    throw new TypeError(`${at()}retry.maxAttempts must be an integer >= 1 (got ${p.maxAttempts})`);
  }
  if (typeof p.factor !== "number" || !(p.factor >= 1)) {
    throw new TypeError(`${at()}retry.factor must be a number >= 1 (got ${String(p.factor)})`);
  }
  for (const field of DELAY_FIELDS) {
    const value = p[field];
    if (typeof value === "string" && readableDelays.has(value)) continue;
    try {
      toMs(value, `retry.${field}`);
      if (typeof value === "string" && readableDelays.size < 64) readableDelays.add(value);
    } catch (err) {
      if (!(err instanceof TypeError)) throw err;
      throw new TypeError(`${at()}${err.message}`);
    }
  }
  return p;
}

/** Delay before attempt `attempt + 1`, after attempt `attempt` (1-based) failed. */
export function backoffMs(policy: RetryPolicy, attempt: number, random: () => number): number {
  const initial = toMs(policy.initialDelay, "retry.initialDelay");
  const max = toMs(policy.maxDelay, "retry.maxDelay");
  // A factor that overflows (1e308 ** 2, Infinity) grows the delay to the cap, never to
  // NaN: 0 * Infinity is NaN, and a NaN retry time cannot be recorded.
  const grown = initial === 0 ? 0 : initial * policy.factor ** Math.max(0, attempt - 1);
  const exp = Math.min(max, grown);
  return policy.jitter ? Math.floor(random() * exp) : exp;
}

/** retryAfter as ms from `now` (Duration, or a Date meaning "not before"). */
export function retryAfterMs(retryAfter: number | string | Date | undefined, now: number): number {
  if (retryAfter === undefined) return 0;
  if (retryAfter instanceof Date) {
    const at = retryAfter.getTime();
    if (Number.isNaN(at)) {
      throw new TypeError(
        "RateLimitError retryAfter: an invalid Date; pass a valid Date or a Duration",
      );
    }
    return Math.max(0, at - now);
  }
  return toMs(retryAfter, "RateLimitError retryAfter");
}

/** What to do next, given the attempts recorded so far (in order) for one call. */
export type NextAttempt =
  /** No attempt left: the call fails with the last attempt's error. */
  | { kind: "give-up"; error: ErrorRecord }
  /** Attempt `attempt` may start at `notBefore` (null: now). */
  | { kind: "attempt"; attempt: number; notBefore: number | null };

export function planNextAttempt(prior: readonly AttemptRecord[], policy: RetryPolicy): NextAttempt {
  const last = prior.at(-1);
  if (last && (last.retryAt === null || prior.length >= policy.maxAttempts)) {
    return { kind: "give-up", error: last.error };
  }
  return { kind: "attempt", attempt: prior.length + 1, notBefore: last?.retryAt ?? null };
}

/** The policy's verdict on a failed attempt: final, or retried at `retryAt`. */
export interface FailureVerdict {
  final: boolean;
  /** When the next attempt may start (null when final). */
  retryAt: number | null;
}

/** A failure that is final by its kind (whatever the attempts left): a FatalError (or one
 *  by its code, say from another copy of cairn), a value that cannot be stored, a budget. */
export function isFatalFailure(failure: unknown, error: ErrorRecord): boolean {
  return (
    failure instanceof FatalError ||
    failure instanceof SerializationError ||
    error.code === "FATAL" ||
    error.code === "CALLER_ABORTED" ||
    error.code === "BUDGET_EXCEEDED"
  );
}

export function judgeFailure(
  failure: unknown,
  error: ErrorRecord,
  attempt: number,
  policy: RetryPolicy,
  endedAt: number,
  random: () => number,
): FailureVerdict {
  const final = isFatalFailure(failure, error) || attempt >= policy.maxAttempts;
  if (final) return { final: true, retryAt: null };
  let delay = backoffMs(policy, attempt, random);
  if (failure instanceof RateLimitError || error.code === "RATE_LIMIT") {
    const floor = retryAfterMs((failure as Partial<RateLimitError>).retryAfter, endedAt);
    delay = Math.max(delay, floor);
  }
  return { final: false, retryAt: endedAt + delay };
}
