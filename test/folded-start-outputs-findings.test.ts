// A folded start (engine/folded-start.ts: a 0-step run created and released in one SQLite
// transaction) whose workflow ends in a way that is hard to release: it throws synchronously,
// or returns an output too big or impossible to encode. The run must end failed in that one
// transaction, with an error naming the run, and nothing half-written (no run left running,
// no second write).

import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { toErrorRecord } from "../src/errors.js";
import { type AnyWorkflow, createEngine, type Store, sqliteStore, workflow } from "../src/index.js";
import { failedCallKey, failedCallKeys } from "../src/workflow/call-errors.js";
import { tempDbPath } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Every row of `runs` as committed to the file. */
function committedRuns(
  path: string,
): Array<{ id: string; status: string; lease_owner: string | null }> {
  const conn = new Database(path, { readonly: true, fileMustExist: true });
  try {
    return conn.prepare("SELECT id, status, lease_owner FROM runs").all() as Array<{
      id: string;
      status: string;
      lease_owner: string | null;
    }>;
  } finally {
    conn.close();
  }
}

/** A store that counts the verbs that write a run's row. */
function countingStore(inner: Store): { store: Store; verbs: string[] } {
  const verbs: string[] = [];
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function" || typeof prop !== "string") return value;
      return (...args: unknown[]) => {
        if (["createRun", "createReleasedRun", "releaseRun", "appendRecords"].includes(prop)) {
          verbs.push(prop);
        }
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store, verbs };
}

function setUp(workflows: AnyWorkflow[], options: { maxPayloadBytes?: number } = {}) {
  const d = tempDbPath();
  cleanups.push(d.cleanup);
  const { store, verbs } = countingStore(sqliteStore(d.path));
  const engine = createEngine({ store, workflows, pollIntervalMs: 20, ...options });
  cleanups.push(() => engine.close());
  return { engine, verbs, path: d.path };
}

/** Starts `wf` and checks it ended failed in one folded write, its error naming the run. */
async function failsFolded(
  wf: AnyWorkflow,
  message: RegExp,
  options: { maxPayloadBytes?: number } = {},
): Promise<void> {
  const { engine, verbs, path } = setUp([wf], options);
  const h = await engine.start(wf, {});
  expect(verbs).toEqual(["createReleasedRun"]);
  expect(committedRuns(path)).toEqual([{ id: h.id, status: "failed", lease_owner: null }]);
  const err = await h.result().then(
    () => undefined,
    (e: unknown) => e as Error,
  );
  expect(err?.message).toMatch(message);
  return expectNamesRun(err, h.id);
}

function expectNamesRun(err: Error | undefined, id: string): void {
  expect(`${err?.message}`).toContain(id);
}

describe("a folded start whose workflow ends oddly (SQLite)", () => {
  it("a workflow function that throws synchronously is created failed, its error kept", async () => {
    const wf = workflow({ name: "sync-throw", version: "1" }, ((_ctx: unknown) => {
      throw new Error("thrown before any await");
    }) as never);
    const { engine, verbs, path } = setUp([wf]);
    const h = await engine.start(wf, {});
    expect(verbs).toEqual(["createReleasedRun"]);
    expect(committedRuns(path)).toEqual([{ id: h.id, status: "failed", lease_owner: null }]);
    await expect(h.result()).rejects.toThrow("thrown before any await");
  });

  it("an output beyond maxPayloadBytes: failed, the error naming the run and the limit", async () => {
    const wf = workflow({ name: "huge", version: "1" }, async () => "x".repeat(200_000));
    await failsFolded(wf, /payload limit/, { maxPayloadBytes: 100_000 });
  });

  it("an output holding a function: failed, the error naming the run", async () => {
    const wf = workflow({ name: "fn-out", version: "1" }, async () => ({ f: () => 1 }));
    await failsFolded(wf, /serializable/);
  });

  it("an output whose getter throws: failed, the error naming the run", async () => {
    const wf = workflow({ name: "getter-out", version: "1" }, async () => ({
      get x(): number {
        throw new Error("no x here");
      },
    }));
    await failsFolded(wf, /no x here/);
  });

  it("an output with a cycle is stored (the codec keeps cycles), in the one write", async () => {
    const wf = workflow({ name: "cycle-out", version: "1" }, async () => {
      const o: { self?: unknown; n: number } = { n: 1 };
      o.self = o;
      return o;
    });
    const { engine, verbs, path } = setUp([wf]);
    const h = await engine.start(wf, {});
    expect(verbs).toEqual(["createReleasedRun"]);
    expect(committedRuns(path)).toEqual([{ id: h.id, status: "completed", lease_owner: null }]);
    const out = (await h.result()) as { self: unknown; n: number };
    expect(out.self).toBe(out);
  });

  it("a thrown value that throws when read (a revoked proxy) still ends the run failed, once", async () => {
    // failedCallKeys read it with instanceof, which threw: the run's end was never written,
    // the run stayed running, leased to this worker, and its execution never ended.
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const wf = workflow({ name: "revoked-throw", version: "1" }, async () => {
      throw proxy;
    });
    const { engine, verbs, path } = setUp([wf]);
    const h = await engine.start(wf, {});
    expect(verbs).toEqual(["createReleasedRun"]);
    expect(committedRuns(path)).toEqual([{ id: h.id, status: "failed", lease_owner: null }]);
    await expect(h.result()).rejects.toThrow();
  });

  it("the same thrown value after a step (not folded): failed, released once", async () => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const wf = workflow({ name: "revoked-after-step", version: "1" }, async (ctx) => {
      await ctx.step("s", () => 1);
      throw proxy;
    });
    const { engine, verbs, path } = setUp([wf]);
    const h = await engine.start(wf, {});
    await expect(h.result()).rejects.toThrow();
    expect(verbs.filter((v) => v === "releaseRun")).toEqual(["releaseRun"]);
    expect(committedRuns(path)).toEqual([{ id: h.id, status: "failed", lease_owner: null }]);
  });

  it("toErrorRecord and failedCallKeys take a revoked proxy without throwing", () => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    expect(failedCallKeys(proxy)).toEqual([]);
    expect(failedCallKey(proxy)).toBeNull();
    expect(toErrorRecord(proxy)).toEqual({
      name: "Error",
      message: "[a value that cannot be read]",
    });
  });
});
