// The replay's JavaScript per recorded step (issue 13: resume within 2x reading the rows raw).
// - A replayed step's hand-over begins at the last step of delivery.ts's round when the
//   cascade before it left nothing of the workflow's own in the tick and microtask queues:
//   2 fewer asynchronous resources per replayed step (each costs the async hook, and a tick or
//   a microtask). A count, not a time: it holds on a loaded machine.
// - That shortcut is not taken after a cascade that queued a tick of the workflow's own: a
//   reaction the tick sets running, made before the cascade ended (so no resource is made
//   when it runs), still runs before the next recorded outcome is handed over.

import { createHook } from "node:async_hooks";
import { describe, expect, it } from "vitest";
import { createEngine, realClock, sqliteStore, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { replayAtGo } from "./helpers/replay-at-go.js";
import { until } from "./helpers/sqlite.js";

const loop = workflow(
  { name: "replay-loop", version: "1" },
  async (ctx, input: { steps: number }): Promise<number> => {
    let sum = 0;
    for (let i = 0; i < input.steps; i++) sum += (await ctx.step("s", async () => ({ i }))).i;
    const ev = await ctx.waitForEvent<number>("go");
    return sum + (ev.timedOut ? 0 : ev.payload);
  },
);

describe("asynchronous resources per replayed step", () => {
  it("a replayed step makes at most 4.5 (6 before: 2 promises, 2 microtasks, 2 ticks)", async () => {
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [loop] });
    let resources = 0;
    const hook = createHook({
      init() {
        resources++;
      },
    });
    const waiting = async (steps: number) => {
      const id = (await engine.start(loop, { steps })).id;
      await until(async () => (await engine.getRun(id))?.status === "waiting", "the run waits");
      return id;
    };
    /** Resources made by resuming a run of `steps` recorded steps to its end. */
    const resume = async (steps: number): Promise<number> => {
      const id = await waiting(steps);
      resources = 0;
      hook.enable();
      try {
        await engine.sendEvent(id, "go", 1);
        expect(await engine.handle(id).result()).toBe((steps * (steps - 1)) / 2 + 1);
      } finally {
        hook.disable();
      }
      return resources;
    };
    try {
      await resume(50); // warm-up: first-use paths (statements prepared, imports)
      const steps = 400;
      let perStep = 0;
      for (let i = 0; i < 3; i++) perStep += ((await resume(steps)) - (await resume(0))) / steps;
      perStep /= 3;
      expect(perStep).toBeGreaterThan(3); // the hook saw the replayed steps at all
      expect(perStep).toBeLessThanOrEqual(4.5);
    } finally {
      await engine.close();
    }
  });
});

describe.each(BACKENDS)("%s: the hand-over's shortcut", (backend) => {
  const harness = useHarness(backend);

  // The cascade of "pre" queues a tick that resolves a promise whose reaction was made in
  // that cascade: when the tick runs, nothing new is made. The first run hands "a" over once
  // its record is written, long after: the branch wins. A replay whose hand-over of "a" began
  // at the round's last step (queued as the cascade ended, before the workflow's tick ran)
  // settled "a" before that reaction ran: the step won, and the run returned another value.
  it("a reaction a tick of the cascade sets running keeps its race against the next recorded step on replay", async () => {
    const h = harness();
    const winners: string[] = [];
    const wf = workflow({ name: "tick-reaction-race", version: "1" }, async (ctx) => {
      await ctx.step("pre", () => 1);
      const branch = new Promise<void>((resolve) => process.nextTick(resolve)).then(() => "branch");
      const won = await Promise.race([ctx.step("a", () => "step"), branch]);
      winners.push(won);
      await ctx.waitForEvent("go");
      return won;
    });
    expect(await replayAtGo(h.engine([wf], { clock: realClock }), wf)).toBe("branch");
    expect(winners).toEqual(["branch", "branch"]);
  });
});
