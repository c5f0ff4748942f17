// A branch awaiting an unref'd timer (which no longer keeps a run from suspending) is
// abandoned when the run suspends. When the timer fires later, the branch's ctx call is
// refused with cairn's internal HaltedSignal. The call's own promise was marked handled
// (calls-after-halt-findings), but the branch's async function, awaiting it, rethrew it:
// a branch started before a wait and awaited after it (`const p = branch(); await
// ctx.waitForEvent(..); await p`), or an async timer callback, had nobody listening yet,
// and Node ends an embedding process on that unhandled rejection, with every run in it.
// A call made after its execution stopped now never settles: the execution is over, and
// nothing the code does with the answer can matter.

import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { strayRejections } from "./helpers/stray-rejections.js";

describe.each(BACKENDS)("%s: a branch abandoned by a suspension", (backend) => {
  const harness = useHarness(backend);
  const stray = strayRejections();

  it("a branch awaited after the wait, awaiting its call once the run suspended, leaves no unhandled rejection", async () => {
    const h = harness();
    let woke = 0;
    const wf = workflow({ name: "abandoned-branch", version: "1" }, async (ctx) => {
      const branch = (async () => {
        await sleep(300, undefined, { ref: false });
        woke++;
        return ctx.step("late", () => "x");
      })();
      const go = await ctx.waitForEvent("go");
      return { go: go.timedOut ? undefined : go.payload, late: await branch };
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, undefined);
    await until(async () => (await engine.getRun(run.id))?.status === "waiting", "the run waits");
    await until(() => woke === 1, "the abandoned branch's timer fires");
    await sleep(100);
    expect(stray).toEqual([]);
    await engine.sendEvent(run.id, "go", 1);
    expect(await advanceUntil(h.clock, engine.handle(run.id).result(), 30_000)).toEqual({
      go: 1,
      late: "x",
    });
  });

  it("an async timer callback awaiting its call once the run suspended leaves no unhandled rejection", async () => {
    const h = harness();
    let fired = 0;
    const wf = workflow({ name: "abandoned-callback", version: "1" }, async (ctx) => {
      const t = setTimeout(async () => {
        fired++;
        await ctx.step("late", () => "x");
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
    await sleep(100);
    expect(stray).toEqual([]);
    await engine.sendEvent(run.id, "go", 1);
    expect(await advanceUntil(h.clock, engine.handle(run.id).result(), 30_000)).toBe("done");
  });
});
