// Limits (createEngine({ limits })): documented defaults, and a clear LimitError naming the
// limit and its value when one is reached, with nothing beyond it recorded: calls per run
// (the run fails), events per run and pending events per run (sendEvent is refused),
// workflows per engine; bad limit values are refused by name.

import { describe, expect, it } from "vitest";
import { DEFAULT_LIMITS, LimitError, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

describe.each(BACKENDS)("limits (%s)", (backend) => {
  const harness = useHarness(backend);

  it("documented defaults", () => {
    expect(DEFAULT_LIMITS).toEqual({
      maxStepsPerRun: 10_000,
      maxEventsPerRun: 10_000,
      maxPendingEventsPerRun: 1_000,
      maxWorkflows: 1_000,
    });
  });

  it("a run making more calls than maxStepsPerRun fails naming the limit; recorded calls stay", async () => {
    const h = harness();
    const wf = workflow({ name: "many", version: "1" }, async (ctx, n: number) => {
      for (let i = 0; i < n; i++) await ctx.step(`s${i}`, () => i);
      return "done";
    });
    const e = h.engine([wf], { limits: { maxStepsPerRun: 5 } });
    expect(await (await e.start(wf, 5)).result()).toBe("done");
    const over = await e.start(wf, 6);
    await expect(over.result()).rejects.toThrow(
      /makes call 6 \(step "s5"\), over the limit of 5 calls per run \(limits.maxStepsPerRun\)/,
    );
    const failed = await e.getRun(over.id);
    expect(failed?.error).toMatchObject({ name: "LimitError", code: "LIMIT" });
    expect((await e.getSteps(over.id)).map((s) => s.key)).toEqual(["s0", "s1", "s2", "s3", "s4"]);
  });

  it("sendEvent past maxPendingEventsPerRun or maxEventsPerRun is refused; nothing is stored", async () => {
    const h = harness();
    const wf = workflow({ name: "inbox", version: "1" }, async (ctx) => {
      await ctx.waitForEvent("go");
      await ctx.waitForEvent("never");
    });
    const e = h.engine([wf], { limits: { maxPendingEventsPerRun: 2, maxEventsPerRun: 4 } });
    const run = await e.start(wf, undefined, { id: "inbox" });
    await until(async () => (await e.getRun("inbox"))?.status === "waiting", "waits");
    await e.sendEvent("inbox", "other", 1);
    await e.sendEvent("inbox", "other", 2);
    const err = await e.sendEvent("inbox", "other", 3).catch((x: unknown) => x);
    expect(err).toBeInstanceOf(LimitError);
    expect((err as LimitError).limit).toBe("maxPendingEventsPerRun");
    expect((err as Error).message).toMatch(
      /Run "inbox" already has 2 events not yet consumed by a wait, the limit \(limits.maxPendingEventsPerRun: 2\); event "other" was not stored/,
    );
    expect(await e.listEvents(run.id)).toHaveLength(2);
    // A consumed event frees a pending place, but counts toward the run's total.
    await e.sendEvent("inbox", "go", 0).catch((x: unknown) => x);
    expect(await e.listEvents(run.id)).toHaveLength(2);
    const e2 = h.engine([wf], { limits: { maxPendingEventsPerRun: 3, maxEventsPerRun: 4 } });
    await e2.sendEvent("inbox", "go", 0);
    await until(
      async () => (await e2.listEvents("inbox")).some((ev) => ev.consumedBy !== undefined),
      "go is consumed",
    );
    await e2.sendEvent("inbox", "other", 4);
    const total = await e2.sendEvent("inbox", "other", 5).catch((x: unknown) => x);
    expect((total as LimitError).limit).toBe("maxEventsPerRun");
    expect((total as Error).message).toMatch(
      /already has 4 events, the limit \(limits.maxEventsPerRun: 4\)/,
    );
    expect(await e2.listEvents("inbox")).toHaveLength(4);
  });

  it("more workflows than maxWorkflows, or a bad limit, is refused by name", () => {
    const h = harness();
    const wfs = [1, 2, 3].map((v) => workflow({ name: "w", version: String(v) }, async () => v));
    expect(() => h.engine(wfs, { limits: { maxWorkflows: 2 } })).toThrow(
      /3 workflows given, over the limit \(limits.maxWorkflows: 2\)/,
    );
    expect(() => h.engine([], { limits: { maxStepsPerRun: 0 } })).toThrow(
      /limits.maxStepsPerRun must be a whole number >= 1 \(got 0\)/,
    );
    expect(() => h.engine([], { limits: { maxSteps: 3 } as never })).toThrow(
      /limits.maxSteps is not a limit/,
    );
  });
});
