// A run this engine's own worker executes as it starts it begins before its create commits
// (engine/folded-start.ts): one whose function ends needing no record is created and released
// in ONE transaction (Store.createReleasedRun, SQLite); one that makes a call waits for its
// create to be durable before anything of that call begins or is written. These tests hold
// the invariants around that: start() resolves only once the run is durable (read from the
// file by another connection), no step body begins before the create committed, a crash
// before that commit leaves no run, and a crash after it leaves the run as released.

import { randomBytes } from "node:crypto";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import {
  type AnyWorkflow,
  createEngine,
  encryptedStore,
  realClock,
  type Store,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { crashableStore } from "../src/testing/crashable-store.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A store that logs each verb as it is called and as it answers (in one list). */
function loggedStore(inner: Store) {
  const log: string[] = [];
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function" || typeof prop !== "string") return value;
      return (...args: unknown[]) => {
        const out = (value as (...a: unknown[]) => unknown).apply(target, args);
        if (prop === "subscribe" || prop === "now") return out;
        log.push(prop);
        if (out instanceof Promise)
          void out.then(
            () => log.push(`${prop} answered`),
            () => {},
          );
        return out;
      };
    },
  });
  return { store, log };
}

function db(): string {
  const d = tempDbPath();
  cleanups.push(d.cleanup);
  return d.path;
}

/** The run's row as committed to the file (another connection sees only commits). */
function committedRun(
  path: string,
  id: string,
): { status: string; output: string | null } | undefined {
  const conn = new Database(path, { readonly: true, fileMustExist: true });
  try {
    return conn.prepare("SELECT status, output FROM runs WHERE id = ?").get(id) as
      | { status: string; output: string | null }
      | undefined;
  } finally {
    conn.close();
  }
}

function engineOn(store: Store, workflows: AnyWorkflow[]) {
  const engine = createEngine({ store, workflows, pollIntervalMs: 20 });
  cleanups.push(() => engine.close());
  return engine;
}

const empty = workflow({ name: "empty", version: "1" }, async (_ctx, input: { n: number }) => ({
  doubled: input.n * 2,
}));

describe("a run whose function ends before it needs a record (SQLite)", () => {
  it("is created and released in one transaction, completed in the file when start() resolves", async () => {
    const path = db();
    const { store, log } = loggedStore(sqliteStore(path));
    const engine = engineOn(store, [empty]);
    await engine.start(empty, { n: 1 }); // opens the store and starts the worker
    log.length = 0;
    const h = await engine.start(empty, { n: 21 });
    expect(committedRun(path, h.id)).toEqual({ status: "completed", output: expect.any(String) });
    expect(await h.result()).toEqual({ doubled: 42 });
    const writes = log.filter((v) => !v.endsWith("answered") && v !== "getRun");
    expect(writes.filter((v) => v !== "claimRuns" && v !== "renewLeases")).toEqual([
      "createReleasedRun",
    ]);
  });

  it("a function that throws is created failed in that one transaction", async () => {
    const path = db();
    const { store, log } = loggedStore(sqliteStore(path));
    const throws = workflow({ name: "throws", version: "1" }, async () => {
      throw new Error("nothing to do");
    });
    const engine = engineOn(store, [throws]);
    const h = await engine.start(throws, {});
    expect(committedRun(path, h.id)?.status).toBe("failed");
    await expect(h.result()).rejects.toThrow("nothing to do");
    expect(log).toContain("createReleasedRun");
    expect(log).not.toContain("releaseRun");
    expect(log).not.toContain("createRun");
  });

  it("start() does not resolve before that transaction has committed", async () => {
    const path = db();
    const inner = sqliteStore(path);
    let release: (() => void) | undefined;
    const held = new Proxy(inner, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== "function") return value;
        if (prop !== "createReleasedRun") return value.bind(target);
        return async (...args: unknown[]) => {
          await new Promise<void>((resolve) => {
            release = resolve;
          });
          return (value as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    });
    const engine = engineOn(held, [empty]);
    let resolved = false;
    const started = engine.start(empty, { n: 2 }).then((h) => {
      resolved = true;
      return h;
    });
    await until(() => release !== undefined, "createReleasedRun to be called", 10_000);
    await new Promise((r) => setTimeout(r, 50));
    expect(resolved).toBe(false);
    release?.();
    const h = await started;
    expect(committedRun(path, h.id)?.status).toBe("completed");
  });

  it("a crash before the commit leaves no run; one after it leaves the run completed", async () => {
    for (const when of ["before", "after"] as const) {
      const path = db();
      const store = crashableStore(sqliteStore(path), {
        ...(when === "before"
          ? { crashBefore: (c) => c.verb === "createReleasedRun" }
          : { crashAfter: (c) => c.verb === "createReleasedRun" }),
      });
      const engine = createEngine({ store, workflows: [empty], pollIntervalMs: 20 });
      void engine.start(empty, { n: 3 });
      await until(() => store.crashed, `a crash ${when} createReleasedRun`, 10_000);
      await store.settled();
      const conn = new Database(path, { readonly: true });
      const rows = conn.prepare("SELECT status FROM runs").all() as Array<{ status: string }>;
      conn.close();
      expect(rows, when).toEqual(when === "before" ? [] : [{ status: "completed" }]);
      void engine.close().catch(() => {});
    }
  });
});

describe("through encryptedStore (SQLite)", () => {
  it("a run with no call is created and released in one transaction, its output encrypted", async () => {
    const path = db();
    const keys = [{ id: "k1", key: randomBytes(32).toString("base64") }];
    const { store, log } = loggedStore(encryptedStore(sqliteStore(path), { keys }));
    const engine = engineOn(store, [empty]);
    const h = await engine.start(empty, { n: 5 });
    expect(await h.result()).toEqual({ doubled: 10 });
    expect(log).toContain("createReleasedRun");
    expect(log).not.toContain("releaseRun");
    const stored = committedRun(path, h.id);
    expect(stored?.status).toBe("completed");
    expect(stored?.output).toMatch(/^cairn:enc:/);
    expect(stored?.output).not.toContain("doubled");
  });
});

describe("a run that makes calls, begun before its create committed (SQLite)", () => {
  it("begins no step body before its create is durable, and records each step once", async () => {
    const path = db();
    const { store, log } = loggedStore(sqliteStore(path));
    const wf = workflow({ name: "steps", version: "1" }, async (ctx) => {
      let sum = 0;
      for (let i = 0; i < 3; i++) {
        sum += await ctx.step(`s${i}`, () => {
          log.push(`body s${i}`);
          return i;
        });
      }
      return sum;
    });
    const engine = engineOn(store, [wf]);
    const h = await engine.start(wf, {});
    expect(await h.result()).toBe(3);
    const firstBody = log.indexOf("body s0");
    expect(log.indexOf("createReleasedRun answered")).toBeGreaterThanOrEqual(0);
    expect(log.indexOf("createReleasedRun answered")).toBeLessThan(firstBody);
    expect((await engine.getRun(h.id))?.status).toBe("completed");
    expect(log).toContain("releaseRun");
    const steps = (await engine.readSteps(h.id)).steps.map((s) => s.key);
    expect(steps).toEqual(["s0", "s1", "s2"]);
  });

  it("ctx.now() then return: its record is written after the create, then the run released", async () => {
    const path = db();
    const { store, log } = loggedStore(sqliteStore(path));
    const wf = workflow({ name: "now", version: "1" }, async (ctx) => ctx.now() > 0);
    const engine = engineOn(store, [wf]);
    const h = await engine.start(wf, {});
    expect(await h.result()).toBe(true);
    const order = log.filter((v) =>
      ["createReleasedRun answered", "appendRecords", "releaseRun"].includes(v),
    );
    expect(order).toEqual(["createReleasedRun answered", "appendRecords", "releaseRun"]);
    expect((await engine.readSteps(h.id)).steps.map((s) => s.kind)).toEqual(["now"]);
  });

  it("a function awaiting I/O of its own past the turn: created first, then released", async () => {
    const path = db();
    const { store, log } = loggedStore(sqliteStore(path));
    // The function's timer is long and ended by the test once start() has resolved: a short
    // one could end before start() resolves on a loaded machine (the run then is created
    // already released, as a function ending in its first turns is).
    let endTimer = () => {};
    const wf = workflow({ name: "slow-own-io", version: "1" }, async () => {
      await new Promise<void>((r) => {
        const timer = setTimeout(r, 60_000);
        endTimer = () => {
          clearTimeout(timer);
          r();
        };
      });
      return "done";
    });
    const engine = engineOn(store, [wf]);
    const h = await engine.start(wf, {});
    // Durable when start() resolved, though the function had not ended.
    expect(committedRun(path, h.id)?.status).toBe("running");
    endTimer();
    expect(await h.result()).toBe("done");
    expect(log.filter((v) => v === "createReleasedRun" || v === "releaseRun")).toEqual([
      "createReleasedRun",
      "releaseRun",
    ]);
  });
});

describe("Store.createReleasedRun (SQLite)", () => {
  const claimBy = { workerId: "w1", leaseMs: 30_000 };
  const newRun = (id: string) => ({
    id,
    workflow: "w",
    version: "1",
    input: "0",
    budgetLimit: {},
    claimBy,
  });
  const end = { status: "completed" as const, output: '["done"]', readyAt: null, reason: null };

  it("an id found taken is answered untouched; nothing is released", async () => {
    const store = sqliteStore(db());
    await store.open({ clock: realClock });
    cleanups.push(() => store.close());
    const first = await store.createRun(newRun("taken"));
    let asked = 0;
    const again = await store.createReleasedRun!(newRun("taken"), () => {
      asked++;
      return end;
    });
    // Asked before the run is written (SQLite inserts a released run as its release leaves
    // it), its answer unused for an id found taken.
    expect(asked).toBe(1);
    expect(again.created).toBe(false);
    expect(again.run.status).toBe("running");
    expect(await store.getRun("taken")).toEqual(first.run);
  });

  it("releases the run it created under the epoch it was created with (above a deleted run's)", async () => {
    const store = sqliteStore(db());
    await store.open({ clock: realClock });
    cleanups.push(() => store.close());
    const old = await store.createRun(newRun("again"));
    await store.releaseRun({ ...end, runId: "again", epoch: old.run.epoch });
    expect((await store.deleteRun("again")).deleted).toBe(true);
    const made = await store.createReleasedRun!(newRun("again"), () => end);
    expect(made.created).toBe(true);
    expect(made.run.epoch).toBeGreaterThan(old.run.epoch);
    expect(made.run).toMatchObject({ status: "completed", output: '["done"]', leaseOwner: null });
    expect(await store.getRun("again")).toEqual(made.run);
  });
});
