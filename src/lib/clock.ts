// Time is injected: the real clock in production, a virtual one in tests (cairn/testing),
// so two days of sleep can pass instantly without any code reading Date.now() directly.

import { setLongTimeout } from "./timers.js";

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolves after `ms` of this clock's time; rejects with the signal's reason if aborted. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /** Calls `fn` whenever time jumps forward (virtual clocks); returns an unsubscribe. */
  onAdvance?(fn: () => void): () => void;
  /** This clock reads the system's time (`realClock` says so): a store with a clock of its
   *  own (PostgreSQL) then uses the database's clock, so that workers on hosts with skewed
   *  clocks agree on leases and timers. Any other clock's reading is the store's time. */
  readonly system?: boolean;
}

export const realClock: Clock = {
  system: true,
  now: () => Date.now(),
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      // Any duration: a 30-day sleep is one chain of timers, not a wake-up every ms.
      const cancel = setLongTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      const onAbort = () => {
        cancel();
        reject(signal?.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  },
};

/** `clock` read `aheadMs` later (earlier when negative): the store's clock as this host
 *  estimates it. Durations (sleep) are the same on both. */
export function shiftedClock(clock: Clock, aheadMs: number): Clock {
  if (aheadMs === 0) return clock;
  return {
    now: () => clock.now() + aheadMs,
    sleep: (ms, signal) => clock.sleep(ms, signal),
    ...(clock.onAdvance && { onAdvance: (fn: () => void) => clock.onAdvance!(fn) }),
    ...(clock.system !== undefined && { system: clock.system }),
  };
}
