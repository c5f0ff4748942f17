// Found by an adversarial audit of cairn/testing, each a regression test of a bug it found:
// workspace steps the harness did not see (fault scripts, crash points, counts), workspaces
// shared through ./.cairn by every test engine and sweep execution, a step function started
// on a crashed engine, and start() after a crash hanging.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { crashSweep, createSideEffectCounter, createTestEngine } from "../src/testing/index.js";

describe("workspace steps under cairn/testing", () => {
  it("a fault script naming a workspace step by its key fires", async () => {
    const dir = mkdtempSync(join(tmpdir(), "harness-ws-"));
    const wf = workflow({ name: "ws-fault", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir });
      return ws.step("edit", () => {
        writeFileSync(join(dir, "a.txt"), "x");
        return "edited";
      });
    });
    const t = await createTestEngine({
      workflows: [wf],
      faults: [{ call: "edit", throws: () => new Error("injected"), times: 1 }],
    });
    const run = await t.start(wf, {});
    const done = await t.settle(run);
    expect(done.status).toBe("completed");
    const steps = await t.engine.getSteps(run.id);
    const edit = steps.find((s) => s.key === "edit");
    // The injected fault made attempt 1 fail; attempt 2 ran the real function.
    expect(edit?.attempts.length).toBe(2);
  });

  it("a fault script naming a workspace step by its call number fires", async () => {
    const dir = mkdtempSync(join(tmpdir(), "harness-ws-"));
    const wf = workflow({ name: "ws-fault-n", version: "1" }, async (ctx) => {
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
      faults: [{ call: 3, throws: () => new Error("injected"), times: 1 }],
    });
    const run = await t.start(wf, {});
    await t.settle(run);
    const steps = await t.engine.getSteps(run.id);
    expect(steps.find((s) => s.key === "edit")?.attempts.length).toBe(2);
    expect(steps.find((s) => s.key === "last")?.attempts.length).toBe(1);
  });

  it("crashSweep crashes before a workspace step's function too", async () => {
    const dir = mkdtempSync(join(tmpdir(), "harness-ws-"));
    const effects = createSideEffectCounter();
    const wf = workflow({ name: "ws-sweep", version: "1" }, async (ctx) => {
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
    expect(sweep.boundaries.map((b) => b.boundary.label)).toContain(
      'before step "edit" runs (attempt 1)',
    );
  });
});

describe("crashSweep and a workspace step still running on the crashed engine", () => {
  it("what a dead engine's workspace step body records after the crash is not counted", async () => {
    const dir = mkdtempSync(join(tmpdir(), "harness-ws-"));
    const effects = createSideEffectCounter();
    const wf = workflow({ name: "ws-dead-body", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("repo", { dir });
      await Promise.all([
        ctx.step("a", () => 1),
        ws.step("edit", async () => {
          // Still running when the engine dies at "a"'s record: a killed process would
          // never get past this await.
          await new Promise((r) => setTimeout(r, 100));
          effects.record("edit");
          writeFileSync(join(dir, "a.txt"), "x");
        }),
      ]);
      return "ok";
    });
    const sweep = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: {},
      sideEffects: effects,
      filter: (b) => b.key === "a",
    });
    expect(sweep.boundaries.every((b) => b.crashed)).toBe(true);
    expect(sweep.failures).toEqual([]);
  });
});

describe("a fault script that crashes the engine as a step starts", () => {
  it('the step\'s function does not run on the dead engine ("dies as deploy starts")', async () => {
    const world: string[] = [];
    const wf = workflow({ name: "dies-as-deploy-starts", version: "1" }, async (ctx) => {
      await ctx.step("build", () => 1);
      await ctx.step("deploy", (s) => {
        world.push(`deploy attempt ${s.attempt}`); // a real change in the world
      });
      return "ok";
    });
    const t: Awaited<ReturnType<typeof createTestEngine>> = await createTestEngine({
      workflows: [wf],
      faults: [{ call: "deploy", run: () => t.crash() }],
    });
    const run = await t.start(wf, {});
    await t.advanceUntil(() => t.crashed, "the crash");
    // Give the dead engine's code every chance to go on.
    await new Promise((r) => setTimeout(r, 50));
    await t.recover();
    const done = await t.settle(run);
    expect(done.status).toBe("completed");
    // Only the new engine deployed: a killed worker never started the function.
    expect(world).toEqual(["deploy attempt 2"]);
  });
});

describe("the test engine after crash(), before recover()", () => {
  it("start() says the engine crashed instead of hanging", async () => {
    const wf = workflow({ name: "start-after-crash", version: "1" }, async () => 1);
    const t = await createTestEngine({ workflows: [wf] });
    t.crash();
    const got = await Promise.race([
      t.start(wf, {}).then(
        () => "started",
        (err: Error) => err.message,
      ),
      new Promise((r) => setTimeout(() => r("hung"), 1_000)),
    ]);
    expect(got).toMatch(/crashed.*recover\(\)/);
  });
});

describe("workspaces without a dir under cairn/testing", () => {
  it("each crash sweep execution starts with an empty workspace directory", async () => {
    const { appendFileSync, existsSync, readFileSync } = await import("node:fs");
    const wf = workflow({ name: "ws-default-dir", version: "1" }, async (ctx) => {
      const ws = await ctx.workspace("notes");
      // How many lines the notes hold after this run's one line: 1 on a fresh directory.
      return ws.step("add", () => {
        const file = join(ws.dir, "notes.txt");
        appendFileSync(file, "line\n");
        return readFileSync(file, "utf8").split("\n").filter(Boolean).length;
      });
    });
    const sweep = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: {},
      runId: "harness-ws-default",
    });
    expect(sweep.baseline.output).toBe(1);
    expect(sweep.failures).toEqual([]);
    // Nothing is left in the project's directory.
    expect(existsSync(join(process.cwd(), ".cairn/workspaces/harness-ws-default"))).toBe(false);
  });
});

describe('workspaces without a dir, crash: "process"', () => {
  it("each execution's children start with an empty workspace directory, left nowhere", async () => {
    const { existsSync } = await import("node:fs");
    const { fileURLToPath } = await import("node:url");
    const { notes } = await import("./fixtures/workspace-notes-workflows.js");
    const sweep = await crashSweep({
      crash: "process",
      module: fileURLToPath(new URL("./fixtures/workspace-notes-workflows.ts", import.meta.url)),
      workflows: [notes],
      workflow: notes,
      input: {},
      runId: "harness-ws-process",
      filter: (b) => b.key === "add" && b.point !== "before-function",
    });
    expect(sweep.baseline.output).toBe(1);
    expect(sweep.boundaries.every((b) => b.crashed)).toBe(true);
    expect(sweep.failures).toEqual([]);
    expect(existsSync(join(process.cwd(), ".cairn/workspaces/harness-ws-process"))).toBe(false);
  }, 120_000);
});
