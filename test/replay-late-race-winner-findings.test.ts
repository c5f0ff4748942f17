// A Promise.race decided differently on replay (found by the generative replay test).
//
// A race begun after the workflow awaited a timer or I/O of its own (outside any cascade)
// between a branch that lives in microtasks (ctx.now() is synchronous) and a step: the first
// run can hand the step's outcome over only once its record is written (a store write), so
// the branch always wins. A replay found the step's record at once and handed it over in the
// next microtask, before the branch had finished: the step won, and the workflow went on
// with other data (sk-sqlite:647602 in test/replay-generative.test.ts: a child started with
// another input). Hand-overs the queue starts while idle now wait for an empty microtask queue.

import { describe, expect, it } from "vitest";
import { realClock, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { delay, replayAtGo } from "./helpers/replay-at-go.js";

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("a race begun after the workflow's own I/O keeps its winner on replay", async () => {
    const h = harness();
    let released = false;
    let bodies = 0;
    const wf = workflow({ name: "late-race", version: "1" }, async (ctx) => {
      // Workflow code's own I/O: the race below begins outside any cascade.
      await delay(1);
      const won = await Promise.race([
        (async () => {
          await null;
          ctx.now();
          await null;
          ctx.now();
          await null;
          await null;
          released = true;
          return "branch";
        })(),
        ctx
          .step("fetch", async () => {
            bodies++;
            // Cannot finish before the branch won (first run).
            while (!released) await delay(2);
            return "fetched";
          })
          .then(() => "step"),
      ]);
      await ctx.waitForEvent("go");
      return won;
    });
    expect(await replayAtGo(h.engine([wf], { clock: realClock }), wf)).toBe("branch");
    expect(bodies).toBe(1);
  });

  it("a late race's microtask branch beats a step whose body returns at once, on replay too", async () => {
    const h = harness();
    const winners: string[] = [];
    const wf = workflow({ name: "late-race-plain", version: "1" }, async (ctx) => {
      await delay(1);
      const won = await Promise.race([
        (async () => {
          for (let i = 0; i < 3; i++) {
            await null;
            ctx.now();
          }
          return "branch";
        })(),
        ctx.step("fetch", () => "fetched").then(() => "step"),
      ]);
      winners.push(won);
      await ctx.waitForEvent("go");
      return won;
    });
    expect(await replayAtGo(h.engine([wf], { clock: realClock }), wf)).toBe("branch");
    expect(winners).toEqual(["branch", "branch"]);
  });
});
