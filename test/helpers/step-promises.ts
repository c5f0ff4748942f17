// The promise census of an executed step (issue 13) that step-at-once and
// step-hot-path-promises hold at their bounds: a loop of steps, and the promises an async hook
// sees made per step of it. A count, not a time: it holds on a loaded machine.

import { createHook } from "node:async_hooks";
import { expect } from "vitest";
import { type Engine, workflow } from "../../src/index.js";

/** A workflow `name`@1 summing `steps` steps, all named "s" (keys s, s#2, ...), each
 *  returning its index. */
export function stepLoop(name: string) {
  return workflow(
    { name, version: "1" },
    async (ctx, input: { steps: number }): Promise<number> => {
      let sum = 0;
      for (let i = 0; i < input.steps; i++) sum += (await ctx.step("s", async () => ({ i }))).i;
      return sum;
    },
  );
}

/** The promises made per executed step of `loop` on `engine`: those of 20 runs of 20 steps
 *  less those of 20 runs of none, per step, after a warm-up of 5 runs (first-use paths:
 *  statements prepared, imports). Each run's sum is checked. */
export async function promisesPerStep(
  engine: Engine,
  loop: ReturnType<typeof stepLoop>,
): Promise<number> {
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
        expect(await (await engine.start(loop, { steps })).result()).toBe(
          (steps * (steps - 1)) / 2 + 0, // +0: not -0 for 0 steps
        );
      }
    } finally {
      hook.disable();
    }
    return promises / runs;
  }
  await promisesPerRun(20, 5); // warm-up
  return ((await promisesPerRun(20, 20)) - (await promisesPerRun(0, 20))) / 20;
}
