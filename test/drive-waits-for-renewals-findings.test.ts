// The test engine's clock drive moved virtual time a second per tick while a run executed,
// without waiting for the lease renewals those ticks set off. With a slow store (PostgreSQL
// under load: crash-sweep-process.test.ts's "fresh schema" case counted the email of its
// resume child 3 times, not 2), ten ticks passed before a renewal answered: the effect's
// lease check found the lease stale, the execution stopped, and the run was executed again
// from the top, with no crash at all. A harness must not make executions the code under test
// did not ask for: the drive now lets the serving engine's heartbeat catch up with each tick.

import { describe, expect, it, onTestFinished } from "vitest";
import { workflow } from "../src/index.js";
import { sqliteStore } from "../src/store/sqlite/sqlite-store.js";
import type { Store } from "../src/store/store.js";
import { crashSweep, createSideEffectCounter, createTestEngine } from "../src/testing/index.js";
import { tempDbPath } from "./helpers/sqlite.js";

/** A store whose lease renewals answer after `ms` of real time, as a loaded database's do. */
function slowRenewals(inner: Store, ms: number): Store {
  return new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      if (prop !== "renewLeases") return value.bind(target);
      return async (...args: unknown[]) => {
        await new Promise((r) => setTimeout(r, ms));
        return value.apply(target, args);
      };
    },
  }) as Store;
}

/** Real time the step takes: ticks of the drive pass meanwhile. */
const realWork = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("the test engine's drive and a slow lease renewal", () => {
  it("an undisturbed run is executed once: its effect performs once, its code runs once", async () => {
    const { path, cleanup } = tempDbPath();
    onTestFinished(cleanup);
    const fx = createSideEffectCounter();
    let executions = 0;
    const wf = workflow({ name: "slow-renewals", version: "1" }, async (ctx) => {
      executions++;
      await ctx.step("call-api", () => realWork(400).then(() => 1));
      return ctx.effect("pay", {
        perform: () => fx.record("payment"),
        reconcile: () => undefined, // looks nowhere: a second perform would show
      });
    });
    const t = await createTestEngine({
      workflows: [wf],
      sideEffects: fx,
      store: () => slowRenewals(sqliteStore(path), 150),
    });
    await t.start(wf, undefined, { id: "r" });
    const view = await t.settle("r");
    expect(view.status).toBe("completed");
    expect(fx.counts()).toEqual({ payment: 1 });
    expect(executions).toBe(1);
  });

  it("crashSweep reports only what a crash causes, not an execution the drive caused", async () => {
    const fx = createSideEffectCounter();
    const wf = workflow({ name: "slow-renewals-sweep", version: "1" }, async (ctx) => {
      fx.record("email"); // outside any step: once per execution
      await ctx.step("call-api", () => realWork(400).then(() => 1));
      await ctx.effect("pay", {
        perform: () => fx.record("payment"),
        reconcile: () => undefined, // looks nowhere: a second perform shows
      });
      return "done";
    });
    const res = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: undefined,
      sideEffects: fx,
      storage: () => {
        const { path, cleanup } = tempDbPath();
        return { store: () => slowRenewals(sqliteStore(path), 150), cleanup };
      },
      filter: (b) => b.key === "pay" && b.point === "before-record",
    });
    expect(res.baseline.sideEffects).toEqual({ email: 1, payment: 1 });
    // Killed after perform, before its record: the new engine sends the email again and
    // performs again (no reconcile). Twice each, never three times.
    expect(res.failures).toEqual([
      `crash between effect "pay"'s perform and its completion record (run "crash-sweep"): ` +
        `side effect "email" happened 2 times (undisturbed: 1); ` +
        `side effect "payment" happened 2 times (undisturbed: 1)`,
    ]);
  });
});
