// Regression tests of two defects of cairn/testing: a fault script or crash point aimed at
// a workspace's opening step (the step "workspace:<name>" ctx.workspace() records) did not
// fire, and settle() on a run that sleeps in a loop forever gave up only after 5,000
// ticks (about a minute of real time, well past a test's timeout).
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import {
  type CallInfo,
  crashSweep,
  createSideEffectCounter,
  createTestEngine,
} from "../src/testing/index.js";

describe("a workspace's opening step under cairn/testing", () => {
  it("a fault script naming the opening step by its key fires", async () => {
    const dir = mkdtempSync(join(tmpdir(), "harness-ws-"));
    const wf = workflow({ name: "harness-open-key", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir });
      return ws.step("edit", () => {
        writeFileSync(join(dir, "a.txt"), "x");
        return "edited";
      });
    });
    const seen: CallInfo[] = [];
    const t = await createTestEngine({
      workflows: [wf],
      faults: [
        {
          call: "workspace:repo",
          throws: () => new Error("injected"),
          times: 1,
          run: (c) => {
            seen.push(c);
          },
        },
      ],
    });
    const run = await t.start(wf, {});
    const done = await t.settle(run);
    expect(done.status).toBe("completed");
    const steps = await t.engine.getSteps(run.id);
    // The injected fault made attempt 1 of the opening fail; attempt 2 opened it.
    expect(steps.find((s) => s.key === "workspace:repo")?.attempts.length).toBe(2);
    expect(steps.find((s) => s.key === "edit")?.attempts.length).toBe(1);
    // Named and numbered as any other step call.
    expect(seen).toEqual([
      {
        runId: run.id,
        key: "workspace:repo",
        name: "workspace:repo",
        kind: "step",
        index: 1,
        attempt: 1,
      },
    ]);
  });

  it("a fault script naming the opening step by its call number fires", async () => {
    const dir = mkdtempSync(join(tmpdir(), "harness-ws-"));
    const wf = workflow({ name: "harness-open-n", version: "1" }, async (ctx) => {
      await ctx.step("first", () => 1);
      const ws = await ctx.workspace("repo", { dir });
      await ws.step("edit", () => {
        writeFileSync(join(dir, "a.txt"), "x");
      });
      return ctx.step("last", () => 3);
    });
    const t = await createTestEngine({
      workflows: [wf],
      // call 1 "first", call 2 the workspace's opening, call 3 "edit"
      faults: [{ call: 2, throws: () => new Error("injected"), times: 1 }],
    });
    const run = await t.start(wf, {});
    expect((await t.settle(run)).status).toBe("completed");
    const steps = await t.engine.getSteps(run.id);
    expect(steps.find((s) => s.key === "workspace:repo")?.attempts.length).toBe(2);
    expect(steps.find((s) => s.key === "first")?.attempts.length).toBe(1);
    expect(steps.find((s) => s.key === "edit")?.attempts.length).toBe(1);
  });

  it("crashSweep crashes before the opening step's function, as before any step's", async () => {
    const dir = mkdtempSync(join(tmpdir(), "harness-ws-"));
    const effects = createSideEffectCounter();
    const wf = workflow({ name: "harness-open-sweep", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir });
      await ws.step("edit", (s) => {
        effects.record("edit", s.idempotencyKey);
        writeFileSync(join(dir, "a.txt"), "x");
      });
      return "ok";
    });
    const sweep = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: {},
      sideEffects: effects,
    });
    expect(sweep.failures).toEqual([]);
    const labels = sweep.boundaries.map((b) => b.boundary.label);
    // Before the opening's function, then its record, as for "edit" after it.
    expect(labels.slice(0, 3)).toEqual([
      'before step "workspace:repo" runs (attempt 1)',
      'after step "workspace:repo" returned, before its record',
      'after step "workspace:repo"\'s record',
    ]);
    expect(labels).toContain('before step "edit" runs (attempt 1)');
    const opening = sweep.boundaries.find(
      (b) => b.boundary.point === "before-function" && b.boundary.key === "workspace:repo",
    );
    expect(opening?.crashed).toBe(true);
    expect(opening?.differences).toEqual([]);
  });
});

describe("settle() on a run that sleeps in a loop forever", () => {
  it("fails fast, naming the run and what to do", async () => {
    const wf = workflow({ name: "harness-forever", version: "1" }, async (ctx) => {
      for (;;) await ctx.sleep("tick", "1m");
    });
    const t = await createTestEngine({ workflows: [wf] });
    const run = await t.start(wf, {}, { id: "forever" });
    const err = await t.settle(run).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    // Before: "5000 clock ticks passed" after about a minute of real time.
    expect(err?.message).toMatch(/gave up waiting for run "forever" to finish/);
    expect(err?.message).toMatch(/timers woke them 200 times in a row/);
    expect(err?.message).toMatch(/run "forever" sleeps until/);
    expect(err?.message).toMatch(/give it one .*raise maxIdleWakes/);
  }, 120_000);

  it("a forever loop of timed-out waits in a child fails fast too, naming the child", async () => {
    const child = workflow({ name: "harness-forever-child", version: "1" }, async (ctx) => {
      for (;;) await ctx.waitForEvent("go", { timeout: "1h" });
    });
    const parent = workflow({ name: "harness-forever-parent", version: "1" }, async (ctx) =>
      ctx.child("kid", child, {}),
    );
    const t = await createTestEngine({ workflows: [parent, child] });
    const run = await t.start(parent, {}, { id: "parent" });
    const err = await t.settle(run).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err?.message).toMatch(/gave up waiting for run "parent" to finish: the runs only sleep/);
    expect(err?.message).toMatch(/run "parent[^"]+" waits for go until/);
  }, 120_000);

  it("a long loop that sleeps and works each time still settles", async () => {
    const wf = workflow({ name: "harness-poll", version: "1" }, async (ctx) => {
      let polls = 0;
      // 300 sleeps, more than the idle limit, each followed by a step: work, not a stuck loop.
      while ((await ctx.step(`poll-${polls}`, () => polls + 1)) < 300) {
        polls++;
        await ctx.sleep("wait", "5m");
      }
      return polls;
    });
    const t = await createTestEngine({ workflows: [wf] });
    const run = await t.start(wf, {});
    const done = await t.settle(run);
    expect(done.status).toBe("completed");
    expect(done.output).toBe(299);
  }, 120_000);

  it("a run meant to sleep more often than the limit settles with maxIdleWakes raised", async () => {
    const wf = workflow({ name: "harness-countdown", version: "1" }, async (ctx) => {
      for (let i = 0; i < 250; i++) await ctx.sleep("hour", "1h");
      return "done";
    });
    const t = await createTestEngine({ workflows: [wf], maxIdleWakes: 300 });
    const run = await t.start(wf, {});
    expect((await t.settle(run)).output).toBe("done");
    await expect(createTestEngine({ workflows: [wf], maxIdleWakes: 0 })).rejects.toThrow(
      /maxIdleWakes must be a whole number >= 1/,
    );
  }, 120_000);

  it("crashSweep reports the undisturbed run's endless sleep rather than hanging", async () => {
    const wf = workflow({ name: "harness-forever-sweep", version: "1" }, async (ctx) => {
      await ctx.step("start", () => 1);
      for (;;) await ctx.sleep("tick", "1d");
    });
    await expect(crashSweep({ workflows: [wf], workflow: wf, input: {} })).rejects.toThrow(
      /the undisturbed run "crash-sweep" ended running \(cairn\/testing: gave up waiting for run "crash-sweep" to finish: the runs only sleep/,
    );
  }, 120_000);
});
