// Only unref'd timers let a run suspend under a branch awaiting them (late-work.ts,
// holdsRunForMs): a timer unref'd and then ref'd again is a ref'd one, so the branch is busy,
// not blocked, and its call is made before the run suspends. (An attack that held.)

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

describe.each(BACKENDS)("%s: a timer ref'd again", (backend) => {
  const harness = useHarness(backend);

  it("keeps the run from suspending until it fires, so the branch's call is made", async () => {
    const h = harness();
    let released = false;
    const wf = workflow({ name: "ref-again", version: "1" }, async (ctx) => {
      const go = ctx.waitForEvent("go");
      await new Promise((r) => {
        const t = setTimeout(r, 300);
        t.unref();
        t.ref();
      });
      released = true;
      const b = await ctx.step("b", () => "b");
      await go;
      return b;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, undefined);
    await until(
      async () => (await engine.getSteps(run.id)).some((s) => s.key === "b"),
      "the branch's step is recorded",
    );
    expect(released).toBe(true);
    await until(async () => (await engine.getRun(run.id))?.status === "waiting", "the run waits");
    await engine.sendEvent(run.id, "go", 1);
    expect(await advanceUntil(h.clock, engine.handle(run.id).result(), 30_000)).toBe("b");
  });
});
