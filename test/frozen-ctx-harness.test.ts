// The ctx frozen or extended, under cairn/testing's harness (createTestEngine, crashSweep:
// testing/instrument.ts wraps the ctx in a Proxy whose get trap returns a wrapper for each
// method). Pinned because a change that made the ctx's methods own data properties (h3's
// e035ed5, not landed) broke the first three: Object.freeze makes a data property
// non-writable and non-configurable, and a Proxy's get must then return the very value
// ("'get' on proxy: property 'step' is a read-only and non-configurable data property");
// with the methods accessors, as now, the run completes. Held back (it.fails): under the
// harness, Object.create(ctx) with `step` replaced does not call the replacement (the
// harness's wrapper calls the real step), so the workflow behaves otherwise than in
// production and checkReplay reports a different output.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, type WorkflowContext, workflow } from "../src/index.js";
import { createTestEngine } from "../src/testing/index.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const frozen = workflow({ name: "frozen", version: "1" }, async (ctx) => {
  Object.freeze(ctx);
  const a = await ctx.step("a", () => 1);
  return { a, now: typeof ctx.now() };
});

describe("a frozen ctx", () => {
  it("runs under createTestEngine (its ctx wrapped by the harness's Proxy)", async () => {
    const t = await createTestEngine({ workflows: [frozen] });
    cleanups.push(() => t.close());
    const view = await t.settle(await t.start(frozen, undefined));
    expect(view.error?.message).toBeUndefined();
    expect(view.status).toBe("completed");
    expect(view.output).toEqual({ a: 1, now: "number" });
  });

  it("runs through a user's tracing Proxy that binds the ctx's methods", async () => {
    const traced: string[] = [];
    const wf = workflow({ name: "frozen-traced", version: "1" }, async (raw) => {
      Object.freeze(raw);
      const ctx = new Proxy(raw, {
        get(t, k, r) {
          const v = Reflect.get(t, k, r);
          if (typeof v !== "function") return v;
          return (...args: unknown[]) => {
            traced.push(String(k));
            return (v as (...a: unknown[]) => unknown).apply(t, args);
          };
        },
      }) as WorkflowContext;
      return await ctx.step("a", () => 1);
    });
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [wf] });
    cleanups.push(() => engine.close());
    const h = await engine.start(wf, undefined);
    await expect(h.result()).resolves.toBe(1);
    expect(traced).toEqual(["step"]);
  });
});

describe("an extension of a frozen ctx (no harness)", () => {
  it("replaces a method by assignment, as on main", async () => {
    // h3: the frozen ctx's `step` is a non-writable data property, so assigning `step` on an
    // object inheriting it throws (strict mode); on main an inherited accessor's setter took it.
    const traced: string[] = [];
    const wf = workflow({ name: "frozen-ext", version: "1" }, async (ctx) => {
      Object.freeze(ctx);
      const ext = Object.create(ctx) as WorkflowContext;
      ext.step = ((n: string, f: () => number) => {
        traced.push(n);
        return ctx.step(n, f);
      }) as WorkflowContext["step"];
      return await ext.step("a", () => 1);
    });
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [wf] });
    cleanups.push(() => engine.close());
    await expect((await engine.start(wf, undefined)).result()).resolves.toBe(1);
    expect(traced).toEqual(["a"]);
  });
});

describe("Object.create(ctx) with step replaced, under the harness", () => {
  it.fails("calls the replacement", async () => {
    const traced: string[] = [];
    const wf = workflow({ name: "create", version: "1" }, async (ctx) => {
      const ext = Object.create(ctx) as WorkflowContext;
      ext.step = ((n: string, f: () => number) => {
        traced.push(n);
        return ctx.step(n, f);
      }) as WorkflowContext["step"];
      return await ext.step("a", () => 1);
    });
    const t = await createTestEngine({ workflows: [wf] });
    cleanups.push(() => t.close());
    const view = await t.settle(await t.start(wf, undefined));
    expect(view.output).toBe(1);
    expect(traced).toEqual(["a"]);
  });
});
