// A cancel commits the parent, then cancels its unfinished children one by one after it
// (cancel-children.ts). When the process that canceled the parent dies (or its store fails)
// between the two, the workers' sweep of children of canceled runs cancels those left
// behind (engine/children-of-canceled.ts, Store.listChildrenOfCanceled): with the
// cascade's reason, their own children with them, an executing one stopped within a
// heartbeat, a finished one left as it is; two workers sweeping at once cancel each child
// once. Without the sweep every child below stays unfinished for ever.

import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { createEngine, type Engine, encryptedStore, type Store, workflow } from "../src/index.js";
import { BACKENDS, type Harness, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const never = workflow({ name: "never", version: "1" }, async (ctx) => {
  const e = await ctx.waitForEvent("never");
  return e.timedOut;
});
const go = workflow({ name: "go", version: "1" }, async (ctx) => {
  await ctx.waitForEvent("go");
  return "went";
});
/** A child that has a child of its own, waiting for ever. */
const middle = workflow({ name: "middle", version: "1" }, async (ctx) =>
  ctx.child("g", never, undefined),
);
const chain = workflow({ name: "chain", version: "1" }, async (ctx) =>
  ctx.child("k", middle, undefined),
);
const two = workflow({ name: "two", version: "1" }, async (ctx) =>
  Promise.all([ctx.child("a", never, undefined), ctx.child("b", go, undefined)]),
);
const started = new Set<string>();
/** A child executing a step until its run is canceled. */
const busy = workflow({ name: "busy", version: "1" }, async (ctx) =>
  ctx.step(
    "work",
    (s) =>
      new Promise<string>((_resolve, reject) => {
        started.add(ctx.runId);
        s.signal.addEventListener("abort", () => reject(s.signal.reason));
      }),
  ),
);
/** A parent executing a step (until canceled) beside its waiting child. */
const holding = workflow({ name: "holding", version: "1" }, async (ctx) =>
  Promise.all([
    ctx.child("c", never, undefined),
    ctx.step(
      "hold",
      (s) =>
        new Promise<string>((_resolve, reject) => {
          s.signal.addEventListener("abort", () => reject(s.signal.reason));
        }),
    ),
  ]),
);
const busyParent = workflow({ name: "busy-parent", version: "1" }, async (ctx) =>
  ctx.child("k", busy, undefined),
);

/** A store whose listRuns by parent fails: the cascade's first read. */
function cascadeCut(inner: Store): Store {
  return new Proxy(inner, {
    get(t, prop, recv) {
      const v = Reflect.get(t, prop, recv);
      if (prop === "listRuns") {
        return async (f: { parentId?: string }) => {
          if (f?.parentId !== undefined) throw new Error("connection lost (injected)");
          return (v as (x: unknown) => unknown).call(t, f);
        };
      }
      return typeof v === "function" ? v.bind(t) : v;
    },
  }) as Store;
}

/** Cancels run `id` from a client whose cascade to the children fails: the parent ends
 *  canceled, its children are left as they were. */
async function cancelCut(h: Harness, id: string, store = h.store()): Promise<void> {
  const client = createEngine({
    store: cascadeCut(store),
    workflows: [],
    clock: h.clock,
    worker: false,
  });
  await expect(client.cancel(id, "stop")).rejects.toThrow(/cancel run .* again/);
  await client.close();
}

async function statusOf(e: Engine, id: string) {
  return (await e.getRun(id))?.status;
}

describe.each(BACKENDS)("%s: the children a cancel's cascade left behind", (backend) => {
  const harness = useHarness(backend);

  it("a grandchild chain: the child and the grandchild end canceled, each citing its parent", async () => {
    const h = harness();
    const w = h.engine([chain, middle, never]);
    await w.start(chain, undefined, { id: "p" });
    await until(async () => (await statusOf(w, "p/k/g")) === "waiting", "grandchild waits");
    await until(async () => (await statusOf(w, "p/k")) === "waiting", "child waits");
    await until(async () => (await statusOf(w, "p")) === "waiting", "parent waits");
    await cancelCut(h, "p");
    expect(await statusOf(w, "p/k")).toBe("waiting");
    // A worker started since sweeps as it starts.
    const w2 = h.engine([]);
    await until(async () => (await statusOf(w2, "p/k/g")) === "canceled", "grandchild canceled");
    const k = await w2.getRun("p/k");
    const g = await w2.getRun("p/k/g");
    expect(k?.status).toBe("canceled");
    expect(k?.reason).toBe('its parent run "p" was canceled: stop');
    expect(g?.reason).toBe(
      'its parent run "p/k" was canceled: its parent run "p" was canceled: stop',
    );
  });

  it("a child executing on another worker is told, and stops within a heartbeat", async () => {
    const h = harness();
    // The set is the module's: the backend before this one put "p/k" in it, and the wait
    // below passed before this backend's child had begun (it was still pending).
    started.clear();
    const wA = h.engine([busyParent]);
    const wB = h.engine([busy]);
    await wA.start(busyParent, undefined, { id: "p" });
    await until(() => started.has("p/k"), "the child's step runs on the other worker");
    await until(async () => (await statusOf(wA, "p")) === "waiting", "parent waits");
    await cancelCut(h, "p");
    expect(await statusOf(wB, "p/k")).toBe("running");
    // A sweeping worker asks the cancel; the worker executing the child hears it with its
    // next heartbeat.
    const w3 = h.engine([]);
    const reader = h.store();
    await reader.open({ clock: h.clock });
    await until(async () => (await reader.getRun("p/k"))?.cancelRequested, "cancel requested");
    await reader.close();
    expect(await statusOf(w3, "p/k")).toBe("running");
    await h.clock.advance(10_000);
    await until(async () => (await statusOf(wB, "p/k")) === "canceled", "child canceled");
    expect((await wB.getRun("p/k"))?.reason).toBe('its parent run "p" was canceled: stop');
  });

  it("a child that completed meanwhile stays completed; its unfinished sibling is canceled", async () => {
    const h = harness();
    const w = h.engine([two, never, go]);
    await w.start(two, undefined, { id: "p" });
    await until(async () => (await statusOf(w, "p/b")) === "waiting", "b waits");
    await until(async () => (await statusOf(w, "p/a")) === "waiting", "a waits");
    await w.sendEvent("p/b", "go", null);
    await until(async () => (await statusOf(w, "p/b")) === "completed", "b completed");
    // The parent took b's end (its call is recorded completed) and waits for a again.
    await until(async () => {
      const b = (await w.getSteps("p")).find((s) => s.key === "b");
      return b?.status === "completed" && (await statusOf(w, "p")) === "waiting";
    }, "parent waits for a");
    await cancelCut(h, "p");
    const w2 = h.engine([]);
    await until(async () => (await statusOf(w2, "p/a")) === "canceled", "a canceled");
    const b = await w2.getRun("p/b");
    expect(b?.status).toBe("completed");
    expect(b?.reason ?? null).toBeNull();
  });

  it("more children than one batch are all canceled", async () => {
    const h = harness();
    const store = h.store();
    await store.open({ clock: h.clock });
    const run = { workflow: "never", version: "1", input: "null", budgetLimit: {} };
    await store.createRun({ ...run, id: "p" });
    const ids = Array.from({ length: 130 }, (_, i) => `p/c${i}`);
    for (const id of ids) await store.createRun({ ...run, id, parentId: "p" });
    // Canceled by the store alone: no cascade at all.
    expect((await store.requestCancel("p", "stop")).state).toBe("canceled");
    await store.close();
    const w = h.engine([]);
    // The sweep cancels the 130 children one transaction (and a few round trips) each: on
    // PostgreSQL under load (three test files at once beside other work) that took 24-42 s,
    // past until()'s default bound of 20 s; the bound only catches a sweep that stops.
    await until(
      async () => {
        const runs = await w.listRuns({ parentId: "p", limit: 1000 });
        return runs.length === ids.length && runs.every((r) => r.status === "canceled");
      },
      "every child canceled",
      90_000,
    );
    const reasons = new Set(
      (await w.listRuns({ parentId: "p", limit: 1000 })).map((r) => r.reason),
    );
    expect([...reasons]).toEqual(['its parent run "p" was canceled: stop']);
  });

  it("retention keeps a canceled parent while its children are unfinished, and takes both once the sweep canceled them", async () => {
    const h = harness();
    const w = h.engine([chain, middle, never]);
    await w.start(chain, undefined, { id: "p" });
    await until(async () => (await statusOf(w, "p/k/g")) === "waiting", "grandchild waits");
    await until(async () => (await statusOf(w, "p/k")) === "waiting", "child waits");
    await until(async () => (await statusOf(w, "p")) === "waiting", "parent waits");
    await w.close(); // no worker sweeps until w2 below
    await cancelCut(h, "p");
    await h.clock.advance(60_000);
    const client = createEngine({ store: h.store(), workflows: [], clock: h.clock, worker: false });
    expect((await client.gc({ olderThan: "1s" })).runs).toBe(0);
    expect(await statusOf(client, "p")).toBe("canceled");
    expect(await statusOf(client, "p/k")).toBe("waiting");
    const w2 = h.engine([]);
    await until(async () => (await statusOf(w2, "p/k/g")) === "canceled", "grandchild canceled");
    await h.clock.advance(60_000);
    expect((await client.gc({ olderThan: "1s" })).runs).toBe(3);
    expect(await client.getRun("p")).toBeUndefined();
    await client.close();
  });

  it("two workers sweeping at once cancel each child once, with no error", async () => {
    const h = harness();
    const store = h.store();
    await store.open({ clock: h.clock });
    const run = { workflow: "never", version: "1", input: "null", budgetLimit: {} };
    await store.createRun({ ...run, id: "p" });
    const ids = Array.from({ length: 40 }, (_, i) => `p/c${i}`);
    for (const id of ids) {
      await store.createRun({ ...run, id, parentId: "p" });
      await store.createRun({ ...run, id: `${id}/g`, parentId: id });
    }
    expect((await store.requestCancel("p", "stop")).state).toBe("canceled");
    await store.close();
    const logged: string[] = [];
    const log = (m: string, err?: unknown) => logged.push(`${m} ${String(err ?? "")}`);
    const [w1, w2] = [h.engine([], { log }), h.engine([], { log })];
    await until(async () => {
      const runs = await w1.listRuns({ status: ["pending", "paused", "waiting"], limit: 1000 });
      return runs.length === 0;
    }, "every child and grandchild canceled");
    for (const id of ids) {
      expect((await w2.getRun(id))?.reason).toBe('its parent run "p" was canceled: stop');
      expect((await w2.getRun(`${id}/g`))?.reason).toBe(
        `its parent run "${id}" was canceled: its parent run "p" was canceled: stop`,
      );
    }
    expect(logged.filter((m) => m.includes("cancel"))).toEqual([]);
  });

  it("a worker that released its run canceled and failed its cascade leaves the children to the sweep", async () => {
    const h = harness();
    const logged: string[] = [];
    const w = createEngine({
      store: cascadeCut(h.store()),
      workflows: [holding, never],
      clock: h.clock,
      pollIntervalMs: 10,
      log: (m) => logged.push(m),
    });
    try {
      await w.start(holding, undefined, { id: "p" });
      await until(async () => (await statusOf(w, "p/c")) === "waiting", "child waits");
      await until(async () => (await statusOf(w, "p")) === "running", "parent executes");
      await w.cancel("p", "stop"); // executing here: released canceled, then the cascade
      await until(async () => (await statusOf(w, "p")) === "canceled", "parent canceled");
      await until(() => logged.some((m) => m.includes("child")), "the cascade's failure logged");
      expect(await statusOf(w, "p/c")).toBe("waiting");
      const w2 = h.engine([]);
      await until(async () => (await statusOf(w2, "p/c")) === "canceled", "child canceled");
      expect((await w2.getRun("p/c"))?.reason).toBe('its parent run "p" was canceled: stop');
    } finally {
      await w.close();
    }
  });

  it("on an encrypted store too: the parent's reason is decrypted and cited", async () => {
    const h = harness();
    const keys = [{ id: "k1", key: randomBytes(32).toString("base64") }];
    const enc = () => encryptedStore(h.store(), { keys });
    const opts = { clock: h.clock, pollIntervalMs: 10 };
    const w = createEngine({ store: enc(), workflows: [chain, middle, never], ...opts });
    await w.start(chain, undefined, { id: "p" });
    await until(async () => (await statusOf(w, "p/k/g")) === "waiting", "grandchild waits");
    await until(async () => (await statusOf(w, "p/k")) === "waiting", "child waits");
    await until(async () => (await statusOf(w, "p")) === "waiting", "parent waits");
    await w.close();
    await cancelCut(h, "p", enc());
    const w2 = createEngine({ store: enc(), workflows: [], ...opts });
    try {
      await until(async () => (await statusOf(w2, "p/k/g")) === "canceled", "grandchild canceled");
      expect((await w2.getRun("p/k"))?.reason).toBe('its parent run "p" was canceled: stop');
    } finally {
      await w2.close();
    }
  });

  it("a store without listChildrenOfCanceled is not swept, and nothing fails", async () => {
    const h = harness();
    const w = h.engine([chain, middle, never]);
    await w.start(chain, undefined, { id: "p" });
    await until(async () => (await statusOf(w, "p/k/g")) === "waiting", "grandchild waits");
    await until(async () => (await statusOf(w, "p/k")) === "waiting", "child waits");
    await until(async () => (await statusOf(w, "p")) === "waiting", "parent waits");
    await w.close();
    await cancelCut(h, "p");
    const inner = h.store();
    const bare = new Proxy(inner, {
      get(t, prop, recv) {
        if (prop === "listChildrenOfCanceled") return undefined;
        const v = Reflect.get(t, prop, recv);
        return typeof v === "function" ? v.bind(t) : v;
      },
    }) as Store;
    const logged: string[] = [];
    const w2 = createEngine({
      store: bare,
      workflows: [],
      clock: h.clock,
      pollIntervalMs: 10,
      log: (m) => logged.push(m),
    });
    try {
      // Many heartbeats: more than one sweep's worth of renewal rounds.
      for (let i = 0; i < 25; i++) {
        await h.clock.advance(10_000);
        await new Promise((r) => setTimeout(r, 5));
      }
      expect(await statusOf(w2, "p/k")).toBe("waiting");
      expect(logged).toEqual([]);
      // Canceling the parent again still cancels them.
      await w2.cancel("p", "again");
      expect(await statusOf(w2, "p/k/g")).toBe("canceled");
    } finally {
      await w2.close();
    }
  });
});
