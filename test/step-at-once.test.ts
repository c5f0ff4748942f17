// A step with no options (nearly every step) is made by Context.stepAtOnce (issue 13): no
// async function, its promise settled by its record's hand-over. Before, runAttempts' async
// function, the cascade end's promise, an await's throwaway each, the record's promise, the
// adoption of that promise by runAttempts' and unlessKeyMissing's catch made 15.9 promises
// an executed step; now about 10. Counts, not times: they hold on a loaded machine.
// Everything but a first attempt whose value is recorded at once goes on in runAttempts
// from where stepAtOnce stood: a failure retried by the workflow's policy, a value that
// cannot be stored (its getter read once, as before), a run with no room in its budget, a
// cancel while the body runs, a step made late. Each is held here.

import { afterEach, describe, expect, it } from "vitest";
import {
  createEngine,
  type StepContext,
  sqliteStore,
  type Workflow,
  workflow,
} from "../src/index.js";
import { promisesPerStep, stepLoop } from "./helpers/step-promises.js";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

// biome-ignore lint/suspicious/noExplicitAny: workflows of any input and output
function engineFor(...wfs: Workflow<any, any>[]) {
  const engine = createEngine({ store: sqliteStore(":memory:"), workflows: wfs });
  cleanups.push(() => engine.close());
  return engine;
}

const loop = stepLoop("at-once-loop");

describe("a step with no options", () => {
  it("makes at most 11 promises an executed step (15.9 through runAttempts)", async () => {
    const engine = engineFor(loop);
    const perStep = await promisesPerStep(engine, loop);
    expect(perStep).toBeGreaterThan(5); // the hook saw the steps at all
    expect(perStep).toBeLessThanOrEqual(11);
  });

  it("a failed first attempt is retried by the workflow's policy, its spend charged", async () => {
    const attempts: number[] = [];
    const wf = workflow(
      { name: "at-once-retry", version: "1", retry: { maxAttempts: 3, initialDelay: 1 } },
      async (ctx) => {
        const v = await ctx.step("a", (s: StepContext) => {
          attempts.push(s.attempt);
          s.spend({ tokens: 2 });
          if (s.attempt < 3) throw new Error(`try ${s.attempt}`);
          return "done";
        });
        return v;
      },
    );
    const engine = engineFor(wf);
    const handle = await engine.start(wf, {});
    expect(await handle.result()).toBe("done");
    expect(attempts).toEqual([1, 2, 3]);
    expect((await engine.getRun(handle.id))?.budget.spent).toEqual({ tokens: 6 });
  });

  it("a final failure fails the step with its error, once", async () => {
    let calls = 0;
    const wf = workflow(
      { name: "at-once-fail", version: "1", retry: { maxAttempts: 1 } },
      async (ctx) => {
        try {
          await ctx.step("a", () => {
            calls++;
            throw new Error("no");
          });
          return "ok";
        } catch (err) {
          return `caught ${(err as Error).message}`;
        }
      },
    );
    const engine = engineFor(wf);
    expect(await (await engine.start(wf, {})).result()).toBe("caught no");
    expect(calls).toBe(1);
  });

  it("a value that cannot be stored fails the step, its getter read as through runAttempts", async () => {
    // The encode's answer is handed on to runAttempts, never made again: its getters are read
    // as often as a step with options (runAttempts from the start) reads them.
    const reads = { atOnce: 0, options: 0 };
    const value = (k: keyof typeof reads) => ({
      get f() {
        reads[k]++;
        return () => 1;
      },
    });
    const wf = workflow({ name: "at-once-unstorable", version: "1" }, async (ctx) => {
      const names: string[] = [];
      for (const [k, options] of [
        ["atOnce", undefined],
        ["options", {}],
      ] as const) {
        try {
          await ctx.step(k, () => value(k), options);
        } catch (err) {
          names.push((err as Error).name);
        }
      }
      return names;
    });
    const engine = engineFor(wf);
    expect(await (await engine.start(wf, {})).result()).toEqual([
      "SerializationError",
      "SerializationError",
    ]);
    expect(reads.atOnce).toBeGreaterThan(0);
    expect(reads.atOnce).toBe(reads.options);
  });

  it("a run with no room left in its budget runs no body and pauses", async () => {
    let second = 0;
    const wf = workflow(
      { name: "at-once-budget", version: "1", budget: { usd: 1 } },
      async (ctx) => {
        await ctx.step("spend", (s: StepContext) => {
          s.spend({ usd: 1 });
          return 1;
        });
        await ctx.step("next", () => {
          second++;
          return 2;
        });
        return "end";
      },
    );
    const engine = engineFor(wf);
    const handle = await engine.start(wf, {});
    for (let i = 0; i < 200; i++) {
      const run = await engine.getRun(handle.id);
      if (run?.status === "paused") break;
      await new Promise((r) => setTimeout(r, 10));
    }
    const run = await engine.getRun(handle.id);
    expect(run?.status).toBe("paused");
    expect(run?.pausedFor).toBe("budget");
    expect(second).toBe(0);
  });

  it("a cancel while its body runs cuts the attempt; the step never settles", async () => {
    let entered!: () => void;
    const inBody = new Promise<void>((r) => {
      entered = r;
    });
    let settled = false;
    const wf = workflow({ name: "at-once-cancel", version: "1" }, async (ctx) => {
      await ctx
        .step("slow", (s: StepContext) => {
          entered();
          return new Promise((resolve) => s.signal.addEventListener("abort", () => resolve(1)));
        })
        .then(() => {
          settled = true;
        });
      return "end";
    });
    const engine = engineFor(wf);
    const handle = await engine.start(wf, {});
    await inBody;
    await engine.cancel(handle.id);
    await expect(handle.result()).rejects.toThrow();
    expect((await engine.getRun(handle.id))?.status).toBe("canceled");
    expect(settled).toBe(false);
    const steps = await engine.getSteps(handle.id);
    expect(steps.find((s) => s.key === "slow")?.status).not.toBe("completed");
  });

  it("a step made late (after a timer of the workflow's own) executes and replays", async () => {
    let bodies = 0;
    const wf = workflow({ name: "at-once-late", version: "1" }, async (ctx) => {
      const a = await ctx.step("a", () => 1);
      await new Promise((r) => setTimeout(r, 5));
      const b = await ctx.step("b", () => {
        bodies++;
        return 2;
      });
      await ctx.waitForEvent("go");
      return a + b;
    });
    const engine = engineFor(wf);
    const handle = await engine.start(wf, {});
    for (let i = 0; i < 200 && (await engine.getRun(handle.id))?.status !== "waiting"; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    await engine.sendEvent(handle.id, "go", null);
    expect(await handle.result()).toBe(3);
    expect(bodies).toBe(1);
  });
});
