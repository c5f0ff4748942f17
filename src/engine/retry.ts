// Retry policy and backoff. Defaults (API.md): 3 attempts, 1 s initial delay, factor 2,
// 1 min cap, full jitter. A RateLimitError's retryAfter is a floor on the delay.

import { type Duration, toMs } from "../lib/duration.js";

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

export function resolvePolicy(...layers: Array<Partial<RetryPolicy> | undefined>): RetryPolicy {
  const p: RetryPolicy = { ...DEFAULT_RETRY };
  for (const layer of layers) {
    if (!layer) continue;
    for (const [k, v] of Object.entries(layer)) {
      if (v !== undefined) (p as unknown as Record<string, unknown>)[k] = v;
    }
  }
  if (!Number.isInteger(p.maxAttempts) || p.maxAttempts < 1) {
    throw new TypeError(`retry.maxAttempts must be an integer >= 1 (got ${p.maxAttempts})`);
  }
  if (!(p.factor >= 1)) throw new TypeError(`retry.factor must be >= 1 (got ${p.factor})`);
  return p;
}

/** Delay before attempt `attempt + 1`, after attempt `attempt` (1-based) failed. */
export function backoffMs(policy: RetryPolicy, attempt: number, random: () => number): number {
  const initial = toMs(policy.initialDelay, "retry.initialDelay");
  const max = toMs(policy.maxDelay, "retry.maxDelay");
  const exp = Math.min(max, initial * policy.factor ** Math.max(0, attempt - 1));
  return policy.jitter ? Math.floor(random() * exp) : exp;
}

/** retryAfter as ms from `now` (Duration, or a Date meaning "not before"). */
export function retryAfterMs(retryAfter: number | string | Date | undefined, now: number): number {
  if (retryAfter === undefined) return 0;
  if (retryAfter instanceof Date) return Math.max(0, retryAfter.getTime() - now);
  return toMs(retryAfter, "RateLimitError retryAfter");
}
