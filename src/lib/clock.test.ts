// realClock.sleep for durations past setTimeout's limit (2^31-1 ms, about 24.8 days), which
// Node turns into 1 ms. Fake timers model that limit the way Node applies it, so these
// tests count timers and fire them by hand instead of waiting for anything.

import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { realClock } from "./clock.js";
import { MAX_TIMER_MS, setLongTimeout } from "./timers.js";

const DAY = 86_400_000;

describe("realClock.sleep and setLongTimeout", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  function track(p: Promise<unknown>): { settled: boolean } {
    const state = { settled: false };
    p.then(
      () => {
        state.settled = true;
      },
      () => {
        state.settled = true;
      },
    );
    return state;
  }

  it("a 25-day sleep does not end early, and ends on time", async () => {
    const s = track(realClock.sleep(25 * DAY));
    await vi.advanceTimersByTimeAsync(1_000);
    expect(s.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(25 * DAY - 1_000 - 1);
    expect(s.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(s.settled).toBe(true);
  });

  it("a 30-day sleep holds one timer at a time and fires each hop once (no spinning)", async () => {
    let armed = 0;
    const real = globalThis.setTimeout;
    const spy = vi.spyOn(globalThis, "setTimeout").mockImplementation(((
      fn: () => void,
      ms?: number,
    ) => {
      armed++;
      return real(fn, ms);
    }) as typeof setTimeout);
    try {
      const s = track(realClock.sleep(30 * DAY));
      await vi.advanceTimersByTimeAsync(100);
      expect(vi.getTimerCount()).toBe(1);
      expect(armed).toBe(1);
      await vi.advanceTimersByTimeAsync(30 * DAY);
      expect(s.settled).toBe(true);
      // 30 days is two hops of at most MAX_TIMER_MS.
      expect(armed).toBe(Math.ceil((30 * DAY) / MAX_TIMER_MS));
    } finally {
      spy.mockRestore();
    }
  });

  it("an abort cancels the whole chain", async () => {
    const ac = new AbortController();
    const p = realClock.sleep(60 * DAY, ac.signal);
    p.catch(() => {});
    await vi.advanceTimersByTimeAsync(MAX_TIMER_MS + 5);
    expect(vi.getTimerCount()).toBe(1);
    ac.abort(new Error("stop"));
    await expect(p).rejects.toThrow("stop");
    expect(vi.getTimerCount()).toBe(0);
  });

  it("NaN and negative delays fire at once; cancel stops a pending chain", async () => {
    const fired: string[] = [];
    setLongTimeout(() => fired.push("nan"), Number.NaN);
    setLongTimeout(() => fired.push("neg"), -5);
    const cancel = setLongTimeout(() => fired.push("long"), 40 * DAY);
    await vi.advanceTimersByTimeAsync(0);
    expect(fired).toEqual(["nan", "neg"]);
    await vi.advanceTimersByTimeAsync(MAX_TIMER_MS + 1);
    cancel();
    await vi.advanceTimersByTimeAsync(40 * DAY);
    expect(fired).toEqual(["nan", "neg"]);
  });
});
