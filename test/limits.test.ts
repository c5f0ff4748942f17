// Limits (createEngine({ limits })): documented defaults, and a clear LimitError naming the
// limit and its value when one is reached, with nothing beyond it recorded: calls per run
// (the run fails), events per run and pending events per run (sendEvent is refused),
// workflows per engine; bad limit values are refused by name. Name lengths: a workflow's
// name is 1-128 characters (workflow() refuses more), a call's name 1-200 (the call fails,
// and with it the run unless the workflow catches it; nothing of it is recorded).

import { describe, expect, it } from "vitest";
import { DEFAULT_LIMITS, LimitError, type WorkflowContext, workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
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

  it("a workflow name over 128 characters is refused by workflow() naming the limit; 128 runs", async () => {
    const h = harness();
    const over = `w${"x".repeat(128)}`;
    expect(over).toHaveLength(129);
    expect(() => workflow({ name: over, version: "1" }, async () => 1)).toThrow(TypeError);
    expect(() => workflow({ name: over, version: "1" }, async () => 1)).toThrow(
      `workflow(): name ${JSON.stringify(over)} is invalid; use 1-128 characters`,
    );
    // The version has the same bound.
    expect(() => workflow({ name: "w", version: "1".repeat(129) }, async () => 1)).toThrow(
      /workflow\(\): version of "w" must be 1-128 characters/,
    );
    const name = `w${"x".repeat(127)}`;
    expect(name).toHaveLength(128);
    const wf = workflow({ name, version: "1".repeat(128) }, async (ctx, n: number) =>
      ctx.step("s", () => n + 1),
    );
    const e = h.engine([wf]);
    const run = await e.start(wf, 1);
    expect(await run.result()).toBe(2);
    expect(await e.getRun(run.id)).toMatchObject({
      workflow: name,
      version: "1".repeat(128),
      status: "completed",
    });
    // Started by name@version, as the CLI and the HTTP API do.
    const byName = await e.start(`${name}@${"1".repeat(128)}`, 2);
    expect(await byName.result()).toBe(3);
  });

  it("a step named with more than 200 characters fails the run naming the step and the limit; 200 is recorded", async () => {
    const h = harness();
    const wf = workflow({ name: "names", version: "1" }, async (ctx, length: number) => {
      await ctx.step("first", () => "a");
      return ctx.step("s".repeat(length), () => length);
    });
    const e = h.engine([wf]);
    const ok = await e.start(wf, 200);
    expect(await ok.result()).toBe(200);
    expect((await e.getSteps(ok.id)).map((s) => [s.key, s.status, s.result])).toEqual([
      ["first", "completed", "a"],
      ["s".repeat(200), "completed", 200],
    ]);

    const over = await e.start(wf, 201);
    const message = `ctx.step(${JSON.stringify("s".repeat(201))}) in run "${over.id}": a name must be 1-200 characters`;
    await expect(over.result()).rejects.toThrow(message);
    const failed = await e.getRun(over.id);
    expect(failed?.status).toBe("failed");
    expect(failed?.error).toMatchObject({ name: "TypeError" });
    expect(failed?.error?.message).toContain(message);
    // Nothing of the refused call was recorded: no record, attempt or intent under it.
    expect((await e.getSteps(over.id)).map((s) => s.key)).toEqual(["first"]);
  });

  it("a name is checked once per execution, but cairn's own '@now' stays refused to a step after ctx.now() used it", async () => {
    const h = harness();
    const wf = workflow({ name: "at-names", version: "1" }, async (ctx) => {
      await ctx.step("again", () => 1);
      await ctx.step("again", () => 2);
      ctx.now();
      return ctx.step("@now", () => 3);
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await expect(run.result()).rejects.toThrow(
      `ctx.step("@now") in run "${run.id}": a name must be 1-200 characters, must not contain "#" and must not start with "@" or a space`,
    );
    expect((await e.getSteps(run.id)).map((s) => s.key)).toEqual(["again", "again#2", "@now"]);
  });

  it("a call named with something that is not a string fails its run with the name rule, not a TypeError from inside cairn", async () => {
    const h = harness();
    const wf = workflow({ name: "odd-names", version: "1" }, async (ctx) =>
      ctx.step(5 as unknown as string, () => 1),
    );
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await expect(run.result()).rejects.toThrow(
      `ctx.step(5) in run "${run.id}": a name must be 1-200 characters`,
    );
  });

  it("every other call named with more than 200 characters fails its run the same way; a 200-character wait is woken by its event", async () => {
    const h = harness();
    const long = "n".repeat(201);
    const kid = workflow({ name: "kid", version: "1" }, async () => "kid");
    const calls: Record<string, (ctx: WorkflowContext) => unknown> = {
      effect: (ctx) => ctx.effect(long, { perform: () => 1, reconcile: () => undefined }),
      sleep: (ctx) => ctx.sleep(long, "1s"),
      sleepUntil: (ctx) => ctx.sleepUntil(long, 0),
      waitForEvent: (ctx) => ctx.waitForEvent(long),
      approval: (ctx) => ctx.approval(long, { request: "ok?" }),
      child: (ctx) => ctx.child(long, kid, undefined),
      now: (ctx) => ctx.now(long),
    };
    const wf = workflow({ name: "calls", version: "1" }, async (ctx, kind: string) => {
      await ctx.step("first", () => "a");
      if (kind === "wait200") return (await ctx.waitForEvent("w".repeat(200))).timedOut;
      await calls[kind]!(ctx);
      return "made";
    });
    const e = h.engine([wf, kid]);
    for (const kind of Object.keys(calls)) {
      const run = await e.start(wf, kind, { id: `over-${kind}` });
      const what = kind === "now" ? "a label" : "a name";
      await expect(run.result(), kind).rejects.toThrow(
        `ctx.${kind}(${JSON.stringify(long)}) in run "over-${kind}": ${what} must be 1-200 characters`,
      );
      expect((await e.getRun(run.id))?.status, kind).toBe("failed");
      expect(
        (await e.getSteps(run.id)).map((s) => s.key),
        kind,
      ).toEqual(["first"]);
    }
    expect(await e.listRuns({ workflow: "kid" })).toEqual([]);
    expect(await e.listApprovals("over-approval")).toEqual([]);

    const wait = await e.start(wf, "wait200", { id: "wait200" });
    await until(async () => (await e.getRun("wait200"))?.status === "waiting", "waits");
    expect((await e.getRun("wait200"))?.waitingFor).toEqual(["w".repeat(200)]);
    await e.sendEvent("wait200", "w".repeat(200), "go");
    expect(await advanceUntil(h.clock, wait.result(), 10)).toBe(false);
  });
});
