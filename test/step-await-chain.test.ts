// The await chain of an executed step (issue 13): a step without a timeout settles its
// attempt in two promises of its own (no async attempt awaiting an async race), waits for
// the cascade it was made in without beforeExecute's async function (when that is all it
// would wait for), and records without async record()/commit() around the committer's
// promise. Counted, not timed: the count holds on a loaded machine. Each promise also costs
// the async hook (call-scope.ts) and a microtask.

import { createHook } from "node:async_hooks";
import { describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";

const loop = workflow(
  { name: "chain-loop", version: "1" },
  async (ctx, input: { steps: number }): Promise<number> => {
    let sum = 0;
    for (let i = 0; i < input.steps; i++) sum += (await ctx.step("s", async () => ({ i }))).i;
    return sum;
  },
);

describe("an executed step's await chain", () => {
  it("makes at most 18 promises a step (29.7 before, 15.9 when written)", async () => {
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [loop] });
    let promises = 0;
    const hook = createHook({
      init(_id, type) {
        if (type === "PROMISE") promises++;
      },
    });
    async function promisesPerRun(steps: number, runs: number): Promise<number> {
      promises = 0;
      hook.enable();
      try {
        for (let i = 0; i < runs; i++) {
          const out = await (await engine.start(loop, { steps })).result();
          expect(out).toBe((steps * (steps - 1)) / 2 + 0);
        }
      } finally {
        hook.disable();
      }
      return promises / runs;
    }
    try {
      await promisesPerRun(20, 5); // warm-up: first-use paths
      const perStep = ((await promisesPerRun(20, 20)) - (await promisesPerRun(0, 20))) / 20;
      expect(perStep).toBeGreaterThan(10); // the hook saw the steps at all
      expect(perStep).toBeLessThanOrEqual(18);
    } finally {
      await engine.close();
    }
  });
});
