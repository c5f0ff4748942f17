// h6: adversarial review of ordered delivery's idle hand-overs (delivery.ts) and the
// late-call check's places (late-work.ts, context.ts madeAfter).

import { describe, expect, it } from "vitest";
import { realClock, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

describe.each(BACKENDS)("%s: h6 findings", (backend) => {
  const harness = useHarness(backend);

  // A race begun inside a cascade (after a step) between a step and a branch that lives in
  // a process.nextTick then a microtask (no timer, no I/O: deterministic code). The first
  // run hands the step's outcome over only once its record is written, so the branch wins.
  // A replay found the record at once; the hand-over that follows the cascade's end (a
  // microtask queued from the cascade's closing nextTick) ran before the microtask the
  // workflow's own nextTick queued: the step won, and the run returned another value.
  it("a race begun in a cascade, a nextTick-then-microtask branch against a step, keeps its winner on replay", async () => {
    const h = harness();
    const winners: string[] = [];
    const wf = workflow({ name: "cascade-race-tick", version: "1" }, async (ctx) => {
      await ctx.step("pre", () => 1);
      const branch = new Promise<string>((resolve) =>
        process.nextTick(() => queueMicrotask(() => resolve("branch"))),
      );
      const won = await Promise.race([ctx.step("a", () => "step"), branch]);
      winners.push(won);
      await ctx.waitForEvent("go");
      return won;
    });
    const e = h.engine([wf], { clock: realClock });
    const run = await e.start(wf, undefined);
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits");
    await e.sendEvent(run.id, "go");
    const out = await run.result();
    expect(winners[0]).toBe("branch");
    expect(winners).toEqual(winners.map(() => "branch"));
    expect(out).toBe("branch");
  });
});
