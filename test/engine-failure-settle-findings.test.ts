// The end-of-run settle (context.ts settleInFlight): a run the ENGINE fails (a divergence
// found on replay, or the fail-the-run seam of cairn/ai and workspaces, lib/fail-run.ts)
// settles the attempts still running in other branches as a workflow that throws does:
// they get abortGraceMs to finish, are then aborted, and are recorded with their spend, so
// a resume runs them again and ctx.budget counts what they cost. And the settle waits for
// the work in flight without polling, leaving no timer behind.

import { afterEach, describe, expect, it, vi } from "vitest";
import {
  type AnyWorkflow,
  createEngine,
  type Engine,
  type EngineOptions,
  NonDeterminismError,
  type Store,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { failRunWith } from "../src/lib/fail-run.js";
import { createVirtualClock } from "../src/testing/index.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const c of cleanups.splice(0).reverse()) await c();
});

function harness(wrap: (s: Store) => Store = (s) => s) {
  const clock = createVirtualClock();
  const db = tempDbPath();
  cleanups.push(db.cleanup);
  return {
    clock,
    engine(workflows: AnyWorkflow[], opts: Omit<EngineOptions, "workflows"> = {}): Engine {
      const e = createEngine({
        store: wrap(sqliteStore(db.path)),
        workflows,
        clock,
        pollIntervalMs: 10,
        replayStallMs: 3_000,
        ...opts,
      });
      cleanups.push(() => e.close());
      return e;
    },
  };
}

/** A store whose writes of attempt records take `ms`: a slow disk, a far database. */
function slowAttemptWrites(inner: Store, ms: number): Store {
  return new Proxy(inner, {
    get(target, prop, recv) {
      if (prop === "appendRecords") {
        return async (writes: Parameters<Store["appendRecords"]>[0]) => {
          if (writes.some((w) => (w.attempts?.length ?? 0) > 0)) await delay(ms);
          return target.appendRecords(writes);
        };
      }
      const v = Reflect.get(target, prop, recv);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

describe("a run the engine fails settles the attempts in flight", () => {
  it("a replay found diverging (a recorded call never made) while a sibling runs: the sibling is aborted after the grace and recorded with its spend; a resume runs it again", async () => {
    const h = harness();
    let phase: 1 | 2 | 3 = 1;
    let slowStarted = 0;
    let slowAborted = false;
    let spentSeen: unknown;
    const wf = workflow({ name: "diverge-sibling", version: "1" }, async (ctx) => {
      if (phase === 1) {
        await ctx.step("a", () => "a");
        await delay(5);
        ctx.now("t"); // drawn late: a replay demands it by the time the function settles
        await ctx.waitForEvent("go");
        return "unreached";
      }
      const slow = ctx.step("slow", async (s) => {
        slowStarted++;
        s.spend({ usd: 1 }); // charged at once, as a provider does
        if (phase === 3) return "slow";
        // Runs until aborted (far past the grace), then stops as asked.
        await new Promise((resolve) => s.signal.addEventListener("abort", resolve));
        slowAborted = true;
        throw s.signal.reason;
      });
      slow.catch(() => {});
      await ctx.step("a", () => "a");
      if (phase === 2) {
        while (slowStarted === 0) await delay(5);
        return "diverged"; // never draws "t" again: NonDeterminismError, slow still running
      }
      await delay(5);
      ctx.now("t");
      const out = await slow;
      spentSeen = ctx.budget.spent;
      return out;
    });
    const e = h.engine([wf], { abortGraceMs: 50, replayStallMs: 200 });
    const run = await e.start(wf, undefined);
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "waits for go");
    phase = 2;
    await e.sendEvent(run.id, "go", null);
    await expect(run.result()).rejects.toThrow(/never called/);
    const failed = await e.getRun(run.id);
    expect(failed?.status).toBe("failed");
    expect(failed?.error?.name).toBe("NonDeterminismError");
    expect(slowStarted).toBe(1);
    // Fails without the fix: the sibling is never aborted (it would run for ever)...
    expect(slowAborted).toBe(true);
    // ...and its spend is not recorded.
    const slowSteps = (await e.getSteps(run.id)).find((st) => st.key === "slow");
    expect(slowSteps?.attempts.map((a) => a.spend)).toEqual([{ usd: 1 }]);
    expect(failed?.budget.spent).toEqual({ usd: 1 });
    // Only an attempt: the diverged execution recorded no outcome of its own calls.
    expect(slowSteps?.status).not.toBe("completed");
    phase = 3;
    await e.resume(run.id);
    expect(await run.result()).toBe("slow");
    expect(slowStarted).toBe(2);
    expect(spentSeen).toEqual({ usd: 2 });
  });

  it("a replay failed through the cairn/ai and workspace seam (FAIL_RUN) while a sibling runs: the sibling finishes within the grace, its spend is recorded", async () => {
    const h = harness();
    let phase: 1 | 2 | 3 = 1;
    let slowCalls = 0;
    let slowDone = 0;
    const wf = workflow({ name: "fail-run-sibling", version: "1" }, async (ctx) => {
      if (phase === 1) {
        await ctx.step("a", () => "answer to request 1");
        await ctx.waitForEvent("go");
        return undefined;
      }
      const slow = ctx.step("slow", async (s) => {
        slowCalls++;
        s.spend({ usd: 1 });
        await delay(40);
        slowDone++;
        return "slow";
      });
      slow.catch(() => {});
      const a = await ctx.step("a", () => "answer to request 2");
      if (phase === 2) {
        while (slowCalls === 0) await delay(5);
        // As cairn/ai does when a replayed model call answered another request.
        if (a !== "answer to request 2") {
          await failRunWith(
            ctx,
            new NonDeterminismError("the recorded response answers another request"),
          );
        }
      }
      const out = await slow;
      return { out, spent: ctx.budget.spent };
    });
    const e = h.engine([wf], { abortGraceMs: 2_000 });
    const run = await e.start(wf, undefined);
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "waits for go");
    phase = 2;
    await e.sendEvent(run.id, "go", null);
    await expect(run.result()).rejects.toThrow("answers another request");
    // Fails without the fix: the run ended at once, the sibling still running.
    expect(slowDone).toBe(1);
    const failed = await e.getRun(run.id);
    expect(failed?.status).toBe("failed");
    expect(failed?.error?.name).toBe("NonDeterminismError");
    const slowSteps = (await e.getSteps(run.id)).find((st) => st.key === "slow");
    expect(slowSteps?.attempts.map((a) => a.spend)).toEqual([{ usd: 1 }]);
    expect(failed?.budget.spent).toEqual({ usd: 1 });
    phase = 3;
    await e.resume(run.id);
    expect(await run.result()).toEqual({ out: "slow", spent: { usd: 2 } });
    expect(slowCalls).toBe(2);
  });
});

describe("the settle waits without polling", () => {
  it("a completed run whose aborted loser's record is slow to write: no 1 ms timers, and the run ends only once that spend is durable", async () => {
    const h = harness((s) => slowAttemptWrites(s, 150));
    const wf = workflow({ name: "slow-loser-write", version: "1" }, async (ctx) =>
      Promise.race([
        ctx.step("fast", () => "fast"),
        ctx.step("loser", async (s) => {
          s.spend({ usd: 2 });
          await new Promise((resolve) => s.signal.addEventListener("abort", resolve));
          throw s.signal.reason;
        }),
      ]),
    );
    const e = h.engine([wf], { abortGraceMs: 5_000 });
    await e.start(wf, undefined).then((r) => r.result()); // warm up: open, first run
    const timers = vi.spyOn(globalThis, "setTimeout");
    const run = await e.start(wf, undefined);
    expect(await run.result()).toBe("fast");
    const oneMs = timers.mock.calls.filter((c) => c[1] === 1).length;
    timers.mockRestore();
    // Fails without the fix: the settle polled every 1 ms while the write was in flight.
    expect(oneMs).toBe(0);
    // Waited correctly: the loser's spend was durable before the run was released.
    expect((await e.getRun(run.id))?.budget.spent).toEqual({ usd: 2 });
  });

  it("a failed run whose sibling finishes within a long grace ends then, and clears the grace's timer", async () => {
    const h = harness();
    const GRACE = 987_654;
    const wf = workflow({ name: "grace-timer", version: "1" }, async (ctx) => {
      await Promise.all([
        ctx.step("sibling", async (s) => {
          await delay(40);
          s.spend({ usd: 1 });
          return "done";
        }),
        ctx.step(
          "check",
          () => {
            throw new Error("check failed");
          },
          { retry: { maxAttempts: 1 } },
        ),
      ]);
    });
    const e = h.engine([wf], { abortGraceMs: GRACE });
    const handles: Array<{ _destroyed?: boolean }> = [];
    const spy = vi.spyOn(globalThis, "setTimeout");
    const run = await e.start(wf, undefined);
    await expect(run.result()).rejects.toThrow("check failed");
    expect((await e.getRun(run.id))?.budget.spent).toEqual({ usd: 1 });
    for (const [i, c] of spy.mock.calls.entries()) {
      if (c[1] === GRACE) handles.push(spy.mock.results[i]?.value);
    }
    spy.mockRestore();
    expect(handles.length).toBeGreaterThan(0);
    // Fails without the fix: the grace's timer is left pending after the run ended.
    expect(handles.filter((t) => t._destroyed !== true).length).toBe(0);
  });
});
