// Canceling a run cancels the children it started and has not finished (and theirs), as
// Temporal's default parent-close policy and Restate's cancellation do: a child the
// canceled parent no longer awaits would otherwise go on working (and spending) for nobody.

import { describe, expect, it } from "vitest";
import { type AnyWorkflow, workflow } from "../src/index.js";
import { BACKENDS, type Harness, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { within } from "./helpers/within.js";

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  function family(stepAborted: { value: boolean }) {
    const grandchild = workflow({ name: "grandchild", version: "1" }, async (ctx) => {
      await ctx.waitForEvent("never");
    });
    const waitingChild = workflow({ name: "waiting-child", version: "1" }, async (ctx) => {
      await ctx.child("g", grandchild, undefined);
    });
    const busyChild = workflow({ name: "busy-child", version: "1" }, async (ctx) => {
      await ctx.step("work", (s) => {
        return new Promise<void>((_, reject) => {
          s.signal.addEventListener("abort", () => {
            stepAborted.value = true;
            reject(s.signal.reason);
          });
        });
      });
    });
    const doneChild = workflow({ name: "done-child", version: "1" }, async () => "done");
    const parent = workflow({ name: "parent", version: "1" }, async (ctx) => {
      await ctx.child("done", doneChild, undefined);
      await Promise.all([
        ctx.child("w", waitingChild, undefined),
        ctx.child("b", busyChild, undefined),
      ]);
    });
    return {
      parent,
      all: [parent, waitingChild, busyChild, doneChild, grandchild] as AnyWorkflow[],
    };
  }

  async function started(h: Harness, stepAborted: { value: boolean }) {
    const { parent, all } = family(stepAborted);
    const e = h.engine(all);
    await e.start(parent, undefined, { id: "p" });
    await until(async () => {
      const runs = await e.listRuns({});
      const status = Object.fromEntries(runs.map((r) => [r.id, r.status]));
      return (
        status.p === "waiting" &&
        status["p/w/g"] === "waiting" &&
        status["p/w"] === "waiting" &&
        status["p/b"] === "running"
      );
    }, "the family settles");
    return e;
  }

  it("canceling a waiting parent cancels its unfinished children and theirs; a finished child stays as it is", async () => {
    const h = harness();
    const stepAborted = { value: false };
    const e = await started(h, stepAborted);
    await e.cancel("p", "not needed");
    await until(async () => (await e.getRun("p/b"))?.status === "canceled", "p/b canceled");
    const runs = await e.listRuns({});
    expect(Object.fromEntries(runs.map((r) => [r.id, [r.status, r.reason ?? null]]))).toEqual({
      p: ["canceled", "not needed"],
      "p/done": ["completed", null],
      "p/w": ["canceled", 'its parent run "p" was canceled: not needed'],
      "p/w/g": [
        "canceled",
        'its parent run "p/w" was canceled: its parent run "p" was canceled: not needed',
      ],
      "p/b": ["canceled", 'its parent run "p" was canceled: not needed'],
    });
    expect(stepAborted.value).toBe(true);
  });

  it("a parent canceled while it executes cancels its children when it ends", async () => {
    const h = harness();
    const kid = workflow({ name: "late-kid", version: "1" }, async (ctx) => {
      await ctx.waitForEvent("never");
    });
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    const parent = workflow({ name: "busy-parent", version: "1" }, async (ctx) => {
      const child = ctx.child("k", kid, undefined);
      child.catch(() => {});
      await ctx.step("hold", () => held);
      await child;
    });
    const e = h.engine([parent, kid]);
    const run = await e.start(parent, undefined, { id: "bp" });
    await until(async () => (await e.getRun("bp/k"))?.status === "waiting", "kid waits");
    await e.cancel("bp", "stop");
    release();
    await expect(within(run.result(), 10_000, "bp")).rejects.toThrow(/stop/);
    await until(async () => (await e.getRun("bp/k"))?.status === "canceled", "kid canceled");
    expect((await e.getRun("bp/k"))?.reason).toBe('its parent run "bp" was canceled: stop');
  });

  it("a child started after another process's cancel, before the parent's worker heard of it, is canceled when the parent ends", async () => {
    const h = harness();
    const kid = workflow({ name: "later-kid", version: "1" }, async (ctx) => {
      await ctx.waitForEvent("never");
    });
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    const parent = workflow({ name: "unaware-parent", version: "1" }, async (ctx) => {
      await ctx.step("hold", () => held);
      await ctx.child("late", kid, undefined);
    });
    const w = h.engine([parent, kid]);
    const client = h.engine([], { worker: false });
    const run = await w.start(parent, undefined, { id: "up" });
    await until(async () => (await w.getRun("up"))?.status === "running", "parent runs");
    await client.cancel("up", "from afar");
    release();
    await expect(within(run.result(), 10_000, "up")).rejects.toThrow(/from afar/);
    // On SQLite the worker hears of another store's cancel only at its next heartbeat (the
    // virtual clock stands still): the parent went on and started its child.
    const late = await until(async () => {
      const r = await w.getRun("up/late");
      return r === undefined || r.status === "canceled" ? { r } : undefined;
    }, "late child canceled or never started");
    if (late.r) expect(late.r.reason).toBe('its parent run "up" was canceled: from afar');
    if (backend === "sqlite") expect(late.r).toBeDefined();
  });
});
