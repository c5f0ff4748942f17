// The ctx handled as a workflow's own code may handle it: copied by a spread or
// Object.assign (to wrap one method and pass the rest on), extended by Object.create (a
// method replaced on the extension), kept past its execution and called later. The ctx's methods became prototype accessors (0410813): a spread copies own
// properties only, so `{ ...ctx }` held runId, workflow and version and no method, though
// its type (WorkflowContext) says it has them all; the object literal the ctx was before
// copied whole. An extension's assigned method went into the ctx's own map of methods
// (inherited), so ctx.step became the wrapper, and a wrapper calling ctx.step overflowed the
// stack. A ctx kept past its execution (a later execution runs, or the run ended)
// records nothing. The ctx does not depend on the backend: SQLite only.

import { describe, expect, it } from "vitest";
import { type Engine, type WorkflowContext, workflow } from "../src/index.js";
import { advanceUntil, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

/** Waits for the run's first execution to suspend in its sleep before the clock moves: a
 *  clock moved on while the sleep's record was still committing (a loaded machine) found the
 *  sleep already due, the execution went on, and there was no second execution to look at. */
async function suspended(e: Engine, runId: string): Promise<void> {
  await until(
    async () => (await e.getRun(runId))?.status === "waiting",
    `run "${runId}" to suspend`,
  );
}

describe("the ctx copied, or kept past its execution", () => {
  const harness = useHarness("sqlite");

  it("a spread of the ctx, or Object.assign of it, has every method, and its calls record as the ctx's", async () => {
    const h = harness();
    const traced: string[] = [];
    const wf = workflow({ name: "spread-ctx", version: "1" }, async (ctx) => {
      const wrapped: WorkflowContext = {
        ...ctx,
        step: ((name: string, fn: () => unknown) => {
          traced.push(name);
          return ctx.step(name, fn);
        }) as WorkflowContext["step"],
      };
      const copy = Object.assign({}, ctx) as WorkflowContext;
      const a = await wrapped.step("a", () => 1);
      await wrapped.sleep("nap", 1000);
      const b = await copy.step("b", () => 2);
      return { a, b, t: typeof wrapped.now(), u: typeof copy.uuid(), run: wrapped.runId };
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await suspended(e, run.id);
    const out = await advanceUntil(h.clock, run.result(), 500);
    expect(out).toEqual({ a: 1, b: 2, t: "number", u: "string", run: run.id });
    // "a" on each of the two executions (the second replays it), nothing else traced.
    expect(traced).toEqual(["a", "a"]);
    expect((await e.getSteps(run.id)).map((s) => s.key)).toEqual([
      "a",
      "nap",
      "b",
      "@now",
      "@uuid",
    ]);
  });

  it("a ctx kept from the run's first execution, called while its second runs, records nothing and never settles", async () => {
    const h = harness();
    const ctxs: WorkflowContext[] = [];
    let staleSettled = false;
    const wf = workflow({ name: "stale-ctx", version: "1" }, async (ctx) => {
      ctxs.push(ctx);
      const first = ctxs[0];
      if (ctxs.length === 2 && first) {
        const settle = () => {
          staleSettled = true;
        };
        first.step("stale", () => "S").then(settle, settle);
        first.sleep("stale-nap", 10).then(settle, settle);
      }
      await ctx.sleep("nap", 1000);
      return ctx.step("b", () => 2);
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await suspended(e, run.id);
    await expect(advanceUntil(h.clock, run.result(), 500)).resolves.toBe(2);
    expect(ctxs.length).toBe(2);
    expect((await e.getSteps(run.id)).map((s) => s.key)).toEqual(["nap", "b"]);
    expect(staleSettled).toBe(false);
  });

  it("a ctx kept past the run's end, called from a timer, records nothing", async () => {
    const h = harness();
    let kept: WorkflowContext | undefined;
    const wf = workflow({ name: "late-ctx", version: "1" }, async (ctx) => {
      kept = ctx;
      return ctx.step("a", () => 1);
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    expect(await run.result()).toBe(1);
    const k = kept as WorkflowContext;
    const { step } = k;
    let settled = 0;
    const count = () => {
      settled++;
    };
    await new Promise<void>((resolve) =>
      setTimeout(() => {
        step("late", () => 2).then(count, count);
        k.effect("late-effect", { perform: () => 3, reconcile: () => undefined }).then(
          count,
          count,
        );
        k.waitForEvent("never").then(count, count);
        resolve();
      }, 5),
    );
    await e.sendEvent(run.id, "never", 1).catch(() => {});
    expect((await e.getSteps(run.id)).map((s) => s.key)).toEqual(["a"]);
    expect((await e.getRun(run.id))?.status).toBe("completed");
    expect(settled).toBe(0);
  });
});

describe("a ctx extended by Object.create", () => {
  const harness = useHarness("sqlite");

  it("a method assigned on the extension replaces it there only: the ctx's own is unchanged", async () => {
    const h = harness();
    const traced: string[] = [];
    const wf = workflow({ name: "extended-ctx", version: "1" }, async (ctx) => {
      const a = await ctx.step("a", () => 1);
      const ext = Object.create(ctx) as WorkflowContext;
      ext.step = ((name: string, fn: () => unknown) => {
        traced.push(name);
        return ctx.step(name, fn);
      }) as WorkflowContext["step"];
      const b = await ext.step("b", () => 2);
      const c = await ctx.step("c", () => 3);
      return { a, b, c, same: ctx.step === ext.step };
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    expect(await run.result()).toEqual({ a: 1, b: 2, c: 3, same: false });
    expect(traced).toEqual(["b"]);
    expect((await e.getSteps(run.id)).map((s) => s.key)).toEqual(["a", "b", "c"]);
  });
});

describe("a frozen ctx", () => {
  const harness = useHarness("sqlite");

  it("Object.freeze(ctx) leaves its methods callable, and an extension of it too", async () => {
    const h = harness();
    const wf = workflow({ name: "frozen-ctx", version: "1" }, async (ctx) => {
      Object.freeze(ctx);
      const a = await ctx.step("a", () => 1);
      const ext = Object.create(ctx) as WorkflowContext;
      const b = await ext.step("b", () => 2);
      return [a, b, typeof ctx.now()];
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    expect(await run.result()).toEqual([1, 2, "number"]);
    expect((await e.getSteps(run.id)).map((s) => s.key)).toEqual(["a", "b", "@now"]);
  });
});

describe("a ctx of another run", () => {
  const harness = useHarness("sqlite");

  it("called from a run's workflow code, it is refused to that code, and records nothing in the run it belongs to", async () => {
    const h = harness();
    let keptA: WorkflowContext | undefined;
    let release: (() => void) | undefined;
    const slow = new Promise<void>((r) => {
      release = r;
    });
    const a = workflow({ name: "owner-run", version: "1" }, async (ctx) => {
      keptA = ctx;
      await ctx.step("slow", () => slow);
      return "a done";
    });
    const b = workflow({ name: "caller-run", version: "1" }, async (ctx) => {
      const kept = keptA as WorkflowContext;
      const got = await kept
        .step("from-b", () => "B wrote this")
        .then(
          (v) => `recorded ${v}`,
          (err: Error) => err.message,
        );
      const b2 = await ctx.step("b2", () => 2);
      return { got, b2 };
    });
    const e = h.engine([a, b]);
    const ra = await e.start(a, undefined, { id: "run_a" });
    await until(async () => keptA !== undefined, "run a executes");
    const rb = await e.start(b, undefined, { id: "run_b" });
    const outB = await rb.result();
    release?.();
    expect(await ra.result()).toBe("a done");
    expect(outB).toEqual({
      got: 'ctx.step("from-b") of run "run_a" was called from the workflow code of run "run_b"; a ctx belongs to the run it was handed to: call the ctx of run "run_b"',
      b2: 2,
    });
    expect((await e.getSteps("run_a")).map((s) => s.key)).toEqual(["slow"]);
    expect((await e.getSteps("run_b")).map((s) => s.key)).toEqual(["b2"]);
  });
});

describe("a ctx of another run, called from a step body", () => {
  const harness = useHarness("sqlite");

  // Mended (h9): the scope of a step body names its execution, so a ctx of another run
  // called from it is refused to that body as from that run's workflow code (before, it
  // recorded the call in the run the ctx belongs to).
  it("is refused to that body, and records nothing in the run it belongs to", async () => {
    const h = harness();
    let keptA: WorkflowContext | undefined;
    let release: (() => void) | undefined;
    const slow = new Promise<void>((r) => {
      release = r;
    });
    const a = workflow({ name: "owner-run-2", version: "1" }, async (ctx) => {
      keptA = ctx;
      await ctx.step("slow", () => slow);
      return "a done";
    });
    const b = workflow({ name: "body-caller", version: "1" }, async (ctx) =>
      ctx.step(
        "b1",
        () =>
          (keptA as WorkflowContext)
            .step("from-b-body", () => "B wrote this")
            .then(
              (v) => `recorded ${v}`,
              (err: Error) => err.message,
            ),
        { retry: { maxAttempts: 1 } },
      ),
    );
    const e = h.engine([a, b]);
    const ra = await e.start(a, undefined, { id: "run_a2" });
    await until(async () => keptA !== undefined, "run a executes");
    const rb = await e.start(b, undefined, { id: "run_b2" });
    const outB = await rb.result();
    release?.();
    expect(await ra.result()).toBe("a done");
    expect(outB).toBe(
      'ctx.step("from-b-body") of run "run_a2" was called inside the body of step "b1" of run "run_b2"; a ctx belongs to the run it was handed to, and calls do not nest: make it from the workflow function of run "run_b2", around the step',
    );
    expect((await e.getSteps("run_a2")).map((s) => s.key)).toEqual(["slow"]);
    expect((await e.getSteps("run_b2")).map((s) => s.key)).toEqual(["b1"]);
  });
});
