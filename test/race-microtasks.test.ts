// A step raced against the workflow's own chain of microtasks: in the first execution the
// chain wins (the step's outcome waits for its record to be durable); a replay hands the
// recorded outcome over (the hand-over round's shortcut, b1b1d7b) and must let the same
// chain win, whatever its length, or the replay takes another path than the first run.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

async function chain(n: number): Promise<string> {
  for (let i = 0; i < n; i++) await null;
  return `chain${n}`;
}

describe.each(BACKENDS)("a step raced against microtasks, replayed (%s)", (backend) => {
  const harness = useHarness(backend);

  it("the chain wins in the replay as in the first execution, for chains of 1 to 2000", async () => {
    const h = harness();
    const lengths = [1, 3, 10, 50, 300, 2000];
    const seen: string[][] = [];
    const wf = workflow({ name: "race-micro", version: "1" }, async (ctx) => {
      const winners: string[] = [];
      for (const n of lengths) {
        winners.push(await Promise.race([ctx.step(`s${n}`, () => `step${n}`), chain(n)]));
      }
      seen.push(winners);
      await ctx.waitForEvent("go");
      const recorded = await ctx.step("winners", () => winners);
      return { winners, recorded };
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run suspends");
    await e.sendEvent(run.id, "go");
    const out = await run.result();
    expect(seen.length).toBe(2);
    expect(seen[1]).toEqual(seen[0]);
    expect(out.recorded).toEqual(out.winners);
  });
});
