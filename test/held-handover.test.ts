// The held hand-over's verdict at a cascade's end (src/workflow/held-handover.ts), through
// its narrow interface to the Context: held while a call may still come, refused past
// replayStallMs with the workflow's own work pending, over otherwise.

import { describe, expect, it } from "vitest";
import { NonDeterminismError } from "../src/errors.js";
import { HeldHandover, type HeldHost } from "../src/workflow/held-handover.js";

function fakeRun(o: { busyMs: number; replayStallMs: number; exactWindows?: boolean }) {
  const failures: Error[] = [];
  let holds = 0;
  const delivery = {
    holding: false,
    idle: false,
    released: 3,
    hold() {
      holds++;
      this.holding = true;
    },
  };
  const run = {
    host: { runId: "r", replayStallMs: o.replayStallMs },
    delivery,
    journal: { exactWindows: o.exactWindows ?? true, intents: new Map() },
    busyForMs: () => o.busyMs,
    describePending: () => (o.busyMs > 0 ? "a timer" : undefined),
    halted: () => false,
    stopped: () => false,
    fail: (e: Error) => failures.push(e),
    cascadeOver: () => {},
  } as unknown as HeldHost;
  return { run, failures, holds: () => holds };
}

describe("held hand-over", () => {
  it("a cascade with nothing missing and no doubtful call is over at once", () => {
    const f = fakeRun({ busyMs: 500, replayStallMs: 1e9 });
    const held = new HeldHandover(f.run);
    expect(held.settle(false)).toBe(true);
    expect(f.holds()).toBe(0);
  });

  it("holds while a missing call may still come from the workflow's own work", () => {
    const f = fakeRun({ busyMs: 500, replayStallMs: 1e9 });
    const held = new HeldHandover(f.run);
    expect(held.settle(true)).toBe(false);
    expect(f.holds()).toBe(1);
    expect(f.failures).toEqual([]);
    held.stop();
  });

  it("a late call that took a held record is doubtful until the hold ends", () => {
    const f = fakeRun({ busyMs: 0, replayStallMs: 1e9 });
    const held = new HeldHandover(f.run);
    held.recordTaken("k#2", true);
    expect(held.doubtfulCall()).toBe(true);
    // No work of the workflow's own pending: the verdict comes, the doubt is over.
    expect(held.settle(false)).toBe(true);
    expect(held.doubtfulCall()).toBe(false);
  });

  it("no doubt without exact windows (a journal written before they were recorded)", () => {
    const f = fakeRun({ busyMs: 500, replayStallMs: 1e9, exactWindows: false });
    const held = new HeldHandover(f.run);
    held.recordTaken("k#2", true);
    expect(held.doubtfulCall()).toBe(false);
  });

  it("refuses past replayStallMs with that work still pending, naming the first late call", () => {
    const f = fakeRun({ busyMs: 500, replayStallMs: 0 });
    const held = new HeldHandover(f.run);
    held.recordTaken("k#2", true);
    held.recordTaken("k#3", true);
    expect(held.settle(false)).toBe(false);
    expect(f.holds()).toBe(0);
    expect(f.failures).toHaveLength(1);
    expect(f.failures[0]).toBeInstanceOf(NonDeterminismError);
    expect(f.failures[0]?.message).toContain('the call keyed "k#2"');
    expect(f.failures[0]?.message).toContain("Still pending: a timer.");
  });

  it("waiters for the verdict are woken together, and only once", async () => {
    const held = new HeldHandover(fakeRun({ busyMs: 0, replayStallMs: 1e9 }).run);
    const woken: number[] = [];
    const a = held.nextVerdict().then(() => woken.push(1));
    const b = held.nextVerdict().then(() => woken.push(2));
    held.wakeWaiters();
    await Promise.all([a, b]);
    expect(woken).toEqual([1, 2]);
    let late = false;
    void held.nextVerdict().then(() => {
      late = true;
    });
    await Promise.resolve();
    await Promise.resolve();
    expect(late).toBe(false);
    held.wakeWaiters();
  });
});
