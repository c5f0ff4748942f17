// A ctx call made after its execution stopped (from a timer of the workflow's own that
// outlived it: an unref'd one, which no longer keeps a run from suspending, or any timer
// after the function returned) rejected with cairn's internal HaltedSignal, unhandled when
// the call was not awaited (`void ctx.step(...)` in a timer's callback): Node ends an
// embedding process on an unhandled rejection, with every run in it.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { strayRejections } from "./helpers/stray-rejections.js";

describe.each(BACKENDS)("%s: calls made after the execution stopped", (backend) => {
  const harness = useHarness(backend);
  const stray = strayRejections();

  it("an unref'd timer's unawaited call after the run suspended is no unhandled rejection", async () => {
    const h = harness();
    let fired = 0;
    const wf = workflow({ name: "unref-callback", version: "1" }, async (ctx) => {
      const t = setTimeout(() => {
        fired++;
        void ctx.step("late", () => "x");
      }, 300);
      t.unref();
      const go = await ctx.waitForEvent("go");
      clearTimeout(t);
      return go.timedOut ? "timed out" : "done";
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, undefined);
    await until(async () => (await engine.getRun(run.id))?.status === "waiting", "the run waits");
    await until(() => fired === 1, "the timer fires after the run suspended");
    await new Promise((r) => setTimeout(r, 50));
    expect(stray).toEqual([]);
    await engine.sendEvent(run.id, "go", 1);
    expect(await advanceUntil(h.clock, engine.handle(run.id).result(), 30_000)).toBe("done");
    // The abandoned branch's call was never made: nothing of it is recorded.
    expect((await engine.getSteps(run.id)).map((s) => s.key)).toEqual(["go"]);
  });
});
