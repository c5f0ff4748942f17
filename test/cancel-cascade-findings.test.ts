// Found by an adversarial review of the cancel cascade (canceling a run cancels its
// unfinished children): each test is a bug it found and failed before its mend, or (the
// last two) a way a run ends canceled that the first mend would have left without a cascade.

import { describe, expect, it } from "vitest";
import { createEngine, workflow } from "../src/index.js";
import { faultyStore } from "../src/testing/index.js";
import { crashableEngine } from "./helpers/crash.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("a parent executing elsewhere when canceled ends canceled, not failed by its own child's cascade cancel", async () => {
    const h = harness();
    const kid = workflow({ name: "race-kid", version: "1" }, async (ctx) => {
      await ctx.waitForEvent("never");
    });
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    const parent = workflow({ name: "race-parent", version: "1" }, async (ctx) => {
      await Promise.all([ctx.child("c", kid, undefined), ctx.step("hold", () => held)]);
    });
    const w = h.engine([parent, kid]);
    const client = h.engine([], { worker: false });
    const run = await w.start(parent, undefined, { id: "rp" });
    await until(async () => (await w.getRun("rp/c"))?.status === "waiting", "kid waits");
    await client.cancel("rp", "from afar");
    // On SQLite the worker hears of another store's cancel only at its next heartbeat (the
    // virtual clock stands still), but it reads the events its polls find: a child canceled
    // at once ended the parent failed, by its own RunCanceledError.
    await until(
      async () => (await client.getRun("rp"))?.status !== "running",
      "the parent ends early",
      1_000,
    ).catch(() => undefined);
    release();
    await run.result().catch(() => undefined);
    const p = await client.getRun("rp");
    expect([p?.status, p?.reason]).toEqual(["canceled", "from afar"]);
  });

  it("a parent whose worker died, canceled and then canceled as unserved, cancels its children", async () => {
    const h = harness();
    const kid = workflow({ name: "un-kid", version: "1" }, async (ctx) => {
      await ctx.waitForEvent("never");
    });
    const parent = workflow({ name: "un-parent", version: "1" }, async (ctx) => {
      await Promise.all([
        ctx.child("c", kid, undefined),
        ctx.step("hold", () => new Promise<void>(() => {})),
      ]);
    });
    const a = crashableEngine(h, [parent, kid], { leaseMs: 1_000 });
    // Serves the child's workflow, not the parent's: the parent is canceled as unserved.
    const b = h.engine([kid], { leaseMs: 1_000 });
    await a.engine.start(parent, undefined, { id: "up" });
    await until(async () => (await b.getRun("up/c"))?.status === "waiting", "kid waits");
    a.crash();
    await b.cancel("up", "stop");
    const canceled = until(async () => (await b.getRun("up"))?.status === "canceled", "up ends");
    await advanceUntil(h.clock, canceled, 200);
    await until(async () => (await b.getRun("up/c"))?.status === "canceled", "kid canceled");
    expect((await b.getRun("up/c"))?.reason).toBe('its parent run "up" was canceled: stop');
  });

  it("a run canceled twice, the first time from another process, ends with the first reason, and its children cite it", async () => {
    const h = harness();
    const kid = workflow({ name: "twice-kid", version: "1" }, async (ctx) => {
      await ctx.waitForEvent("never");
    });
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    const parent = workflow({ name: "twice-parent", version: "1" }, async (ctx) => {
      const child = ctx.child("k", kid, undefined);
      child.catch(() => {});
      await ctx.step("hold", () => held);
      await child;
    });
    const w = h.engine([parent, kid]);
    const client = h.engine([], { worker: false });
    const run = await w.start(parent, undefined, { id: "tw" });
    await until(async () => (await w.getRun("tw/k"))?.status === "waiting", "kid waits");
    await client.cancel("tw", "first");
    // The store keeps the first reason (requestCancel); this process's execution of the run
    // must stop with it too, or its release writes the second over it.
    await w.cancel("tw", "second");
    release();
    await expect(run.result()).rejects.toThrow(/first/);
    expect((await w.getRun("tw"))?.reason).toBe("first");
    await until(async () => (await w.getRun("tw/k"))?.status === "canceled", "kid canceled");
    expect((await w.getRun("tw/k"))?.reason).toBe('its parent run "tw" was canceled: first');
  });

  it("a parent handed back after a store error, which the cancel requested meanwhile turns canceled, cancels its children", async () => {
    const h = harness();
    const kid = workflow({ name: "ib-kid", version: "1" }, async (ctx) => {
      await ctx.waitForEvent("never");
    });
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    const parent = workflow({ name: "ib-parent", version: "1" }, async (ctx) => {
      await Promise.all([ctx.child("c", kid, undefined), ctx.step("hold", () => held)]);
    });
    let outage = false;
    const store = faultyStore(h.store(), {
      beforeAppend: () => {
        if (outage) throw new Error("the store is down");
      },
    });
    const w = createEngine({
      store,
      workflows: [parent, kid],
      clock: h.clock,
      pollIntervalMs: 10,
      log: () => {},
    });
    const client = h.engine([], { worker: false });
    try {
      await w.start(parent, undefined, { id: "ib" });
      await until(async () => (await client.getRun("ib/c"))?.status === "waiting", "kid waits");
      await client.cancel("ib", "stop");
      outage = true;
      release();
      await until(
        async () => (await client.getRun("ib"))?.status === "canceled",
        "parent canceled",
      );
      await until(
        async () => (await client.getRun("ib/c"))?.status === "canceled",
        "kid canceled",
        3_000,
      );
    } finally {
      outage = false;
      await w.close();
    }
  });
});
