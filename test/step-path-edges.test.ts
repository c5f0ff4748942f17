// h17: the step path's edges, diffed between main and h2's clone (execution.ts's fenced
// write, record() joining the caller's write, AttemptContext's accessors by
// __defineGetter__, the execution's cached rules of a step with no options, the budget check
// by for-in). What each case checks is main's behaviour: records, attempts, statuses.

import { afterEach, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { checkReplay, createTestEngine } from "../src/testing/index.js";
import { tempDbPath } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function strip(steps: unknown[]) {
  return JSON.parse(
    JSON.stringify(steps, (k, v) => (/At$|^at$|Ms$|^stack$|^duration/.test(k) ? undefined : v)),
  );
}

describe("a step when Object.prototype has no __defineGetter__ (Annex B, removed by hardening)", () => {
  it("runs and its s has an idempotencyKey", async () => {
    const wf = workflow({ name: "no-annex-b", version: "1" }, async (ctx) =>
      ctx.step("a", (s) => typeof s.idempotencyKey),
    );
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [wf] });
    cleanups.push(() => engine.close());
    const proto = Object.prototype as unknown as Record<string, unknown>;
    const saved = Object.getOwnPropertyDescriptor(proto, "__defineGetter__") as PropertyDescriptor;
    delete proto.__defineGetter__;
    cleanups.push(() => {
      Object.defineProperty(proto, "__defineGetter__", saved);
    });
    const h = await engine.start(wf, undefined);
    const out = await h.result().then(
      (v) => v,
      (e: Error) => `${e.name}: ${e.message}`,
    );
    Object.defineProperty(proto, "__defineGetter__", saved);
    expect(out).toBe("string");
  });
});

describe("budgets, cancel and close mid-step", () => {
  it("a budget spent mid-attempt pauses the run before the next attempt, as on main", async () => {
    let bodies = 0;
    const wf = workflow(
      { name: "budget", version: "1", budget: { tokens: 10 }, retry: { maxAttempts: 1 } },
      async (ctx) => {
        await ctx.step("a", (s) => {
          bodies++;
          s.spend({ tokens: 8 });
          return 1;
        });
        await ctx.step(
          "b",
          () => {
            bodies++;
            return 2;
          },
          { estimate: { tokens: 5 } },
        );
        return ctx.budget;
      },
    );
    const t = await createTestEngine({ workflows: [wf] });
    cleanups.push(() => t.close());
    const h = await t.start(wf, undefined);
    const view = await t.advanceUntilStatus(h, "paused");
    expect(view.reason).toMatch(/tokens/);
    expect(bodies).toBe(1);
    expect(strip(await t.engine.getSteps(h.id)).map((s: { key: string }) => s.key)).toEqual(["a"]);
    await t.engine.resume(h.id, { budget: { tokens: 100 } });
    const done = await t.settle(h);
    expect(done.status).toBe("completed");
    expect(done.output).toEqual({ limit: { tokens: 100 }, spent: { tokens: 8 } });
    expect(bodies).toBe(2);
  });

  it("cancel mid-step: the body sees its abort, the attempt is recorded, nothing runs after", async () => {
    let after = 0;
    let started!: () => void;
    const begun = new Promise<void>((r) => {
      started = r;
    });
    const wf = workflow({ name: "cancel", version: "1" }, async (ctx) => {
      await ctx.step("long", (s) => {
        started();
        return new Promise((_, rej) =>
          s.signal.addEventListener("abort", () => rej(s.signal.reason)),
        );
      });
      after++;
      await ctx.step("after", () => 1);
    });
    const { path, cleanup } = tempDbPath();
    cleanups.push(cleanup);
    const engine = createEngine({ store: sqliteStore(path), workflows: [wf], pollIntervalMs: 5 });
    cleanups.push(() => engine.close());
    const h = await engine.start(wf, undefined);
    await begun;
    await engine.cancel(h.id, "stop");
    await h.result().catch(() => undefined);
    const run = await engine.getRun(h.id);
    expect(run?.status).toBe("canceled");
    expect(after).toBe(0);
    const steps = strip(await engine.getSteps(h.id)) as Array<{ key: string; attempts: unknown[] }>;
    expect(steps.map((s) => s.key)).toEqual(["long"]);
    await engine.close();
    const res = await checkReplay({ store: sqliteStore(path), workflows: [wf] });
    expect(res.map((r) => r.verdict)).toEqual(["ok"]);
  });

  it("close mid-step hands the run back; the next engine finishes it, each body once more at most", async () => {
    const bodies = new Map<string, number>();
    const bump = (k: string) => bodies.set(k, (bodies.get(k) ?? 0) + 1);
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    let begun!: () => void;
    const started = new Promise<void>((r) => {
      begun = r;
    });
    const wf = workflow({ name: "close", version: "1" }, async (ctx) => {
      const a = await ctx.step("a", () => {
        bump("a");
        return 1;
      });
      const [b1, b2] = await Promise.all([
        ctx.step("b", async () => {
          bump("b");
          begun();
          await gate;
          return 2;
        }),
        ctx.step("b", () => {
          bump("b#2");
          return 3;
        }),
      ]);
      return a + b1 + b2;
    });
    const { path, cleanup } = tempDbPath();
    cleanups.push(cleanup);
    const e1 = createEngine({
      store: sqliteStore(path),
      workflows: [wf],
      pollIntervalMs: 5,
      closeGraceMs: 50,
      leaseMs: 300,
    });
    const h = await e1.start(wf, undefined);
    await started;
    const closing = e1.close();
    setTimeout(release, 100);
    await closing;
    const e2 = createEngine({
      store: sqliteStore(path),
      workflows: [wf],
      pollIntervalMs: 5,
      leaseMs: 200,
    });
    cleanups.push(() => e2.close());
    expect(await e2.handle(h.id).result()).toBe(6);
    expect(bodies.get("a")).toBe(1);
    expect(bodies.get("b#2")).toBe(1);
    expect(bodies.get("b")).toBeLessThanOrEqual(2);
    const steps = strip(await e2.getSteps(h.id)) as Array<{ key: string }>;
    expect(steps.map((s) => s.key).sort()).toEqual(["a", "b", "b#2"]);
    await e2.close();
    const res = await checkReplay({ store: sqliteStore(path), workflows: [wf] });
    expect(res.map((r) => r.verdict)).toEqual(["ok"]);
  });
});
