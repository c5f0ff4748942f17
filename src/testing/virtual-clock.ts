// A clock that moves only when told: two days of sleep pass in one call. Timers (step
// timeouts, in-process backoffs, in-process waits) fire in time order as it advances, and
// engines using it are told to poll at once.

import type { Clock } from "../lib/clock.js";
import { type Duration, toMs } from "../lib/duration.js";
import { delayMs } from "../lib/timers.js";

export interface VirtualClock extends Clock {
  /** Moves time forward by `ms` (or a Duration string), firing due timers in order. */
  advance(by: Duration): Promise<void>;
  /** Moves time to `at` (never backwards). */
  set(at: number | Date): Promise<void>;
  /** Number of timers currently waiting on this clock. */
  pendingTimers(): number;
}

interface Timer {
  at: number;
  id: number;
  fire: () => void;
}

/** A finite time, else a TypeError: an invalid Date (NaN) made now() NaN for good, and no
 *  timer fired again (NaN compares false with every due time); Infinity did the same after
 *  firing every timer at once. */
function timeOf(at: number | Date, what: string): number {
  const ms = typeof at === "number" ? at : at.getTime();
  if (!Number.isFinite(ms)) {
    throw new TypeError(
      `${what}: expected a valid Date or a finite number of ms, got ${String(at)}`,
    );
  }
  return ms;
}

export function createVirtualClock(start: number | Date = Date.UTC(2026, 0, 1)): VirtualClock {
  let now = timeOf(start, "createVirtualClock()");
  let nextId = 0;
  const timers = new Set<Timer>();
  const listeners = new Set<() => void>();

  async function moveTo(target: number): Promise<void> {
    for (;;) {
      let due: Timer | undefined;
      for (const t of timers) {
        if (t.at <= target && (!due || t.at < due.at || (t.at === due.at && t.id < due.id)))
          due = t;
      }
      if (!due) break;
      timers.delete(due);
      now = Math.max(now, due.at);
      due.fire();
      // Let the woken code run (and register follow-up timers) before the next one.
      await new Promise<void>((r) => setImmediate(r));
    }
    now = Math.max(now, target);
    for (const fn of listeners) fn();
    await new Promise<void>((r) => setImmediate(r));
  }

  return {
    now: () => now,
    sleep(ms: number, signal?: AbortSignal): Promise<void> {
      return new Promise((resolve, reject) => {
        if (signal?.aborted) {
          reject(signal.reason);
          return;
        }
        // Any duration, as the real clock: no timer limit here, but NaN or a negative delay
        // is due at once (as setTimeout's) rather than never.
        const timer: Timer = {
          at: now + delayMs(ms),
          id: nextId++,
          fire: () => {
            signal?.removeEventListener("abort", onAbort);
            resolve();
          },
        };
        const onAbort = () => {
          timers.delete(timer);
          reject(signal?.reason);
        };
        signal?.addEventListener("abort", onAbort, { once: true });
        timers.add(timer);
      });
    },
    onAdvance(fn: () => void): () => void {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
    advance(by: Duration): Promise<void> {
      return moveTo(now + toMs(by, "clock.advance()"));
    },
    set(at: number | Date): Promise<void> {
      let target: number;
      try {
        target = timeOf(at, "clock.set()");
      } catch (err) {
        return Promise.reject(err);
      }
      return moveTo(target);
    },
    pendingTimers: () => timers.size,
  };
}
