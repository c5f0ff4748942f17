// Lease renewal under races, on both backends: a renewal answered for an older epoch never
// stops the newer execution of the same run in this worker.

import Database from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { type Store, workflow } from "../src/index.js";
import type { SqliteStore } from "../src/sqlite.js";
import { faultyStore } from "../src/testing/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => {
    open = r;
  });
  return { wait, open };
}

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("a renewal that reports the old epoch lost does not stop the run's new execution", async () => {
    const h = harness();
    const stepA = gate();
    const stepB = gate();
    const renewal = gate();
    let holdRenewals = false;
    let heldAnswered = false;
    const inner = h.store();
    // renewLeases is held before it reaches the store, so the store judges the epochs as
    // they are once the run has been released and claimed again.
    const store = faultyStore(inner, {});
    const held = new Proxy(store, {
      get(target, prop, receiver) {
        if (prop === "renewLeases") {
          return async (p: Parameters<typeof inner.renewLeases>[0]) => {
            if (!holdRenewals) return target.renewLeases(p);
            await renewal.wait;
            const res = await target.renewLeases(p);
            heldAnswered = true;
            return res;
          };
        }
        return Reflect.get(target, prop, receiver);
      },
    });
    const wf = workflow({ name: "relaunched", version: "1" }, async (ctx) => {
      await ctx.step("a", () => stepA.wait);
      await ctx.sleep("pause", 1);
      await ctx.step("b", () => stepB.wait);
      return "done";
    });
    const e = h.engine([wf], { store: held, heartbeatMs: 3_600_000 });
    const run = await e.start(wf, undefined);
    await until(async () => (await e.getRun(run.id))?.status === "running", "step a runs");
    // A heartbeat starts renewing the first execution's lease (epoch 1) and is held.
    holdRenewals = true;
    await h.clock.advance(0);
    // The first execution finishes step a and sleeps: it is released; the sleep ends and the
    // run is claimed again (epoch 2) by this same worker, which runs step b.
    stepA.open();
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run sleeps");
    holdRenewals = false;
    await h.clock.advance(10);
    await until(
      async () =>
        (await e.getSteps(run.id)).some((s) => s.key === "pause" && s.status === "completed"),
      "step b runs",
    );
    // The held renewal now reports the run's lease at epoch 1 lost: it is, but epoch 2 is not.
    renewal.open();
    await until(() => heldAnswered, "the held renewal is answered");
    await new Promise((r) => setImmediate(r));
    stepB.open();
    // Stopped by mistake, the execution would leave the run leased and stuck.
    await until(async () => (await e.getRun(run.id))?.status === "completed", "the run completes");
    expect(await run.result()).toBe("done");
  });

  it("a lone worker whose renewals failed past its lease takes its own run over once the lease expires", async () => {
    // The worker stops an execution it can no longer prove it owns (its own clock says the
    // lease ran out) without writing. No other worker exists, and claimRuns never gives a
    // worker its own runs: the run must not sit leased to it forever.
    const h = harness();
    const failing = new Set<keyof Store>();
    const store = faultyStore(h.store(), { failing });
    let aRuns = 0;
    let stopped = false;
    let performs = 0;
    const performed = new Set<string>();
    const wf = workflow({ name: "lone", version: "1" }, async (ctx) => {
      const a = await ctx.step("a", async (s) => {
        aRuns++;
        if (aRuns === 1) {
          await new Promise<void>((resolve) =>
            s.signal.addEventListener("abort", () => {
              stopped = true;
              resolve();
            }),
          );
        }
        return 2;
      });
      const pr = await ctx.effect("pr", {
        perform: (key) => {
          performs++;
          performed.add(key);
          return 40;
        },
        reconcile: (key) => (performed.has(key) ? 40 : undefined),
      });
      return a + pr;
    });
    const e = h.engine([wf], { store, leaseMs: 1_000, heartbeatMs: 300 });
    const run = await e.start(wf, undefined);
    await until(() => aRuns === 1, "step a runs");
    failing.add("renewLeases");
    for (let i = 0; i < 5 && !stopped; i++) await h.clock.advance(300);
    await until(() => stopped, "past its lease by its own clock, the execution stops");
    failing.clear();
    for (let i = 0; i < 400 && (await e.getRun(run.id))?.status !== "completed"; i++) {
      await h.clock.advance(100);
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(await e.getRun(run.id)).toMatchObject({ status: "completed", output: 42 });
    expect(await run.result()).toBe(42);
    // a ran again (its first attempt was never recorded); the effect happened once.
    expect(aRuns).toBe(2);
    expect(performs).toBe(1);
  });

  it("a run whose hand-back failed with the store is taken over by its own worker once the store is back", async () => {
    // A store outage interrupts the execution and its hand-back fails too: the run stays
    // leased to this worker, which must not leave it so.
    const h = harness();
    const failing = new Set<keyof Store>();
    const store = faultyStore(h.store(), { failing });
    let bRuns = 0;
    const wf = workflow({ name: "outage", version: "1" }, async (ctx) => {
      const a = await ctx.step("a", () => 1);
      const b = await ctx.step("b", () => {
        bRuns++;
        if (bRuns === 1) failing.add("appendRecords").add("releaseRun");
        return 2;
      });
      return a + b;
    });
    const e = h.engine([wf], { store, leaseMs: 1_000 });
    const run = await e.start(wf, undefined);
    await until(() => bRuns === 1, "step b runs while the store goes away");
    await until(async () => {
      await h.clock.advance(10);
      return (await e.getRun(run.id))?.status === "running" && e.metrics().activeExecutions === 0;
    }, "the execution gave up on the store");
    failing.clear();
    for (let i = 0; i < 400 && (await e.getRun(run.id))?.status !== "completed"; i++) {
      await h.clock.advance(100);
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(await e.getRun(run.id)).toMatchObject({ status: "completed", output: 3 });
    expect(bRuns).toBe(2);
  });
});

describe("leases lost and renewals failing", () => {
  const harness = useHarness("sqlite");

  it("a lease another worker took over aborts the step's signal within one heartbeat", async () => {
    const h = harness();
    let aborted = false;
    let started = false;
    const wf = workflow({ name: "taken", version: "1" }, async (ctx) =>
      ctx.step("long", async (s) => {
        started = true;
        await new Promise<void>((resolve) =>
          s.signal.addEventListener("abort", () => {
            aborted = true;
            resolve();
          }),
        );
        return "cut";
      }),
    );
    const e = h.engine([wf], { leaseMs: 1_000, heartbeatMs: 100_000 });
    const run = await e.start(wf, undefined);
    await until(() => started, "the step runs");
    // Another worker takes the run over: its claim moves the epoch on (done here directly on
    // the file, so that this worker's lease has not expired and nothing else stops it).
    const path = (h.store() as SqliteStore).path;
    const raw = new Database(path);
    raw
      .prepare("UPDATE runs SET epoch = epoch + 1, lease_owner = 'thief' WHERE id = ?")
      .run(run.id);
    raw.close();
    expect(aborted).toBe(false);
    // The next heartbeat learns of it.
    await h.clock.advance(0);
    await until(() => aborted, "the step's signal aborts");
    // Nothing more from this worker: the step's result is not recorded.
    expect((await e.getSteps(run.id)).filter((st) => st.status === "completed")).toEqual([]);
  });

  it("renewals failing for longer than the lease stop the worker's executions; nothing more is written", async () => {
    const h = harness();
    const failing = new Set<keyof Store>();
    const store = faultyStore(h.store(), { failing });
    let started = false;
    let aborted = false;
    const wf = workflow({ name: "cutoff", version: "1" }, async (ctx) => {
      await ctx.step("long", async (s) => {
        started = true;
        await new Promise<void>((resolve) =>
          s.signal.addEventListener("abort", () => {
            aborted = true;
            resolve();
          }),
        );
      });
      return ctx.step("after", () => "must not run");
    });
    const e = h.engine([wf], { store, leaseMs: 1_000, heartbeatMs: 100_000 });
    const run = await e.start(wf, undefined);
    await until(() => started, "the step runs");
    failing.add("renewLeases");
    await h.clock.advance(600);
    expect(aborted).toBe(false);
    await h.clock.advance(600);
    await until(() => aborted, "past the lease, the execution stops");
    failing.clear();
    const steps = await e.getSteps(run.id);
    expect(steps.filter((s) => s.status === "completed")).toEqual([]);
  });
});
