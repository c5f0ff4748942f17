// A run whose only pending work of its own was an unref'd timer stayed `running` (holding
// its worker slot) until the timer fired: late-work.ts counted every pending timer the
// workflow code created. `AbortSignal.timeout(ms)` makes such a timer (unref'd, so it never
// keeps a process alive either), and the AI SDK's `timeout.toolMs` makes one per tool call:
// a workflow holding one then waiting for an event held its slot for the timer's whole span
// instead of suspending. An unref'd timer now does not keep the run from suspending; a
// ref'd one still does (a branch sleeping on it is busy, not blocked).

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

describe.each(BACKENDS)("%s: unref'd timers of the workflow's own", (backend) => {
  const harness = useHarness(backend);

  it("a pending AbortSignal.timeout and an unref'd setTimeout do not keep a run waiting for an event from suspending", async () => {
    const h = harness();
    const wf = workflow({ name: "unrefd-timers", version: "1" }, async (ctx) => {
      const signal = AbortSignal.timeout(600_000);
      const unrefd = setTimeout(() => {}, 600_000);
      unrefd.unref();
      const a = await ctx.step("a", () => "a");
      const go = await ctx.waitForEvent("go");
      clearTimeout(unrefd);
      return { a, aborted: signal.aborted, go: go.timedOut ? undefined : go.payload };
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, undefined);
    await until(
      async () => (await engine.getRun(run.id))?.status === "waiting",
      "the run suspends on its wait",
    );
    await engine.sendEvent(run.id, "go", 1);
    expect(await advanceUntil(h.clock, engine.handle(run.id).result(), 30_000)).toEqual({
      a: "a",
      aborted: false,
      go: 1,
    });
  });

  it("a ref'd timer of a branch still keeps the run from suspending until it fires, so the branch's call is made", async () => {
    const h = harness();
    let released = false;
    const wf = workflow({ name: "refd-timer", version: "1" }, async (ctx) => {
      const go = ctx.waitForEvent("go");
      await new Promise((r) => setTimeout(r, 300));
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
    await until(
      async () => (await engine.getRun(run.id))?.status === "waiting",
      "the run suspends on its wait",
    );
    await engine.sendEvent(run.id, "go", 1);
    expect(await advanceUntil(h.clock, engine.handle(run.id).result(), 30_000)).toBe("b");
  });
});
