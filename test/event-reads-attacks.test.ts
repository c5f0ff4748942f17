// Attacks on the by-name, paged reads of a run's pending events (workflow/event-reads.ts):
// what each wait receives must be what it received when every pending event was read at the
// start (the oldest of its name by seq; past a deadline, the oldest stored by then), on both
// backends: at a page's edges (99, 100, 101, 200 pending), with waits of two names in
// Promise.all, across an execution that ends mid-way (a sleep, an engine closed); past a
// deadline whose only event stored by then lies on the second page (stamped by a clock
// behind the one that stamped the first page); with events sent while a page is read; and
// after a page read that failed.

import { randomBytes } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  createEngine,
  type Engine,
  encryptedStore,
  type WaitResult,
  workflow,
} from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { EVENT_HEADS_PAGE } from "../src/workflow/event-reads.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { around, gate } from "./helpers/store-verbs.js";

function got<T>(w: WaitResult<T>): T | undefined {
  return w.timedOut ? undefined : w.payload;
}

const range = (n: number) => Array.from({ length: n }, (_, i) => i);

describe.each(BACKENDS)("event reads by name, attacked (%s)", (backend) => {
  const harness = useHarness(backend);

  it("takes 99, 100, 101 and 200 pending events across page edges, with Promise.all of two names, across a sleep and a closed engine", async () => {
    const h = harness();
    // Each run takes `n` events of "x", every 37th together with one of "y", and sleeps at
    // the middle (a second execution replays the first half and reads its pages anew).
    const wf = workflow({ name: "edges", version: "1" }, async (ctx, n: number) => {
      const xs: unknown[] = [];
      const ys: unknown[] = [];
      for (let i = 0; i < n; i++) {
        if (i === Math.floor(n / 2)) await ctx.sleep("mid", 1000);
        if (i % 37 === 0) {
          const [a, b] = await Promise.all([
            ctx.waitForEvent<number>("x"),
            ctx.waitForEvent<number>("y"),
          ]);
          xs.push(got(a));
          ys.push(got(b));
        } else xs.push(got(await ctx.waitForEvent<number>("x")));
      }
      return { xs, ys };
    });
    const sizes = [EVENT_HEADS_PAGE - 1, EVENT_HEADS_PAGE, EVENT_HEADS_PAGE + 1, 200];
    const client = h.engine([], { worker: false });
    for (const n of sizes) {
      await client.start(wf, n, { id: `r${n}` });
      for (let i = 0; i < n; i++) {
        await client.sendEvent(`r${n}`, "x", i);
        if (i % 37 === 0) await client.sendEvent(`r${n}`, "y", i / 37);
        if (i % 7 === 0) await client.sendEvent(`r${n}`, "noise", i);
      }
    }
    const first = h.engine([wf]);
    await until(async () => {
      for (const n of sizes) if ((await first.getRun(`r${n}`))?.status !== "waiting") return false;
      return true;
    }, "every run asleep at its middle");
    await first.close();
    const second = h.engine([wf]);
    for (const n of sizes) {
      const out = await advanceUntil(h.clock, second.handle(`r${n}`).result(), 500);
      expect(out).toEqual({ xs: range(n), ys: range(Math.ceil(n / 37)) });
    }
  });

  it("past a deadline, takes the one event stored by then though it lies on the second page", async () => {
    const h = harness();
    const wf = workflow({ name: "late", version: "1" }, async (ctx) => {
      const w = await ctx.waitForEvent<string>("x", { timeout: 5000 });
      const next = await ctx.waitForEvent<string>("x", { timeout: 0 });
      return [got(w), got(next)];
    });
    const t0 = h.clock.now();
    const e = h.engine([wf]);
    await e.start(wf, undefined, { id: "d" });
    await until(async () => (await e.getRun("d"))?.status === "waiting", "the wait");
    await e.close();
    // A sender whose clock is ahead stamps 150 events after the deadline; then one stamped
    // before it (a clock behind) lands past them, on the second page.
    const ahead = createVirtualClock(t0 + 60_000);
    const aheadEngine: Engine = createEngine({ store: h.store(), clock: ahead, worker: false });
    h.onCleanup?.(() => aheadEngine.close());
    for (let i = 0; i < EVENT_HEADS_PAGE + 50; i++)
      await aheadEngine.sendEvent("d", "x", `late ${i}`);
    await h.clock.advance(1000);
    const client = h.engine([], { worker: false });
    await client.sendEvent("d", "x", "in time");
    await h.clock.advance(10_000);
    const worker = h.engine([wf]);
    // Every pending event read at once took the oldest stored by the deadline: "in time".
    // The second wait (deadline 0, at once past it) takes none: every other event is late.
    expect(await advanceUntil(h.clock, worker.handle("d").result(), 100)).toEqual([
      "in time",
      undefined,
    ]);
  });

  it("events sent while a page is read are taken in seq order after it, none lost nor twice", async () => {
    const h = harness();
    const total = EVENT_HEADS_PAGE + 60;
    const wf = workflow({ name: "during", version: "1" }, async (ctx) => {
      const xs: unknown[] = [];
      for (let i = 0; i < total; i++) xs.push(got(await ctx.waitForEvent<number>("x")));
      return xs;
    });
    const client = h.engine([], { worker: false });
    await client.start(wf, undefined, { id: "c" });
    for (let i = 0; i < 120; i++) await client.sendEvent("c", "x", i);
    let reads = 0;
    let readsDone = 0;
    const store = around(h.store(), {
      pendingEventHeadsNamed: async (call, ...args) => {
        const n = ++reads;
        // Another process sends while this page is read (before and after its statement).
        if (n <= 3) await client.sendEvent("c", "x", 120 + (n - 1) * 2);
        const page = await call(...args);
        if (n <= 3) await client.sendEvent("c", "x", 121 + (n - 1) * 2);
        readsDone++;
        return page;
      },
    });
    const e = h.engine([wf], { store });
    // The test's own sends come after the third read's last one (125): sent while it was
    // still under way, 126 could be stored first, and taking in seq order would hand it first.
    await until(async () => readsDone >= 3, "three page reads");
    for (let i = 126; i < total; i++) await client.sendEvent("c", "x", i);
    expect(await advanceUntil(h.clock, e.handle("c").result(), 100)).toEqual(range(total));
  });

  it("an engine closed while a page read is under way hands the run back; the next takes the same events", async () => {
    const h = harness();
    const wf = workflow({ name: "closed", version: "1" }, async (ctx) => {
      const xs: unknown[] = [];
      for (let i = 0; i < EVENT_HEADS_PAGE + 2; i++) {
        xs.push(got(await ctx.waitForEvent<number>("x")));
        if (i === 0) await ctx.step("after first", () => 1);
      }
      return xs;
    });
    const client = h.engine([], { worker: false });
    await client.start(wf, undefined, { id: "k" });
    for (let i = 0; i < EVENT_HEADS_PAGE + 2; i++) await client.sendEvent("k", "x", i);
    const held = gate();
    let reads = 0;
    const store = around(h.store(), {
      pendingEventHeadsNamed: async (call, ...args) => {
        // The second page's read waits until the engine is closing.
        if (++reads === 2) await held.opened;
        return call(...args);
      },
    });
    const first = h.engine([wf], { store });
    await until(async () => reads >= 2, "the second page's read");
    const closing = first.close();
    held.open();
    await closing;
    const second = h.engine([wf]);
    expect(await advanceUntil(h.clock, second.handle("k").result(), 100)).toEqual(
      range(EVENT_HEADS_PAGE + 2),
    );
  });

  it("an encrypted store reads the pages by name as its inner store does: 130 events taken in order across a sleep", async () => {
    const h = harness();
    const keys = [{ id: "k1", key: randomBytes(32).toString("base64") }];
    const total = EVENT_HEADS_PAGE + 30;
    const wf = workflow({ name: "sealed", version: "1" }, async (ctx) => {
      const xs: unknown[] = [];
      for (let i = 0; i < total; i++) {
        if (i === 50) await ctx.sleep("mid", 10);
        xs.push(got(await ctx.waitForEvent<number>("x")));
      }
      return xs;
    });
    const client = h.engine([], { worker: false, store: encryptedStore(h.store(), { keys }) });
    await client.start(wf, undefined, { id: "s" });
    for (let i = 0; i < total; i++) {
      await client.sendEvent("s", "x", i);
      if (i % 3 === 0) await client.sendEvent("s", "noise", i);
    }
    const e = h.engine([wf], { store: encryptedStore(h.store(), { keys }) });
    expect(await advanceUntil(h.clock, e.handle("s").result(), 100)).toEqual(range(total));
  });

  it("a page read that fails hands the run back; the takes queued behind it are not wedged, and the next execution takes the same events", async () => {
    const h = harness();
    const wf = workflow({ name: "fails", version: "1" }, async (ctx) => {
      const [a, b, c] = await Promise.all([
        ctx.waitForEvent<string>("a"),
        ctx.waitForEvent<string>("b"),
        ctx.waitForEvent<string>("a"),
      ]);
      return [got(a), got(b), got(c)];
    });
    const client = h.engine([], { worker: false });
    await client.start(wf, undefined, { id: "f" });
    await client.sendEvent("f", "a", "a1");
    await client.sendEvent("f", "b", "b1");
    await client.sendEvent("f", "a", "a2");
    let failed = 0;
    const store = around(h.store(), {
      pendingEventHeadsNamed: async (call, ...args) => {
        if ((args[1] as { name: string }).name === "b" && failed++ === 0) {
          throw new Error("the store is away");
        }
        return call(...args);
      },
    });
    const e = h.engine([wf], { store });
    expect(await advanceUntil(h.clock, e.handle("f").result(), 100)).toEqual(["a1", "b1", "a2"]);
    expect(failed).toBeGreaterThan(1);
  });
});

// Generated schedules (SQLite: the read logic is the same code on both backends, which the
// cases above hold on PostgreSQL): pending events of two names (around a page's edges),
// then groups of waits (alone or in Promise.all, some with timeout 0: take one stored by now,
// or time out), a sleep between groups ending the execution; compared with a model that
// hands each wait, in call order, the oldest event of its name not taken.
describe("event reads by name against a model (sqlite)", () => {
  const harness = useHarness("sqlite");
  type Wait = { name: "a" | "b"; now: boolean };
  const waitArb = fc.record({ name: fc.constantFrom<"a" | "b">("a", "b"), now: fc.boolean() });
  const groupArb = fc.record({
    waits: fc.array(waitArb, { minLength: 1, maxLength: 3 }),
    repeat: fc.constantFrom(1, 1, 30, 60),
    sleep: fc.boolean(),
  });
  const countArb = fc.constantFrom(0, 1, 3, 99, 100, 101, 150);

  it("every wait receives what the model gives it", async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        countArb,
        countArb,
        fc.array(groupArb, { maxLength: 5 }),
        async (na, nb, groups) => {
          const h = harness();
          const id = `m${n++}`;
          // The model, which also drops waits without timeout that would wait for ever.
          const left = { a: na, b: nb };
          const taken = { a: 0, b: 0 };
          const plan: Array<{ waits: Wait[]; sleep: boolean }> = [];
          const expected: unknown[] = [];
          for (const g of groups) {
            for (let r = 0; r < g.repeat; r++) {
              const waits = g.waits.filter((w) => {
                if (w.now) return true;
                if (left[w.name] <= 0) return false;
                left[w.name]--;
                return true;
              });
              if (waits.length === 0) continue;
              for (const w of waits) {
                if (w.now) {
                  expected.push(
                    taken[w.name] < (w.name === "a" ? na : nb)
                      ? `${w.name}${taken[w.name]++}`
                      : null,
                  );
                  if (expected[expected.length - 1] !== null) left[w.name]--;
                } else expected.push(`${w.name}${taken[w.name]++}`);
              }
              plan.push({ waits, sleep: g.sleep && r === 0 });
            }
          }
          // Past the model: a plain wait counted from what was left before a "now" wait
          // of the same group took one; keep only plans where every plain wait is served.
          if (left.a < 0 || left.b < 0) return;
          const wf = workflow({ name: "model", version: "1" }, async (ctx) => {
            const out: unknown[] = [];
            for (const [i, step] of plan.entries()) {
              if (step.sleep) await ctx.sleep(`s${i}`, 10);
              const ws = await Promise.all(
                step.waits.map((w) =>
                  ctx.waitForEvent<string>(w.name, w.now ? { timeout: 0 } : undefined),
                ),
              );
              for (const w of ws) out.push(w.timedOut ? null : w.payload);
            }
            return out;
          });
          const client = h.engine([], { worker: false });
          await client.start(wf, undefined, { id });
          for (let i = 0; i < Math.max(na, nb); i++) {
            if (i < na) await client.sendEvent(id, "a", `a${i}`);
            if (i < nb) await client.sendEvent(id, "b", `b${i}`);
          }
          const e = h.engine([wf]);
          expect(await advanceUntil(h.clock, e.handle(id).result(), 50)).toEqual(expected);
          await e.close();
        },
      ),
      { numRuns: 12, seed: 10 },
    );
  });
});
