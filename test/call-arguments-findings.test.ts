// A call handed something that is not what it runs (plain JavaScript, or `as any`): a step
// whose body is not a function, an effect without its reconcile. Each was found only once
// it ran: a step's body failed each of its attempts with "fn is not a function", retried
// with backoff, and an effect without reconcile worked until the crash it exists for, then
// failed its recovery with "effect.reconcile is not a function". Each is now refused at the
// call, the same way on every execution, naming the call, the run and what to pass.

import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { effectTool } from "../src/ai/index.js";
import { type AnyWorkflow, createEngine, sqliteStore, workflow } from "../src/index.js";
import { tempDbPath } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function engineFor(workflows: AnyWorkflow[]) {
  const db = tempDbPath();
  const engine = createEngine({ store: sqliteStore(db.path), workflows, pollIntervalMs: 20 });
  cleanups.push(db.cleanup, () => engine.close());
  return engine;
}

// biome-ignore lint/suspicious/noExplicitAny: what plain JavaScript hands in
type Loose = any;

describe("a call handed what it cannot run", () => {
  it("ctx.step with a body that is not a function rejects at the call, before any attempt", async () => {
    let attempts = 0;
    const wf = workflow({ name: "step-body-not-a-function", version: "1" }, async (ctx) => {
      try {
        await ctx.step("fetch", { run: () => attempts++ } as Loose);
      } catch (err) {
        return `caught: ${(err as Error).name}: ${(err as Error).message}`;
      }
      return "no error";
    });
    const engine = engineFor([wf]);
    const run = await engine.start(wf, null, { id: "r-body" });
    const out = (await run.result()) as string;
    expect(out).toMatch(/^caught: TypeError: ctx\.step\("fetch"\) in run "r-body": /);
    expect(out).toMatch(/body must be a function/);
    expect(attempts).toBe(0);
    // Nothing was recorded of it: the call never began.
    expect(await engine.getSteps(run.id)).toEqual([]);
  });

  it("ctx.effect without a reconcile rejects at the call: nothing is performed", async () => {
    let performed = 0;
    const wf = workflow({ name: "effect-without-reconcile", version: "1" }, async (ctx) => {
      try {
        await ctx.effect("open-pr", {
          perform: async () => {
            performed++;
            return 1;
          },
        } as Loose);
      } catch (err) {
        return `caught: ${(err as Error).name}: ${(err as Error).message}`;
      }
      return "no error";
    });
    const engine = engineFor([wf]);
    const run = await engine.start(wf, null, { id: "r-effect" });
    const out = (await run.result()) as string;
    expect(out).toMatch(/^caught: TypeError: ctx\.effect\("open-pr"\) in run "r-effect": /);
    expect(out).toMatch(/reconcile must be a function/);
    expect(performed).toBe(0);
    expect(await engine.getSteps(run.id)).toEqual([]);
  });

  it("ctx.effect with no effect object at all names what to pass", async () => {
    const wf = workflow({ name: "effect-missing", version: "1" }, async (ctx) => {
      try {
        await ctx.effect("charge", undefined as Loose);
      } catch (err) {
        return (err as Error).message;
      }
      return "no error";
    });
    const engine = engineFor([wf]);
    const run = await engine.start(wf, null, { id: "r-missing" });
    expect(await run.result()).toMatch(
      /ctx\.effect\("charge"\) in run "r-missing": .*\{ perform, reconcile \}/,
    );
  });

  it("effectTool without a reconcile is refused where it is written", () => {
    expect(() =>
      effectTool({
        inputSchema: z.object({}),
        perform: async () => 1,
      } as Loose),
    ).toThrow(/^effectTool\(\): reconcile must be a function \(got undefined\)/);
  });

  it("a refused step uses up its key as a call does: the next call of that name is name#2", async () => {
    const wf = workflow({ name: "refused-step-key", version: "1" }, async (ctx) => {
      await ctx.step("fetch", 42 as Loose).catch(() => undefined);
      return await ctx.step("fetch", () => "second");
    });
    const engine = engineFor([wf]);
    const run = await engine.start(wf, null);
    expect(await run.result()).toBe("second");
    expect((await engine.getSteps(run.id)).map((s) => s.key)).toEqual(["fetch#2"]);
  });

  it("an effect recorded before the check (its code had no reconcile) replays its recorded value", async () => {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    let performed = 0;
    const body = (withReconcile: boolean) =>
      workflow({ name: "recorded-effect", version: "1" }, async (ctx) => {
        const id = await ctx.effect("charge", {
          perform: async () => {
            performed++;
            return "ch_1";
          },
          ...(withReconcile ? { reconcile: async () => undefined } : {}),
        } as Loose);
        await ctx.waitForEvent("go");
        return id;
      });
    // Recorded by code the check would refuse: the journal holds the effect's outcome.
    const first = createEngine({
      store: sqliteStore(db.path),
      workflows: [body(true)],
      pollIntervalMs: 20,
    });
    const run = await first.start(body(true), null, { id: "r-recorded" });
    for (;;) {
      if ((await run.info())?.status === "waiting") break;
      await new Promise((r) => setTimeout(r, 10));
    }
    await first.close();
    const later = createEngine({
      store: sqliteStore(db.path),
      workflows: [body(false)],
      pollIntervalMs: 20,
    });
    cleanups.push(() => later.close());
    await later.sendEvent("r-recorded", "go", null);
    expect(await later.handle("r-recorded").result()).toBe("ch_1");
    expect(performed).toBe(1);
  });
});
