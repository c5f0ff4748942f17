// An execution reads the heads of the run's pending events by name, a page at a time, only
// for the names its calls take events of (Store.pendingEventHeadsNamed, workflow/
// event-reads.ts). Before, every execution read the heads of every unconsumed event of its
// run (loadJournal, and again at each reload): a run sent 100,000 events it did not wait
// for spent 0.7 s and 40 MB per execution on them (bench/pending-events.ts). Counted here as
// the event rows the store hands the execution, on both backends; and what each wait
// receives is what it received when every event was read at the start: in the order sent,
// past a page's end, and in the order the waits were called across a read one of them needs.

import { describe, expect, it } from "vitest";
import { type Store, type WaitResult, workflow } from "../src/index.js";
import { EVENT_HEADS_PAGE } from "../src/workflow/event-reads.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { around } from "./helpers/store-verbs.js";

/** A store that counts the event rows (whole or heads) its reads of pending events return. */
function counting(inner: Store): { store: Store; rows: () => number; loads: () => number } {
  let rows = 0;
  let loads = 0;
  const list = async (call: (...a: unknown[]) => Promise<unknown>, ...args: unknown[]) => {
    const got = (await call(...args)) as unknown[];
    rows += got.length;
    return got;
  };
  const store = around(inner, {
    loadJournal: async (call, ...args) => {
      const j = (await call(...args)) as { events: unknown[]; eventHeads?: unknown[] };
      loads++;
      rows += j.events.length + (j.eventHeads?.length ?? 0);
      return j;
    },
    pendingEvents: list,
    pendingEventHeads: list,
    pendingEventHeadsNamed: list,
  });
  return { store, rows: () => rows, loads: () => loads };
}

function got<T>(w: WaitResult<T>): T | undefined {
  return w.timedOut ? undefined : w.payload;
}

const NOISE = 400;

describe.each(BACKENDS)("pending events read by name (%s)", (backend) => {
  const harness = useHarness(backend);

  it("an execution reads none of the 400 pending events of a name it never waits for, nor at its reloads", async () => {
    const h = harness();
    const wf = workflow({ name: "w", version: "1" }, async (ctx) => {
      const first = await ctx.waitForEvent<string>("go");
      await ctx.step("between", () => "x");
      const second = await ctx.waitForEvent<string>("go");
      return [got(first), got(second)];
    });
    const client = h.engine([], { worker: false });
    await client.start(wf, undefined, { id: "r" });
    for (let i = 0; i < NOISE; i++) await client.sendEvent("r", "noise", i);
    await client.sendEvent("r", "go", "one");
    const { store, rows } = counting(h.store());
    const e = h.engine([wf], { store });
    await until(
      async () =>
        (await client.getRun("r"))?.status === "waiting" &&
        (await client.getSteps("r")).length === 3,
      "the first wait and step",
    );
    // Hints while it waits: each reloads what it reads.
    for (let i = 0; i < 10; i++) await e.sendEvent("r", "noise", i);
    await e.sendEvent("r", "go", "two");
    expect(await advanceUntil(h.clock, e.handle("r").result(), 100)).toEqual(["one", "two"]);
    // Before: 400 rows at the first execution's load alone, and 400+ at every reload.
    expect(rows()).toBeLessThan(20);
  });

  it("a run with 250 pending events of the name it waits for reads a page of them to take 3", async () => {
    const h = harness();
    const wf = workflow({ name: "few", version: "1" }, async (ctx) => {
      const items: unknown[] = [];
      for (let i = 0; i < 3; i++) items.push(got(await ctx.waitForEvent<number>("item")));
      return items;
    });
    const client = h.engine([], { worker: false });
    await client.start(wf, undefined, { id: "f" });
    for (let i = 0; i < 250; i++) await client.sendEvent("f", "item", i);
    const { store, rows } = counting(h.store());
    const e = h.engine([wf], { store });
    expect(await advanceUntil(h.clock, e.handle("f").result(), 100)).toEqual([0, 1, 2]);
    expect(rows()).toBeLessThanOrEqual(EVENT_HEADS_PAGE + 5);
  });

  it("a loop takes 250 pending events in the order sent, page after page, then one sent while it waits", async () => {
    const h = harness();
    const wf = workflow({ name: "all", version: "1" }, async (ctx) => {
      const items: unknown[] = [];
      for (let i = 0; i < 251; i++) items.push(got(await ctx.waitForEvent<number>("item")));
      return items;
    });
    const client = h.engine([], { worker: false });
    await client.start(wf, undefined, { id: "a" });
    for (let i = 0; i < 250; i++) {
      await client.sendEvent("a", "item", i);
      if (i % 50 === 0) await client.sendEvent("a", "noise", i);
    }
    const { store, loads } = counting(h.store());
    const e = h.engine([wf], { store });
    await until(async () => (await e.getRun("a"))?.status === "waiting", "the 251st wait");
    await e.sendEvent("a", "item", 250);
    const out = await advanceUntil(h.clock, e.handle("a").result(), 100);
    expect(out).toEqual(Array.from({ length: 251 }, (_, i) => i));
    // One execution took the 250 (a wait that found its page taken read the next, rather
    // than suspend the run for the store to wake it again), one the event sent after.
    expect(loads()).toBe(2);
  });

  it("inspecting the steps of a run with 400 pending events, and forking it, read none of them", async () => {
    const h = harness();
    const wf = workflow({ name: "s", version: "1" }, async (ctx) => {
      await ctx.step("s", () => 1);
      return got(await ctx.waitForEvent<string>("go"));
    });
    const e = h.engine([wf]);
    await e.start(wf, undefined, { id: "r" });
    await until(async () => (await e.getRun("r"))?.status === "waiting", "the wait");
    for (let i = 0; i < NOISE; i++) await e.sendEvent("r", "noise", i);
    const { store, rows } = counting(h.store());
    const client = h.engine([], { worker: false, store });
    expect((await client.getSteps("r")).map((s) => s.key)).toContain("s");
    await client.fork("r", { fromStep: "s", id: "f" });
    expect(rows()).toBe(0);
  });

  it("a wait called first takes first, though its name must be read and the other's is read", async () => {
    const h = harness();
    const wf = workflow({ name: "race", version: "1" }, async (ctx) => {
      const before = got(await ctx.waitForEvent<string>("b"));
      const won = await Promise.race([
        ctx.waitForEvent<string>("a").then((w) => `a ${got(w)}`),
        ctx.waitForEvent<string>("b").then((w) => `b ${got(w)}`),
      ]);
      return [before, won];
    });
    const client = h.engine([], { worker: false });
    await client.start(wf, undefined, { id: "r" });
    await client.sendEvent("r", "b", "one");
    await client.sendEvent("r", "b", "two");
    await client.sendEvent("r", "a", "first");
    // The read of "a" answers late; "b"'s second event (and its payload, read with the
    // first's) is in hand when both waits are called.
    const store = around(h.store(), {
      pendingEventHeadsNamed: async (call, ...args) => {
        const res = await call(...args);
        if ((args[1] as { name: string }).name === "a") await new Promise((r) => setTimeout(r, 50));
        return res;
      },
    });
    const e = h.engine([wf], { store });
    expect(await advanceUntil(h.clock, e.handle("r").result(), 100)).toEqual(["one", "a first"]);
  });
});
