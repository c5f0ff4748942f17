// Attacks on the replay's held hand-over (Context.cascadeOver, DeliveryQueue.hold): a hold
// whose missing call never comes while the workflow's own work never ends (an interval) is
// refused after replayStallMs, never left running; a cancel, and the engine's close, end a
// held execution at once; two holds in a row each wait for their own call.

import { describe, expect, it } from "vitest";
import { realClock, type WorkflowContext, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(BACKENDS)("%s: a held hand-over", (backend) => {
  const harness = useHarness(backend);

  it("whose missing call never comes while an interval runs is refused after replayStallMs", async () => {
    const h = harness();
    let firstRun = true;
    let interval: NodeJS.Timeout | undefined;
    const wf = workflow({ name: "hold-never", version: "1" }, async (ctx: WorkflowContext) => {
      await Promise.all([
        (async () => {
          await Promise.all([ctx.step("m", () => delay(20).then(() => "m")), delay(0)]);
          // The replay's code no longer makes x, and keeps work of its own pending for good.
          if (firstRun) await ctx.step("x", () => "a");
          else interval = setInterval(() => {}, 10);
        })(),
        ctx.step("s", () => delay(100).then(() => "s")),
      ]);
      await ctx.waitForEvent("go");
      return "done";
    });
    const e = h.engine([wf], { clock: realClock, replayStallMs: 1500 });
    try {
      const run = await e.start(wf, undefined);
      await until(
        async () => (await e.getRun(run.id))?.status === "waiting",
        "the first run waits for go",
      );
      firstRun = false;
      await e.sendEvent(run.id, "go");
      const err = await run.result().then(
        () => undefined,
        (error: Error) => error,
      );
      expect(err?.name).toBe("NonDeterminismError");
      expect(err?.message).toContain('"x" (key "x"');
    } finally {
      clearInterval(interval);
    }
  }, 20_000);

  it("ends at once when the run is canceled", async () => {
    const h = harness();
    let firstRun = true;
    let ownWorkDone = false;
    const ownWork = async () => {
      await delay(firstRun ? 0 : 5000);
      ownWorkDone = true;
    };
    const wf = workflow({ name: "hold-cancel", version: "1" }, async (ctx: WorkflowContext) => {
      await Promise.all([
        (async () => {
          await Promise.all([ctx.step("m", () => delay(20).then(() => "m")), ownWork()]);
          await ctx.step("x", () => "a");
        })(),
        ctx.step("s", () => delay(100).then(() => "s")),
      ]);
      await ctx.waitForEvent("go");
      return "done";
    });
    const e = h.engine([wf], { clock: realClock });
    const run = await e.start(wf, undefined);
    await until(
      async () => (await e.getRun(run.id))?.status === "waiting",
      "the first run waits for go",
    );
    firstRun = false;
    ownWorkDone = false;
    await e.sendEvent(run.id, "go");
    await until(async () => (await e.getRun(run.id))?.status === "running", "the replay runs");
    await delay(300);
    await e.cancel(run.id, "enough");
    const out = await run.result().catch((err: Error) => err.name);
    expect(out).toBe("RunCanceledError");
    // Before the workflow's own timer would have let the held call be made.
    expect(ownWorkDone).toBe(false);
  }, 20_000);

  it("two holds in a row each wait for their own call", async () => {
    const h = harness();
    let firstRun = true;
    const got: string[] = [];
    const wf = workflow({ name: "hold-twice", version: "1" }, async (ctx: WorkflowContext) => {
      const x = async (name: string, id: string) => {
        const v = await ctx.step(name, () => delay(150).then(() => id));
        got.push(`${id}=${v}`);
      };
      const own = () => delay(firstRun ? 0 : 300);
      await Promise.all([
        (async () => {
          await Promise.all([ctx.step("m1", () => delay(20).then(() => "m1")), own()]);
          await x("x", "a1");
          await Promise.all([ctx.step("m2", () => delay(20).then(() => "m2")), own()]);
          await x("x", "a2");
        })(),
        (async () => {
          await ctx.step("s1", () => delay(60).then(() => "s1"));
          await x("y", "b1");
          await ctx.step("s2", () => delay(250).then(() => "s2"));
          await x("y", "b2");
        })(),
      ]);
      await ctx.waitForEvent("go");
      return "done";
    });
    const e = h.engine([wf], { clock: realClock });
    const run = await e.start(wf, undefined);
    await until(
      async () => ["waiting", "failed"].includes((await e.getRun(run.id))?.status ?? ""),
      "the first run waits for go",
    );
    expect((await e.getRun(run.id))?.status).toBe("waiting");
    expect(got.sort()).toEqual(["a1=a1", "a2=a2", "b1=b1", "b2=b2"]);
    got.length = 0;
    firstRun = false;
    await e.sendEvent(run.id, "go");
    const out = await run.result().catch((err: Error) => err.message);
    expect(got.sort()).toEqual(["a1=a1", "a2=a2", "b1=b1", "b2=b2"]);
    expect(out).toBe("done");
  }, 20_000);
});
