// h6: adversarial review of ordered delivery's idle hand-overs (delivery.ts) and the
// late-call check's places (late-work.ts, context.ts madeAfter).

import { readFile } from "node:fs/promises";
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
  // The same with a branch that alternates ticks and microtasks twice: a fixed number of
  // microtask/nextTick hops before a hand-over (the idle queue's wait) is outrun by a branch
  // that alternates once more, begun late (after the workflow's own file read) or in a
  // cascade. A hand-over now waits for a round in which the workflow code created nothing.
  it.each([
    ["late", "after a file read of its own"],
    ["cascade", "after a step"],
  ])(
    "a race begun %s (%s) between a step and a tick/microtask/tick/microtask branch keeps its winner on replay",
    async (where) => {
      const h = harness();
      const winners: string[] = [];
      const wf = workflow({ name: `race-tmtm-${where}`, version: "1" }, async (ctx) => {
        if (where === "late") await readFile(new URL(import.meta.url));
        else await ctx.step("pre", () => 1);
        const branch = new Promise<string>((resolve) =>
          process.nextTick(() =>
            queueMicrotask(() => process.nextTick(() => queueMicrotask(() => resolve("branch")))),
          ),
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
    },
  );
});
