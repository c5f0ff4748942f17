// The live feed of a run (Server-Sent Events) reads only what can still change on each poll:
// it read every step and event of the run (loadJournal, listEvents) on every poll while
// someone watched. What it holds after each poll is what a reading of everything holds.

import { describe, expect, it } from "vitest";
import { eventJson, stepJson } from "../src/http/json.js";
import { runFeed } from "../src/http/live/feeds.js";
import type { RunState } from "../src/http/live/run-feed.js";
import { type Engine, FatalError, type Store, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

/** `store`, remembering each verb called with its first argument. */
function watchedStore(store: Store, calls: Array<{ verb: string; arg: unknown }>): Store {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function" || typeof prop !== "string") return value;
      return (...args: unknown[]) => {
        calls.push({ verb: prop, arg: args[0] });
        return value.apply(target, args);
      };
    },
  });
}

/** What a feed's reading holds against what the whole-run reads give now. */
async function expectWhole(e: Engine, id: string, s: RunState): Promise<void> {
  expect(s.steps.map((k) => k.json)).toEqual((await e.getSteps(id)).map(stepJson));
  expect(s.events.map((k) => k.json)).toEqual((await e.listEvents(id)).map(eventJson));
}

describe.each(BACKENDS)("a run's live feed (%s)", (backend) => {
  const harness = useHarness(backend);

  it("reads only the steps and events after what has settled on each poll", async () => {
    const h = harness();
    const calls: Array<{ verb: string; arg: unknown }> = [];
    const wf = workflow({ name: "long", version: "1" }, async (ctx) => {
      for (let i = 0; i < 30; i++) await ctx.step(`a${i}`, () => i);
      await ctx.waitForEvent("go");
      for (let i = 0; i < 10; i++) await ctx.step(`b${i}`, () => i);
      return "done";
    });
    const e = h.engine([wf], { store: watchedStore(h.store(), calls) });
    await e.start(wf, undefined, { id: "long" });
    await until(async () => (await e.getRun("long"))?.status === "waiting", "long waits");
    for (let i = 0; i < 6; i++) await e.sendEvent("long", `noise-${i}`, i);
    const feed = runFeed(e, "long", 5);
    const first = await feed.read();
    await expectWhole(e, "long", first);
    await e.sendEvent("long", "go", "now");
    await until(async () => (await e.getRun("long"))?.status === "completed", "long ends");

    calls.length = 0;
    const next = await feed.read(first);
    const verbs = calls.map((c) => c.verb);
    expect(verbs).not.toContain("loadJournal");
    expect(verbs).not.toContain("listEvents");
    // The pages of the 30 calls before the wait but the last had settled, and the six events before "go" stay unconsumed.
    const froms = calls.filter((c) => c.verb === "readJournalPage");
    expect(froms.length).toBeGreaterThan(0);
    for (const c of froms) expect((c.arg as { from: number }).from).toBeGreaterThanOrEqual(25);
    await expectWhole(e, "long", next);
    // The messages are those of two readings of everything.
    expect(feed.changes(first, next)).toEqual(
      runFeed(e, "long").changes(first, await runFeed(e, "long").read()),
    );
  });

  it("holds what a reading of everything holds, through retries, a failure and a resume", async () => {
    const h = harness();
    let broken = true;
    let flaky = 2;
    const wf = workflow({ name: "bumpy", version: "1" }, async (ctx) => {
      for (let i = 0; i < 7; i++) await ctx.step(`a${i}`, () => i);
      await ctx
        .step("caught", () => {
          throw new FatalError("expected");
        })
        .catch(() => "handled");
      await Promise.all([ctx.step("p-z", () => 1), ctx.step("p-a", () => 2)]);
      await ctx.waitForEvent("second");
      await ctx.waitForEvent("first");
      await ctx.step(
        "flaky",
        () => {
          if (flaky-- > 0) throw new Error("again");
          return "ok";
        },
        { retry: { maxAttempts: 5, initialDelay: 1, jitter: false } },
      );
      try {
        await ctx.step("m-fragile", () => {
          if (broken) throw new FatalError("down");
          return 2;
        });
      } catch (err) {
        await ctx.step("zz-handler", () => 3);
        throw err;
      }
      for (let i = 0; i < 7; i++) await ctx.step(`b${i}`, () => i);
      return "done";
    });
    const e = h.engine([wf]);
    const feed = runFeed(e, "bumpy", 2);
    let state = await feed.read();
    // Compared only while the run stands still (a reading and the whole-run reads made a
    // moment apart differ while it executes); polls in between move the feed's positions.
    const poll = async (still = true) => {
      state = await feed.read(state);
      if (still) await expectWhole(e, "bumpy", state);
    };
    const run = await e.start(wf, undefined, { id: "bumpy" });
    await poll(false);
    await until(async () => (await e.getRun("bumpy"))?.status === "waiting", "bumpy waits");
    await poll();
    await e.sendEvent("bumpy", "first", 1);
    await poll(false);
    await e.sendEvent("bumpy", "second", 2);
    await until(async () => {
      await h.clock.advance(1_000);
      await poll(false);
      return (await e.getRun("bumpy"))?.status === "failed";
    }, "bumpy fails");
    await expect(run.result()).rejects.toThrow("down");
    await poll();
    broken = false;
    const resumed = await e.resume("bumpy");
    await poll(false);
    await expect(resumed.result()).resolves.toBe("done");
    await poll();
    expect(state.steps.map((k) => k.key)).toContain("b6");
  });

  it("misses no call a resumed run makes where the failed generation recorded another", async () => {
    // Generation 0: "m-fragile" fails at seq 10, its handler "zz-handler" runs at seq 11.
    // Generation 1: "m-fragile" succeeds; "aa-next" (held) at seq 11 and "ab-quick" at 12.
    // Seqs 10 and 11 then hold completed calls, yet "aa-next" completes at 11 later.
    const h = harness();
    let broken = true;
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const wf = workflow({ name: "again", version: "1" }, async (ctx) => {
      for (let i = 0; i < 10; i++) await ctx.step(`a${i}`, () => i);
      try {
        await ctx.step("m-fragile", () => {
          if (broken) throw new FatalError("down");
          return 2;
        });
      } catch (err) {
        await ctx.step("zz-handler", () => 3);
        throw err;
      }
      await Promise.all([
        ctx.step("aa-next", async () => {
          await held;
          return 4;
        }),
        ctx.step("ab-quick", () => 5),
      ]);
      return "done";
    });
    const e = h.engine([wf]);
    const feed = runFeed(e, "again", 2);
    await expect((await e.start(wf, undefined, { id: "again" })).result()).rejects.toThrow("down");
    let state = await feed.read();
    await expectWhole(e, "again", state);
    broken = false;
    const resumed = await e.resume("again");
    await until(
      async () => (await e.getSteps("again")).some((s) => s.key === "ab-quick"),
      "ab-quick completes",
    );
    state = await feed.read(state);
    release();
    await expect(resumed.result()).resolves.toBe("done");
    state = await feed.read(state);
    await expectWhole(e, "again", state);
    expect(state.steps.find((k) => k.key === "aa-next")?.json.status).toBe("completed");
  });

  it("keeps nothing of a deleted run for another run made under its id", async () => {
    const h = harness();
    const first = workflow({ name: "first", version: "1" }, async (ctx) => {
      for (let i = 0; i < 8; i++) await ctx.step(`old${i}`, () => i);
      return "old";
    });
    const second = workflow({ name: "second", version: "1" }, async (ctx) => {
      for (let i = 0; i < 3; i++) await ctx.step(`new${i}`, () => i);
      return "new";
    });
    const e = h.engine([first, second]);
    await (await e.start(first, undefined, { id: "reused" })).result();
    const feed = runFeed(e, "reused", 2);
    const before = await feed.read();
    await h.clock.advance(60_000);
    expect((await e.gc({ olderThan: 1_000 })).runs).toBe(1);
    await (await e.start(second, undefined, { id: "reused" })).result();
    const after = await feed.read(before);
    await expectWhole(e, "reused", after);
    expect(after.steps.map((k) => k.key)).toEqual(["new0", "new1", "new2"]);
  });

  it("reads a deleted run as a run with nothing", async () => {
    const h = harness();
    const wf = workflow({ name: "brief", version: "1" }, async (ctx) => ctx.step("a", () => 1));
    const e = h.engine([wf]);
    await (await e.start(wf, undefined, { id: "brief" })).result();
    const feed = runFeed(e, "brief", 1);
    const first = await feed.read();
    expect(first.steps).toHaveLength(1);
    await h.clock.advance(60_000);
    expect((await e.gc({ olderThan: 1_000 })).runs).toBe(1);
    const next = await feed.read(first);
    expect(next).toMatchObject({ run: null, steps: [], events: [] });
    expect(feed.changes(first, next)).toEqual([{ event: "run", data: { run: null } }]);
  });
});
