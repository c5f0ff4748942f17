// A run started by an engine whose own worker serves its workflow is created claimed (one
// transaction) and executed at once, with no claim round and no journal read; result()
// of a run executing here resolves from its durable release. These tests attack that
// path: a full worker, the same id started twice at once, a create whose answer is lost
// after it committed, a close right after start, and failures reported from memory.

import { afterEach, describe, expect, it } from "vitest";
import {
  type AnyWorkflow,
  createEngine,
  type Store,
  StoreError,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { postgresStore } from "../src/postgres.js";
import { postgresTestUrl, testSchema } from "./helpers/postgres.js";
import { tempDbPath } from "./helpers/sqlite.js";

const pgUrl = await postgresTestUrl();

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A store that counts verb calls and lets a test replace one verb. */
function countingStore(inner: Store, override: Partial<Record<keyof Store, unknown>> = {}) {
  const calls = new Map<string, number>();
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function" || typeof prop !== "string") return value;
      return (...args: unknown[]) => {
        calls.set(prop, (calls.get(prop) ?? 0) + 1);
        const replaced = override[prop as keyof Store];
        if (typeof replaced === "function") return replaced.apply(target, args);
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store, calls };
}

function setup(workflows: AnyWorkflow[], store: Store, extra = {}) {
  const engine = createEngine({ store, workflows, pollIntervalMs: 20, ...extra });
  cleanups.push(() => engine.close());
  return engine;
}

function db() {
  const d = tempDbPath();
  cleanups.push(d.cleanup);
  return d.path;
}

describe("start() on an engine whose worker serves the workflow", () => {
  it("executes a fresh run with no claim round and no journal read", async () => {
    let bodies = 0;
    const wf = workflow({ name: "fresh", version: "1" }, async (ctx) => {
      const a = await ctx.step("a", () => {
        bodies++;
        return 1;
      });
      return a + 1;
    });
    const { store, calls } = countingStore(sqliteStore(db()));
    const engine = setup([wf], store);
    await engine.start(wf, undefined); // let the worker's first rounds pass
    const before = { load: calls.get("loadJournal") ?? 0, get: calls.get("getRun") ?? 0 };
    const run = await engine.start(wf, undefined);
    expect(await run.result()).toBe(2);
    expect(bodies).toBe(2);
    expect((calls.get("loadJournal") ?? 0) - before.load).toBe(0);
    // result() came from the release itself: no read of the run.
    expect((calls.get("getRun") ?? 0) - before.get).toBe(0);
    expect((await engine.getRun(run.id))?.status).toBe("completed");
  });

  it("keeps to the worker's concurrency: extra runs wait for a claim round", async () => {
    let inFlight = 0;
    let most = 0;
    const wf = workflow({ name: "gate", version: "1" }, async (ctx, n: number) => {
      return ctx.step("s", async () => {
        inFlight++;
        most = Math.max(most, inFlight);
        await new Promise((r) => setTimeout(r, 30));
        inFlight--;
        return n;
      });
    });
    const engine = setup([wf], sqliteStore(db()), { concurrency: 2 });
    const runs = await Promise.all([1, 2, 3, 4, 5].map((n) => engine.start(wf, n)));
    expect(await Promise.all(runs.map((r) => r.result()))).toEqual([1, 2, 3, 4, 5]);
    expect(most).toBeLessThanOrEqual(2);
  });

  it("a slot freed after the worker was full claims the waiting runs (no poll needed)", async () => {
    const wf = workflow({ name: "one-slot", version: "1" }, async (ctx, n: number) =>
      ctx.step("s", async () => {
        await new Promise((r) => setTimeout(r, 10));
        return n;
      }),
    );
    // Polling once a minute: only the freed slot's claim round can take runs 2 and 3.
    const engine = setup([wf], sqliteStore(db()), { concurrency: 1, pollIntervalMs: 60_000 });
    const runs = await Promise.all([1, 2, 3].map((n) => engine.start(wf, n)));
    expect(await Promise.all(runs.map((r) => r.result()))).toEqual([1, 2, 3]);
  });

  it("the same id started twice at once executes once", async () => {
    let bodies = 0;
    const wf = workflow({ name: "twice", version: "1" }, async (ctx) =>
      ctx.step("s", () => ++bodies),
    );
    const engine = setup([wf], sqliteStore(db()));
    const [a, b] = await Promise.all([
      engine.start(wf, undefined, { id: "run_same" }),
      engine.start(wf, undefined, { id: "run_same" }),
    ]);
    expect(await a.result()).toBe(1);
    expect(await b.result()).toBe(1);
    expect(bodies).toBe(1);
  });

  it("a create that committed but whose answer was lost is handed back and completes", async () => {
    const inner = sqliteStore(db());
    let lose = true;
    const { store } = countingStore(inner, {
      async createRun(this: Store, run: Parameters<Store["createRun"]>[0]) {
        const res = await inner.createRun(run);
        if (lose) {
          lose = false;
          throw new StoreError("injected: the answer of createRun was lost after commit");
        }
        return res;
      },
    });
    const wf = workflow({ name: "lost", version: "1" }, async (ctx) => ctx.step("s", () => 7));
    const engine = setup([wf], store);
    await expect(engine.start(wf, undefined, { id: "run_lost" })).rejects.toThrow(/injected/);
    // Not left leased to this worker (which never claims its own leases): it runs here.
    expect(await engine.handle("run_lost").result()).toBe(7);
  });

  it("a close right after start hands the run back; another engine completes it", async () => {
    const path = db();
    let bodies = 0;
    const wf = workflow({ name: "closing", version: "1" }, async (ctx) => {
      const a = await ctx.step("a", () => ++bodies);
      const b = await ctx.step("b", () => ++bodies);
      return a + b;
    });
    const first = createEngine({ store: sqliteStore(path), workflows: [wf], pollIntervalMs: 20 });
    const run = await first.start(wf, undefined);
    await first.close();
    const status = (await setup([], sqliteStore(path), { worker: false }).getRun(run.id))?.status;
    expect(["pending", "completed"]).toContain(status);
    const second = setup([wf], sqliteStore(path));
    expect(await second.handle(run.id).result()).toBe(3);
    expect(bodies).toBe(2);
  });

  it("result() of a run that fails or is canceled while executing here reports it", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const fails = workflow({ name: "fails", version: "1" }, async (ctx) => {
      await ctx.step("s", () => 1);
      throw new TypeError("bad \u0000 input \ud83d");
    });
    const waits = workflow({ name: "waits", version: "1" }, async (ctx) => {
      await ctx.step("s", () => gate);
      return ctx.step("t", () => 2);
    });
    const engine = setup([fails, waits], sqliteStore(db()));
    const f = await engine.start(fails, undefined);
    await expect(f.result()).rejects.toThrow(/bad/);
    const w = await engine.start(waits, undefined);
    const result = w.result();
    await engine.cancel(w.id, "stop");
    release();
    await expect(result).rejects.toThrow(/canceled: stop/);
  });

  it("runs with no step started and awaited back to back let the event loop turn", async () => {
    // SQLite answers synchronously: such a run's whole life was microtasks, so a loop of them
    // starved timers (heartbeats) and held every finished run's memory until it ended.
    const noStep = workflow({ name: "no-step", version: "1" }, async (_ctx, n: number) => n + 1);
    const engine = setup([noStep], sqliteStore(db()));
    let turned = false;
    setImmediate(() => {
      turned = true;
    });
    let finishedBeforeTurn = 0;
    for (let i = 0; i < 5; i++) {
      expect(await (await engine.start(noStep, i)).result()).toBe(i + 1);
      if (!turned) finishedBeforeTurn++;
    }
    expect(turned).toBe(true);
    expect(finishedBeforeTurn).toBe(0);
  });
});

describe.skipIf(!pgUrl)("start() on PostgreSQL, created claimed", () => {
  it("executes fresh runs at once, the same id twice once, a lost create answer recovers", async () => {
    const { schema, drop } = testSchema(pgUrl ?? "", "cairn_claimed");
    cleanups.push(drop);
    let bodies = 0;
    const wf = workflow({ name: "pg-fresh", version: "1" }, async (ctx, n: number) =>
      ctx.step("s", () => {
        bodies++;
        return n * 2;
      }),
    );
    const inner = postgresStore(pgUrl ?? "", { schema });
    let lose = false;
    const { store, calls } = countingStore(inner, {
      async createRun(this: Store, run: Parameters<Store["createRun"]>[0]) {
        const res = await inner.createRun(run);
        if (lose) {
          lose = false;
          throw new StoreError("injected: the answer of createRun was lost after commit");
        }
        return res;
      },
    });
    const engine = setup([wf], store);
    const runs = await Promise.all([1, 2, 3].map((n) => engine.start(wf, n)));
    expect(await Promise.all(runs.map((r) => r.result()))).toEqual([2, 4, 6]);
    expect(calls.get("loadJournal") ?? 0).toBe(0);
    const [a, b] = await Promise.all([
      engine.start(wf, 5, { id: "run_pg_same" }),
      engine.start(wf, 5, { id: "run_pg_same" }),
    ]);
    expect([await a.result(), await b.result()]).toEqual([10, 10]);
    expect(bodies).toBe(4);
    lose = true;
    await expect(engine.start(wf, 7, { id: "run_pg_lost" })).rejects.toThrow(/injected/);
    expect(await engine.handle("run_pg_lost").result()).toBe(14);
    expect(bodies).toBe(5);
  });
});
