// Replay into changed code, version pinning across deploys, and zombie fencing — each with
// the journal checked afterwards: nothing lost, nothing duplicated, nothing rewritten.

import { afterEach, describe, expect, it } from "vitest";
import {
  createEngine,
  type Engine,
  NonDeterminismError,
  sqliteStore,
  workflow,
} from "../src/index.js";
import type { WriteOutcome } from "../src/store/store.js";
import { createVirtualClock, faultyStore } from "../src/testing/index.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function engineOn(path: string, opts: Parameters<typeof createEngine>[0]): Engine {
  const engine = createEngine({ store: sqliteStore(path), pollIntervalMs: 10, ...opts });
  cleanups.push(() => engine.close());
  return engine;
}

describe("non-determinism", () => {
  it("fails the run naming both calls when replayed code calls a different step, writing nothing", async () => {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    const v1 = workflow({ name: "nd", version: "1" }, async (ctx) => {
      await ctx.step("a", () => 1);
      await ctx.step("b", () => 2);
      await ctx.waitForEvent("go");
      return ctx.step("c", () => 3);
    });
    const e1 = engineOn(db.path, { workflows: [v1] });
    const run = await e1.start(v1, undefined, { id: "nd-1" });
    await until(async () => (await e1.getRun(run.id))?.status === "waiting", "run waits");
    const before = await e1.getSteps(run.id);
    await e1.close();

    let xCalls = 0;
    const changed = workflow({ name: "nd", version: "1" }, async (ctx) => {
      await ctx.step("a", () => 1);
      await ctx.step("x", () => ++xCalls);
      return "changed";
    });
    const e2 = engineOn(db.path, { workflows: [changed] });
    await e2.sendEvent(run.id, "go");
    const err = await e2
      .handle(run.id)
      .result()
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NonDeterminismError);
    expect((err as Error).message).toContain('"x"');
    expect((err as Error).message).toContain('"b"');
    expect((err as Error).message).toContain('"nd-1"');
    expect(xCalls).toBe(0);
    const after = await e2.getSteps(run.id);
    expect(after).toEqual(before);
    expect((await e2.getRun(run.id))?.status).toBe("failed");
  });

  it("after a NonDeterminismError, compatible code under the same version resumes the run", async () => {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    const ran: string[] = [];
    const good = workflow({ name: "nd3", version: "1" }, async (ctx) => {
      await ctx.step("a", () => ran.push("a"));
      await ctx.waitForEvent("go");
      await ctx.step("b", () => ran.push("b"));
      return "ok";
    });
    const e1 = engineOn(db.path, { workflows: [good] });
    const run = await e1.start(good, undefined, { id: "nd-3" });
    await until(async () => (await e1.getRun(run.id))?.status === "waiting", "waits");
    await e1.close();
    const bad = workflow({ name: "nd3", version: "1" }, async (ctx) => {
      await ctx.step("z", () => ran.push("z"));
      return "bad";
    });
    const e2 = engineOn(db.path, { workflows: [bad] });
    await e2.sendEvent(run.id, "go");
    await expect(e2.handle(run.id).result()).rejects.toBeInstanceOf(NonDeterminismError);
    await e2.close();
    const e3 = engineOn(db.path, { workflows: [good] });
    await e3.resume(run.id);
    expect(await e3.handle(run.id).result()).toBe("ok");
    expect(ran).toEqual(["a", "b"]);
  });

  it("detects a different kind of call under a recorded key", async () => {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    const v1 = workflow({ name: "nd2", version: "1" }, async (ctx) => {
      await ctx.step("a", () => 1);
      await ctx.waitForEvent("go");
      return 1;
    });
    const e1 = engineOn(db.path, { workflows: [v1] });
    const run = await e1.start(v1, undefined);
    await until(async () => (await e1.getRun(run.id))?.status === "waiting", "run waits");
    await e1.close();
    const v1b = workflow({ name: "nd2", version: "1" }, async (ctx) => {
      await ctx.sleep("a", 10);
      return 2;
    });
    const e2 = engineOn(db.path, { workflows: [v1b] });
    await e2.sendEvent(run.id, "go");
    const err = await e2
      .handle(run.id)
      .result()
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NonDeterminismError);
    expect((err as Error).message).toMatch(/recorded step "a".*calls sleep "a"/);
  });
});

describe("version pinning: deploy during a live run", () => {
  it("a v1 run is left alone by a v2-only engine, reported, and completed on v1 later", async () => {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    const clock = createVirtualClock();
    const executed: string[] = [];
    const make = (version: string) =>
      workflow({ name: "deploy", version }, async (ctx) => {
        await ctx.step("first", () => executed.push(`first@${version}`));
        await ctx.waitForEvent("continue");
        await ctx.step("second", () => executed.push(`second@${version}`));
        return `done on v${version}`;
      });
    const v1 = make("1");
    const v2 = make("2");
    const e1 = engineOn(db.path, { workflows: [v1], clock });
    const run = await e1.start(v1, undefined, { id: "live" });
    await until(async () => (await e1.getRun(run.id))?.status === "waiting", "v1 run waits");
    await e1.close();

    const e2 = engineOn(db.path, { workflows: [v2], clock, leaseMs: 3000 });
    await e2.sendEvent(run.id, "continue");
    await clock.advance("10s");
    const paused = await until(async () => {
      const r = await e2.getRun(run.id);
      return r?.status === "paused" ? r : undefined;
    }, "v1 run reported paused");
    expect(paused.reason).toBe("no live worker has deploy@1");
    const fresh = await e2.start(v2, undefined, { id: "new-on-v2" });
    await e2.sendEvent(fresh.id, "continue");
    expect(await fresh.result()).toBe("done on v2");
    expect((await e2.getRun(run.id))?.status).toBe("paused");
    expect(executed).toEqual(["first@1", "first@2", "second@2"]);
    await e2.close();

    const e3 = engineOn(db.path, { workflows: [v1, v2], clock });
    expect(await e3.handle(run.id).result()).toBe("done on v1");
    const newer = await e3.start(v2, undefined);
    await e3.sendEvent(newer.id, "continue");
    expect(await newer.result()).toBe("done on v2");
    expect(executed).toEqual(["first@1", "first@2", "second@2", "second@1", "first@2", "second@2"]);
  });
});

describe("zombie fencing", () => {
  it("a worker that stalled past its lease can write nothing after another took the run", async () => {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    const clock = createVirtualClock();
    let releaseGate!: () => void;
    const gate = new Promise<void>((r) => {
      releaseGate = r;
    });
    let slowCalls = 0;
    const wf = workflow({ name: "zombie", version: "1" }, async (ctx) => {
      await ctx.step("one", () => 1);
      const who = await ctx.step("slow", async () => {
        slowCalls++;
        if (slowCalls === 1) {
          await gate;
          return "A";
        }
        return "B";
      });
      await ctx.step("three", () => 3);
      return who;
    });
    const outcomesA: WriteOutcome[] = [];
    const storeA = faultyStore(sqliteStore(db.path), {
      afterAppend: (_w, out) => {
        outcomesA.push(...out);
      },
    });
    const a = createEngine({
      store: storeA,
      workflows: [wf],
      clock,
      leaseMs: 1000,
      pollIntervalMs: 10,
    });
    cleanups.push(() => a.close());
    const run = await a.start(wf, undefined, { id: "z" });
    await until(() => slowCalls === 1, "A inside the slow step");
    // A stalls: it can no longer renew its lease.
    storeA.plan.stalled = new Set(["renewLeases", "heartbeatWorker"]);
    await clock.advance(5000);
    const b = engineOn(db.path, { workflows: [wf], clock, leaseMs: 1000 });
    expect(await b.handle(run.id).result()).toBe("B");
    const okBefore = outcomesA.filter((o) => o.ok).length;
    releaseGate();
    await until(() => outcomesA.length > okBefore, "A attempted its write");
    const late = outcomesA.slice(okBefore);
    expect(late.length).toBeGreaterThan(0);
    expect(late.every((o) => !o.ok && o.reason === "lease-lost")).toBe(true);
    const steps = await b.getSteps(run.id);
    expect(steps.filter((s) => s.kind === "step").map((s) => [s.key, s.result])).toEqual([
      ["one", 1],
      ["slow", "B"],
      ["three", 3],
    ]);
    expect((await b.getRun(run.id))?.output).toBe("B");
  });
});
