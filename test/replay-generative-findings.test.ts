// Findings of the generative replay test (test/replay-generative.test.ts), each as the
// smallest program that shows it: A, B and C are bugs of their own; D and E are consequences
// of the ordering and divergence rules of docs/API.md ("Replay rules") that deserve a test of
// their own. Each says what should happen.

import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  createEngine,
  type Engine,
  FatalError,
  realClock,
  type Store,
  sqliteStore,
  workflow,
} from "../src/index.js";
import type { RunWrite } from "../src/store/store.js";
import { crashableStore } from "../src/testing/crashable-store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { tempDir } from "./helpers/sqlite.js";

const pause = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function dbPath(): string {
  const tmp = tempDir("cairn-findings-");
  cleanups.push(tmp.cleanup);
  return join(tmp.dir, "cairn.db");
}

function engineOn(store: Store, opts: Parameters<typeof createEngine>[0] = {}): Engine {
  const e = createEngine({ store, pollIntervalMs: 5, ...opts });
  cleanups.push(() => e.close());
  return e;
}

/** The run's result, or a string saying where it was after `ms` of real time. */
async function resultWithin(engine: Engine, id: string, ms: number): Promise<unknown> {
  const late = pause(ms).then(async () => {
    const r = await engine.getRun(id);
    return `not finished after ${ms} ms: status ${r?.status}, waiting for [${r?.waitingFor ?? ""}]`;
  });
  return Promise.race([engine.handle(id).result(), late]);
}

describe("generative replay findings", () => {
  it("A: awaiting non-durable I/O while another branch waits does not park the run", async () => {
    // The execution suspends when every branch is blocked and nothing is active; a branch
    // awaiting a timer or a file read is neither, so the run is released as waiting for
    // "cancel" and the rest of the workflow never runs (found as runs parked for 20 days).
    const wf = workflow({ name: "io-park", version: "1" }, async (ctx) => {
      void ctx.waitForEvent("cancel").catch(() => {}); // a background wait, never answered
      await pause(50); // ordinary I/O in workflow code
      return ctx.step("work", () => "finished");
    });
    const engine = engineOn(sqliteStore(dbPath()), { workflows: [wf] });
    const run = await engine.start(wf, {});
    expect(await resultWithin(engine, run.id, 3_000)).toBe("finished");
  });

  it("B: a child's result reaches its parent while the parent is still executing", async () => {
    // Both stores wake a parent for its child's result (and any run for an event sent from
    // another process) only if it is released as waiting; an execution that stays in memory
    // because another branch runs a step never re-reads its events, so the child's result
    // waits until that step ends. Here the race goes to a step that finished 500 ms after the
    // child; a step that waits for something the child does never finishes (a hang).
    const quick = workflow({ name: "quick", version: "1" }, async (ctx) =>
      ctx.step("q", () => "child"),
    );
    const parent = workflow({ name: "racer", version: "1" }, async (ctx) =>
      Promise.race([
        ctx.child("kid", quick, {}),
        ctx.step("slow", async () => {
          await pause(500);
          return "slow step";
        }),
      ]),
    );
    const engine = engineOn(sqliteStore(dbPath()), { workflows: [quick, parent] });
    const run = await engine.start(parent, {});
    expect(await run.result()).toBe("child");
  });

  it("C: a wait longer than 2^31 ms held in memory does not spin", async () => {
    // realClock.sleep hands the delay to setTimeout, which fires after 1 ms for delays over
    // 2^31-1 (24.8 days) with a TimeoutOverflowWarning: while another branch keeps the
    // execution in memory, a 30-day sleep (or wait timeout) wakes up every millisecond.
    let sleeps = 0;
    const clock = {
      ...realClock,
      sleep: (ms: number, signal?: AbortSignal) => {
        sleeps++;
        return realClock.sleep(ms, signal);
      },
    };
    const wf = workflow({ name: "long-deadline", version: "1" }, async (ctx) =>
      Promise.race([
        ctx.sleep("deadline", "30d").then(() => "deadline"),
        ctx.step("work", async () => {
          await pause(300);
          return "work";
        }),
      ]),
    );
    const engine = engineOn(sqliteStore(dbPath()), { workflows: [wf], clock });
    const run = await engine.start(wf, {});
    expect(await run.result()).toBe("work");
    expect(sleeps, "clock.sleep calls while a 300 ms step ran").toBeLessThan(10);
  });

  it("D (bug 4): a caught step failure does not fail a later replay with NonDeterminismError", async () => {
    // The failure is recorded only as an attempt, not as the call's outcome: any replay (here
    // after a durable sleep) finds no record for "x" while "y" is still unreplayed.
    const clock = createVirtualClock();
    const wf = workflow({ name: "caught", version: "1" }, async (ctx) => {
      let caught = "";
      try {
        await ctx.step("x", () => {
          throw new FatalError("no");
        });
      } catch (err) {
        caught = (err as Error).message;
      }
      await ctx.step("y", () => 1);
      await ctx.sleep("nap", 10); // the run suspends; waking up replays it from the top
      return caught;
    });
    const engine = engineOn(sqliteStore(dbPath()), { workflows: [wf], clock });
    const run = await engine.start(wf, {});
    const result = run.result().then(
      (v) => v,
      (err: Error) => `failed: ${err.message}`,
    );
    for (let i = 0; i < 100; i++) {
      await clock.advance(5);
      await pause(2);
    }
    expect(await result).toBe("no");
  });

  it("E (bug 7): a FatalError recorded before a crash is not retried after it", async () => {
    // The worker dies right after the fatal attempt of "a" is committed, with nothing in
    // flight. The recovering execution records a crashed attempt (WORKER_LOST) for "a" anyway,
    // which makes "a" retryable again: its body runs a second time.
    const clock = createVirtualClock();
    const path = dbPath();
    let bodies = 0;
    const wf = workflow({ name: "fatal-once", version: "1" }, async (ctx) => {
      try {
        await ctx.step("a", () => {
          bodies++;
          throw new FatalError("no");
        });
      } catch {}
      return ctx.step("b", () => "done");
    });
    const dying = crashableStore(sqliteStore(path), {
      crashAfter: (call) =>
        call.verb === "appendRecords" &&
        (call.args[0] as RunWrite[]).some((w) => w.attempts?.some((a) => a.key === "a")),
    });
    const first = createEngine({ store: dying, workflows: [wf], clock, pollIntervalMs: 5 });
    const run = await first.start(wf, {});
    for (let i = 0; i < 500 && !dying.crashed; i++) await pause(2);
    expect(dying.crashed).toBe(true);
    void first.close(); // stops its timers; everything else it tries hangs on the dead store
    await clock.advance(30_001); // the dead worker's lease runs out
    const second = engineOn(sqliteStore(path), { workflows: [wf], clock });
    expect(await second.handle(run.id).result()).toBe("done");
    expect(bodies, "executions of the fatal step's body").toBe(1);
  });
});
