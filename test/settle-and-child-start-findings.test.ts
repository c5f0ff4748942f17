// Found by attacking the settle of a run the engine fails (its attempts in flight get a
// grace, then are aborted and recorded with their spend): a cancel, lease loss or close()
// during that settle, a halt in the microtasks after a step returned, work that never ends,
// and a child's creation still in flight when its parent is canceled. Each test fails
// without its mend.

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

/** Far longer than any test runs: a body aborted only once it is over is never aborted. */
const LONG_GRACE = 600_000;

/** A workflow the engine fails (the cairn/ai and workspace seam) while a sibling step runs
 *  until its signal aborts. */
function failingWithSibling(name: string) {
  const state = {
    signal: undefined as AbortSignal | undefined,
    failed: false,
    aborted: false,
  };
  const wf = workflow({ name, version: "1" }, async (ctx) => {
    const slow = ctx.step("slow", async (s) => {
      state.signal = s.signal;
      s.spend({ usd: 1 });
      await new Promise((resolve) => s.signal.addEventListener("abort", resolve));
      state.aborted = true;
      throw s.signal.reason;
    });
    slow.catch(() => {});
    while (state.signal === undefined) await new Promise((r) => setTimeout(r, 2));
    state.failed = true;
    await failRunWith(
      ctx,
      new NonDeterminismError("the recorded response answers another request"),
    );
  });
  return { wf, state };
}

describe("a run the engine failed, settling its attempts in flight, still obeys a stop", () => {
  it("a cancel during the settle aborts the sibling at once (not after abortGraceMs)", async () => {
    const h = harness();
    const { wf, state } = failingWithSibling("settle-cancel");
    const e = h.engine([wf], { abortGraceMs: LONG_GRACE });
    const run = await e.start(wf, undefined);
    await until(() => state.failed, "the engine fails the run");
    // The run is still executing (settling): the cancel is accepted...
    await e.cancel(run.id, "stop it");
    // ...and must reach the body. Fails without the fix: the settle ignores the cancel and
    // the body runs on for the whole grace (ten minutes).
    await until(() => state.aborted, "the sibling is aborted by the cancel");
    await expect(run.result()).rejects.toThrow();
    const slow = (await e.getSteps(run.id)).find((st) => st.key === "slow");
    expect(slow?.attempts.map((a) => a.spend)).toEqual([{ usd: 1 }]);
  });

  it("close() during the settle stops the sibling once closeGraceMs is over, as it does any execution", async () => {
    const h = harness();
    const { wf, state } = failingWithSibling("settle-close");
    const e = h.engine([wf], { abortGraceMs: LONG_GRACE, closeGraceMs: 50 });
    await e.start(wf, undefined);
    await until(() => state.failed, "the engine fails the run");
    await e.close();
    // Fails without the fix: after close() the body still runs, its signal not aborted.
    expect(state.signal?.aborted).toBe(true);
  });
});

describe("the spend of an attempt that ends as the engine fails the run is recorded", () => {
  it("whichever microtask the failure lands in after the body returned", async () => {
    const h = harness();
    const gates = new Map<number, () => void>();
    const wf = workflow({ name: "spend-window", version: "1" }, async (ctx, hops: number) => {
      const opened = new Promise<void>((r) => gates.set(hops, r));
      const slow = ctx.step("slow", async (s) => {
        s.spend({ usd: 1 });
        gates.get(hops)?.();
        return "slow";
      });
      slow.catch(() => {});
      await opened;
      for (let i = 0; i < hops; i++) await null;
      await failRunWith(ctx, new NonDeterminismError("diverged"));
    });
    const e = h.engine([wf], { abortGraceMs: 50 });
    const lost: number[] = [];
    for (let hops = 0; hops <= 24; hops++) {
      const run = await e.start(wf, hops);
      await expect(run.result()).rejects.toThrow("diverged");
      const spent = (await e.getRun(run.id))?.budget.spent;
      if (spent?.usd !== 1) lost.push(hops);
    }
    // Fails without the fix: for some hops the attempt had ended (not halted yet) and the
    // step's record was not yet begun: its spend was written nowhere.
    expect(lost).toEqual([]);
  });
});

describe("a run the engine fails is released even if work other than attempts never ends", () => {
  it("an event schema whose validation never settles does not hold the failed run for ever", async () => {
    const h = harness();
    let validating = false;
    const never = {
      "~standard": {
        version: 1 as const,
        vendor: "test",
        validate: () => {
          validating = true;
          return new Promise<never>(() => {});
        },
      },
    };
    const wf = workflow({ name: "validator-hangs", version: "1" }, async (ctx) => {
      const waited = ctx.waitForEvent("ev", { schema: never });
      waited.catch(() => {});
      while (!validating) await new Promise((r) => setTimeout(r, 2));
      await failRunWith(ctx, new NonDeterminismError("diverged"));
    });
    const e = h.engine([wf], { abortGraceMs: 50 });
    const run = await e.start(wf, undefined);
    await e.sendEvent(run.id, "ev", { x: 1 }); // the running execution hears of it
    // Fails without the fix: the failed run waits for the validation for ever, never
    // released (before 9720e8b it was released at once).
    await until(async () => (await e.getRun(run.id))?.status === "failed", "the run is released");
  });
});

describe("deleteRun and a child run still being created", () => {
  it("a parent canceled while its child's creation is in flight is released only once the child exists, so deleteRun sees it", async () => {
    let hold: (() => void) | undefined;
    let holding = false;
    const gate = new Promise<void>((r) => {
      hold = r;
    });
    // The child's creation is slow (a far database): it lands after whatever comes first.
    const slowChildCreate = (inner: Store): Store =>
      new Proxy(inner, {
        get(target, prop, recv) {
          if (prop === "createRun") {
            return async (run: Parameters<Store["createRun"]>[0]) => {
              if (run.parentId) {
                holding = true;
                await gate;
              }
              return target.createRun(run);
            };
          }
          const v = Reflect.get(target, prop, recv);
          return typeof v === "function" ? v.bind(target) : v;
        },
      });
    const h = harness(slowChildCreate);
    const kid = workflow({ name: "slow-kid", version: "1" }, async (ctx) => {
      await ctx.waitForEvent("never");
    });
    const mom = workflow({ name: "slow-mom", version: "1" }, async (ctx) => {
      await ctx.child("k", kid, null);
    });
    const e = h.engine([mom, kid], { abortGraceMs: 50 });
    const run = await e.start(mom, undefined, { id: "MOM" });
    await until(() => holding, "the child's creation is in flight");
    await e.cancel(run.id, "stop");
    // Give the cancel every chance to release the parent before the child exists.
    for (let i = 0; i < 20 && (await e.getRun("MOM"))?.status !== "canceled"; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    const early = (await e.getRun("MOM"))?.status;
    hold?.();
    await until(async () => (await e.getRun("MOM"))?.status === "canceled", "MOM canceled");
    await until(async () => (await e.getRun("MOM/k")) !== undefined, "the child exists");
    // Fails without the fix: the parent was released (finished, deletable) while its child
    // was still being created, so a deleteRun then found no child and deleted it: the child
    // is left behind, to be adopted by a run started later under the parent's id.
    expect(early).not.toBe("canceled");
  });
});

describe("the bounded settle of a run the engine failed still records the spend", () => {
  it("an aborted sibling whose attempt record is slow to write (past twice the grace) is durable when the run is released", async () => {
    const slowAttempts = (inner: Store): Store =>
      new Proxy(inner, {
        get(target, prop, recv) {
          if (prop === "appendRecords") {
            return async (writes: Parameters<Store["appendRecords"]>[0]) => {
              if (writes.some((w) => (w.attempts?.length ?? 0) > 0)) {
                await new Promise((r) => setTimeout(r, 300));
              }
              return target.appendRecords(writes);
            };
          }
          const v = Reflect.get(target, prop, recv);
          return typeof v === "function" ? v.bind(target) : v;
        },
      });
    const h = harness(slowAttempts);
    const { wf } = failingWithSibling("settle-slow-write");
    const e = h.engine([wf], { abortGraceMs: 20 });
    const run = await e.start(wf, undefined);
    await expect(run.result()).rejects.toThrow("answers another request");
    expect((await e.getRun(run.id))?.budget.spent).toEqual({ usd: 1 });
  });
});
