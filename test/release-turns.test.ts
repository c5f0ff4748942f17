// The turns of the event loop a run takes, counted as the setImmediate resources it makes
// (async_hooks): an execution lets the loop turn before its release only if it has not
// already (execution.ts: a run living in microtasks alone, as a run of no step on SQLite,
// would starve timers), and a run whose step records the Committer flushed in turns of
// their own has. A 20-step run: 20 flushes, its create, its release (22; 23 before). A run
// that wrote nothing through the Committer still turns the loop before its release.

import { createHook } from "node:async_hooks";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const loop = workflow(
  { name: "turns", version: "1" },
  async (ctx, input: { steps: number }): Promise<number> => {
    let sum = 0;
    for (let i = 0; i < input.steps; i++) sum += (await ctx.step("s", async () => ({ i }))).i;
    return sum;
  },
);

function immediatesCounter(): { count: () => number; on: (v: boolean) => void } {
  let n = 0;
  let on = false;
  const hook = createHook({
    init(_id, type) {
      if (on && type === "Immediate") n++;
    },
  }).enable();
  cleanups.push(() => {
    hook.disable();
  });
  return {
    count: () => n,
    on: (v) => {
      on = v;
    },
  };
}

describe("event-loop turns per run (counted)", () => {
  it("a 20-step run turns the loop for its flushes, its create and its release only", async () => {
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [loop] });
    cleanups.push(() => engine.close());
    for (let i = 0; i < 3; i++) await (await engine.start(loop, { steps: 20 })).result();
    const c = immediatesCounter();
    const runs = 5;
    c.on(true);
    for (let i = 0; i < runs; i++) {
      expect(await (await engine.start(loop, { steps: 20 })).result()).toBe(190);
    }
    c.on(false);
    expect(c.count() / runs).toBe(22);
  });

  it("a run of no step, not created with its release, still turns the loop before it", async () => {
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [loop] });
    cleanups.push(() => engine.close());
    // A run started under a given id is created claimed, then released: no folded start.
    await (await engine.start(loop, { steps: 0 }, { id: "warm" })).result();
    const c = immediatesCounter();
    c.on(true);
    expect(await (await engine.start(loop, { steps: 0 }, { id: "zero" })).result()).toBe(0);
    c.on(false);
    // Its create, the turn before its release, its release.
    expect(c.count()).toBe(3);
  });
});
