// The virtual clock takes any duration the real one does (there is no timer limit to hit
// here), fires long sleeps exactly when they are due, and treats NaN as due at once.

import { describe, expect, it } from "vitest";
import { createVirtualClock } from "./virtual-clock.js";

const DAY = 86_400_000;

describe("createVirtualClock", () => {
  it("sleeps of 25 and 30 days end when due, not before", async () => {
    const clock = createVirtualClock(0);
    const ended: string[] = [];
    void clock.sleep(25 * DAY).then(() => ended.push("25d"));
    void clock.sleep(30 * DAY).then(() => ended.push("30d"));
    await clock.advance(25 * DAY - 1);
    expect(ended).toEqual([]);
    await clock.advance(1);
    expect(ended).toEqual(["25d"]);
    await clock.advance(5 * DAY - 1);
    expect(ended).toEqual(["25d"]);
    await clock.advance(1);
    expect(ended).toEqual(["25d", "30d"]);
    expect(clock.pendingTimers()).toBe(0);
  });

  it("a NaN delay is due at once instead of never", async () => {
    const clock = createVirtualClock(0);
    let ended = false;
    void clock.sleep(Number.NaN).then(() => {
      ended = true;
    });
    await clock.advance(0);
    expect(ended).toBe(true);
    expect(clock.pendingTimers()).toBe(0);
  });
});
