// The shared rate limiter a model call passes before it reaches the provider. Its state is
// in the store (acquireRate / settleRate / blockRate), so every run of every worker on that
// store draws from one window per provider and model, and a 429 one run meets blocks the
// others until the provider's Retry-After: a fleet backs off together.
//
// Waiting never holds a worker slot for long: a wait up to `maxInProcessWaitMs` (in all,
// per call) is slept in process; a longer one ends the call's step with "throttled until
// T", and the model wrapper then sleeps durably (ctx.sleepUntil), which releases the run
// like a long retry backoff does, before it asks again under the next key.

import type { Clock, Store } from "../index.js";
import { MAX_DURATION_MS } from "../lib/duration.js";

/** Limits of one provider and model, per rolling minute (shared by the whole fleet). */
export interface ModelLimits {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
}

export type Admission = { granted: true } | { granted: false; until: number };

export class SharedLimiter {
  constructor(
    private readonly store: () => Promise<Store>,
    private readonly clock: Clock,
    private readonly maxInProcessWaitMs: number,
  ) {}

  /** Takes one request and `tokens` from `key`'s window, waiting in process while the wait
   *  is short; otherwise says until when the caller should sleep. */
  async admit(
    key: string,
    limits: ModelLimits,
    tokens: number,
    grantId: string,
    signal: AbortSignal,
  ): Promise<Admission> {
    const store = await this.store();
    let waited = 0;
    for (;;) {
      const r = await store.acquireRate({ key, grantId, tokens, limits });
      if (r.granted) return r;
      // A block longer than cairn schedules (or not a number) is slept as the longest
      // one: ctx.sleepUntil refuses a time past what a Date holds.
      const waitMs = Number.isFinite(r.waitMs)
        ? Math.min(Math.max(0, r.waitMs), MAX_DURATION_MS)
        : MAX_DURATION_MS;
      if (waited + waitMs > this.maxInProcessWaitMs) {
        return { granted: false, until: this.clock.now() + waitMs };
      }
      waited += waitMs;
      await this.clock.sleep(waitMs, signal);
    }
  }

  async settle(key: string, grantId: string, tokens: number): Promise<void> {
    await (await this.store()).settleRate({ key, grantId, tokens });
  }

  /** A provider said 429: every acquirer of `key` waits `forMs`. */
  async block(key: string, forMs: number): Promise<void> {
    await (await this.store()).blockRate({ key, forMs });
  }
}
