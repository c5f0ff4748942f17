// Found by a review of child runs, retention and their crash windows: what a parent gets of
// a child after a crash between the child's create and its intent, a child retention
// deletes while its parent reads it, and how soon a parent hears of a child canceled here.

import { describe, expect, it } from "vitest";
import {
  type AnyWorkflow,
  createEngine,
  FatalError,
  NonDeterminismError,
  workflow,
} from "../src/index.js";
import type { RunWrite, StoreHint } from "../src/store/store.js";
import { crashableStore } from "../src/testing/crashable-store.js";
import { waitForStatus } from "../src/testing/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

/** Whether a store write carries the intent of a ctx.child call. */
function writesChildIntent(args: unknown[]): boolean {
  return (args[0] as RunWrite[]).some((w) => w.intents?.some((i) => i.kind === "child"));
}

describe.each(BACKENDS)("%s: a crash between a child's create and its intent", (backend) => {
  const harness = useHarness(backend);

  /** Runs `parent` until its child is created and the intent's write is lost with the
   *  engine; then `change()` alters the code and a new engine takes the parent over. */
  async function crashThenChange(
    h: ReturnType<typeof harness>,
    parent: AnyWorkflow[],
    change: () => void,
  ) {
    const store = crashableStore(h.store(), {
      crashBefore: (call) => call.verb === "appendRecords" && writesChildIntent(call.args),
    });
    const e1 = createEngine({ store, workflows: parent, clock: h.clock, pollIntervalMs: 10 });
    await e1.start(parent[0]!, 1, { id: "p" });
    await until(async () => store.crashed, "crash before the child's intent");
    await store.settled();
    const check = h.store();
    await check.open({ clock: h.clock });
    expect((await check.getRun("p/kid"))?.parentId).toBe("p");
    await check.close();
    change();
    const e2 = h.engine(parent);
    const run = e2.handle("p");
    return advanceUntil(h.clock, run.result(), 1_000, 200);
  }

  it("a call that now hands another input does not adopt the child created before the crash", async () => {
    const h = harness();
    const code = { n: 1 };
    const kid = workflow({ name: "in-kid", version: "1" }, async (ctx, n: number) => {
      await ctx.sleep("nap", "1s");
      return n * 10;
    });
    const parent = workflow({ name: "in-parent", version: "1" }, async (ctx) =>
      ctx.child("kid", kid, code.n),
    );
    const out = crashThenChange(h, [parent, kid], () => {
      code.n = 2;
    });
    // An uninterrupted run of the new code returns 20; the old child returns 10.
    await expect(out).rejects.toBeInstanceOf(NonDeterminismError);
    await expect(out).rejects.toThrow(/key "kid".*another input/);
  });

  it("a call that now names another workflow does not adopt the child created before the crash", async () => {
    const h = harness();
    const code = { other: false };
    const kid = workflow({ name: "wf-kid", version: "1" }, async (ctx, n: number) => {
      await ctx.sleep("nap", "1s");
      return n * 10;
    });
    const other = workflow({ name: "wf-other", version: "1" }, async (_ctx, n: number) => n);
    const parent = workflow({ name: "wf-parent", version: "1" }, async (ctx) =>
      code.other ? ctx.child("kid", other, 1) : ctx.child("kid", kid, 1),
    );
    const out = crashThenChange(h, [parent, kid, other], () => {
      code.other = true;
    });
    await expect(out).rejects.toBeInstanceOf(NonDeterminismError);
    await expect(out).rejects.toThrow(/key "kid".*workflow "wf-kid".*"wf-other"/);
  });

  it("the same call adopts the child created before the crash (its input equal as handed)", async () => {
    const h = harness();
    const kid = workflow(
      { name: "same-kid", version: "1" },
      async (ctx, x: { at: Date; err: Error; bytes: Uint8Array }) => {
        await ctx.sleep("nap", "1s");
        return x.at.getTime();
      },
    );
    const parent = workflow({ name: "same-parent", version: "1" }, async (ctx) =>
      ctx.child("kid", kid, {
        at: new Date(5),
        err: new Error("not compared by stack"),
        bytes: Buffer.from("a view of part of the pool"),
      }),
    );
    const out = await crashThenChange(h, [parent, kid], () => {});
    expect(out).toBe(5);
  });
});

describe.each(BACKENDS)("%s: retention and a resumed parent's finished child", (backend) => {
  const harness = useHarness(backend);

  it("retention keeps a finished child while its parent, resumed, is about to read its outcome", async () => {
    const h = harness();
    let broken = true;
    const kid = workflow({ name: "gc-kid", version: "1" }, async (ctx) => {
      await ctx.sleep("nap", "1m");
      return "kid's output";
    });
    // The parent fails while its child still sleeps; the child's result event, sent when it
    // completes, is dropped here, as a cairn before failed parents kept their children's ends
    // dropped it (a run of such a store resumed now): the resumed parent reads the child's run.
    const parent = workflow({ name: "gc-parent", version: "1" }, async (ctx) => {
      const [got] = await Promise.all([
        ctx.child("kid", kid, undefined),
        ctx.step("flaky", () => {
          if (broken) throw new FatalError("flaky is broken");
          return "ok";
        }),
      ]);
      return got;
    });
    const collector = h.engine([], { worker: false });
    let collected: Promise<unknown> | undefined;
    const inner = h.store();
    const store = new Proxy(inner, {
      get(t, p) {
        if (p === "releaseRun") {
          return (r: Parameters<typeof t.releaseRun>[0]) =>
            t.releaseRun(r.runId === "gp/kid" ? { ...r, events: [] } : r);
        }
        if (p === "getRun") {
          return async (id: string) => {
            // Retention runs in the instant the resumed parent reads its child's outcome.
            if (id === "gp/kid" && !broken && collected === undefined) {
              collected = collector.gc({ olderThan: 0 });
              await collected;
            }
            return t.getRun(id);
          };
        }
        const v = Reflect.get(t, p, t);
        return typeof v === "function" ? v.bind(t) : v;
      },
    });
    const e = createEngine({ store, workflows: [parent, kid], clock: h.clock, pollIntervalMs: 10 });
    const run = await e.start(parent, undefined, { id: "gp" });
    await expect(run.result()).rejects.toThrow("flaky is broken");
    await advanceUntil(h.clock, waitForStatus(e, "gp/kid", "completed"), 1_000);
    await h.clock.advance(1_000);
    broken = false;
    await e.resume("gp");
    expect(await run.result()).toBe("kid's output");
    expect(collected).toBeDefined();
    expect((await e.getRun("gp/kid"))?.status).toBe("completed");
  });

  it("gc, and its dry run, count no finished child of an unfinished parent", async () => {
    const h = harness();
    const kid = workflow({ name: "count-kid", version: "1" }, async () => "done");
    const parent = workflow({ name: "count-parent", version: "1" }, async (ctx) => {
      const got = await ctx.child("kid", kid, undefined);
      await ctx.waitForEvent("go");
      return got;
    });
    const e = h.engine([parent, kid]);
    const run = await e.start(parent, undefined, { id: "cp" });
    await until(
      async () =>
        (await e.getRun("cp"))?.status === "waiting" &&
        (await e.getSteps("cp")).some((s) => s.key === "go"),
      "the parent waiting for go, its child's result recorded",
    );
    expect((await e.getRun("cp/kid"))?.status).toBe("completed");
    await h.clock.advance(1_000);
    expect((await e.gc({ olderThan: 0, dryRun: true })).runs).toBe(0);
    expect((await e.gc({ olderThan: 0 })).runs).toBe(0);
    await e.sendEvent("cp", "go", null);
    expect(await run.result()).toBe("done");
    await h.clock.advance(1_000);
    expect((await e.gc({ olderThan: 0, dryRun: true })).runs).toBe(2);
    expect((await e.gc({ olderThan: 0 })).runs).toBe(2);
  });
});

describe.each(BACKENDS)("%s: a parent executing here hears of its child at once", (backend) => {
  const harness = useHarness(backend);

  /** A parent whose step is in flight (it executes, not suspended) while it awaits its
   *  child; the worker polls once an hour of a clock that never moves, so only a wake-up
   *  from the store's hint can hand the parent its child's outcome. */
  async function parentAwaitingChild(
    h: ReturnType<typeof harness>,
    kidDoes: "waits" | "works" | "finishes",
  ) {
    let heard: string | undefined;
    let kidWorking = false;
    let openParent!: () => void;
    const parentGate = new Promise<void>((r) => {
      openParent = r;
    });
    let finishKid!: () => void;
    const kidGate = new Promise<void>((r) => {
      finishKid = r;
    });
    const kid = workflow({ name: `now-kid-${kidDoes}`, version: "1" }, async (ctx) => {
      if (kidDoes === "waits") await ctx.waitForEvent("never");
      else if (kidDoes === "works") {
        await ctx.step(
          "work",
          (s) =>
            new Promise((_, reject) => {
              kidWorking = true;
              s.signal.addEventListener("abort", () => reject(s.signal.reason));
            }),
        );
      } else {
        await ctx.step("work", () => {
          kidWorking = true;
          return kidGate;
        });
      }
      return "kid done";
    });
    const parent = workflow({ name: `now-parent-${kidDoes}`, version: "1" }, async (ctx) => {
      const child = ctx.child("kid", kid, undefined).then(
        (v) => v,
        (err: Error) => err.name,
      );
      const slow = ctx.step("slow", () => parentGate.then(() => "slow"));
      heard = await child;
      return [heard, await slow];
    });
    const e = h.engine([parent, kid], { pollIntervalMs: 3_600_000 });
    const run = await e.start(parent, undefined, { id: "np" });
    await until(async () => {
      if (kidDoes !== "waits") return kidWorking;
      // The child is polled for once it exists (getSteps refuses a run not created yet).
      if (!(await e.getRun("np/kid"))) return false;
      return (await e.getSteps("np/kid")).some((s) => s.key === "never");
    }, "the child under way");
    return { e, run, heard: () => heard, openParent, finishKid };
  }

  it("a child canceled while it waits", async () => {
    const t = await parentAwaitingChild(harness(), "waits");
    await t.e.cancel("np/kid", "not needed");
    await until(() => t.heard(), "the parent hears of its child's cancel", 5_000);
    t.openParent();
    expect(await t.run.result()).toEqual(["RunCanceledError", "slow"]);
  });

  it("a child canceled while its step runs here", async () => {
    const t = await parentAwaitingChild(harness(), "works");
    await t.e.cancel("np/kid", "not needed");
    await until(() => t.heard(), "the parent hears of its child's cancel", 5_000);
    t.openParent();
    expect(await t.run.result()).toEqual(["RunCanceledError", "slow"]);
  });

  it("a child that completes here", async () => {
    const t = await parentAwaitingChild(harness(), "finishes");
    t.finishKid();
    await until(() => t.heard(), "the parent hears of its child's output", 5_000);
    t.openParent();
    expect(await t.run.result()).toEqual(["kid done", "slow"]);
  });
});

describe.each(BACKENDS)("%s: a child canceled as it suspends", (backend) => {
  const harness = useHarness(backend);

  it("hands its parent the cancel's reason, as the child's run and a resumed parent read it", async () => {
    const h = harness();
    let working = false;
    let finishStep!: () => void;
    const gate = new Promise<void>((r) => {
      finishStep = r;
    });
    const kid = workflow({ name: "sus-kid", version: "1" }, async (ctx) => {
      // Ignores the abort: the step ends when the gate opens, then the kid suspends.
      await ctx.step("work", () => {
        working = true;
        return gate;
      });
      await ctx.waitForEvent("never");
      return "kid done";
    });
    const parent = workflow({ name: "sus-parent", version: "1" }, async (ctx) => {
      try {
        return await ctx.child("kid", kid, undefined);
      } catch (err) {
        return (err as Error).message;
      }
    });
    // The executing engine does not hear of the cancel (no hint, no heartbeat before the
    // kid suspends): its release to waiting meets the requested cancel in the store.
    const inner = h.store();
    const store = new Proxy(inner, {
      get(t, p) {
        if (p === "subscribe") {
          return (listener: (hint: StoreHint) => void) =>
            t.subscribe((hint) => {
              if (hint.kind !== "cancel") listener(hint);
            });
        }
        const v = Reflect.get(t, p, t);
        return typeof v === "function" ? v.bind(t) : v;
      },
    });
    const e = createEngine({
      store,
      workflows: [parent, kid],
      clock: h.clock,
      pollIntervalMs: 10,
      leaseMs: 3_600_000,
    });
    const other = h.engine([], { worker: false });
    try {
      const run = await e.start(parent, undefined, { id: "sus" });
      await until(() => working, "the kid's step under way");
      await other.cancel("sus/kid", "not needed any more");
      finishStep();
      const seen = await run.result();
      await expect(other.handle("sus/kid").result()).rejects.toThrow(seen);
      expect(seen).toBe('Run "sus/kid" was canceled: not needed any more');
    } finally {
      await e.close();
    }
  });
});

describe("a child created before a crash, its input a part view stored the old way", () => {
  // Before a3199a7 a view of part of a buffer was stored with the whole buffer and an offset;
  // a parent that crashed between such a child's create and its intent, resumed by this code,
  // hands the same bytes, now stored as the bytes alone. Compared by digest (a part view is
  // not a whole one), it was "another input": NonDeterminismError for an unchanged call.
  it("is the same input as the same bytes handed now", async () => {
    const { sameInputAsHanded } = await import("../src/engine/start-run.js");
    const kid = workflow({ name: "old-view-kid", version: "1" }, async () => null);
    // { file: new Uint8Array(<16 bytes 0..15>, 4, 4) } as the code before a3199a7 stored it.
    const storedBefore =
      '[{"file":1},["Uint8Array",2,4,4],["ArrayBuffer","AAECAwQFBgcICQoLDA0ODw=="]]';
    const run = { input: storedBefore, version: "1" } as Parameters<typeof sameInputAsHanded>[0];
    const bytes = new Uint8Array(16).map((_, i) => i);
    expect(sameInputAsHanded(run, kid, { file: bytes.subarray(4, 8) })).toBe(true);
    expect(sameInputAsHanded(run, kid, { file: bytes.subarray(5, 9) })).toBe(false);
  });
});
