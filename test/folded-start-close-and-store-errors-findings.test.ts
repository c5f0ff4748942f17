// A folded start (engine/folded-start.ts: a run executed before its SQLite create commits,
// its release folded into that create when it ends needing no record) meeting close() and
// store errors. close() at once after many fresh-id starts: every start either resolves
// with a run durable in the file or rejects with nothing of its run written, and no run is
// left created but never executed (running, leased to the closed worker). A store error on
// the folded transaction, under encryptedStore: start() rejects with it, nothing is written,
// and the engine goes on working.

import { randomBytes } from "node:crypto";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import {
  type AnyWorkflow,
  createEngine,
  encryptedStore,
  type Store,
  sqliteStore,
  type Workflow,
  workflow,
} from "../src/index.js";
import { tempDbPath } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

type Row = { id: string; status: string; lease_owner: string | null };

/** Every row of `runs` as committed to the file (another connection sees only commits). */
function committedRuns(path: string): Row[] {
  const conn = new Database(path, { readonly: true, fileMustExist: true });
  try {
    return conn.prepare("SELECT id, status, lease_owner FROM runs").all() as Row[];
  } finally {
    conn.close();
  }
}

function db(): string {
  const d = tempDbPath();
  cleanups.push(d.cleanup);
  return d.path;
}

const empty = workflow({ name: "empty", version: "1" }, async (_ctx, input: { n: number }) => ({
  n: input.n,
}));
/** Ends needing no record, but past the turn of its create's commit (own I/O). */
const ownIo = workflow({ name: "own-io", version: "1" }, async (_ctx, input: { n: number }) => {
  await new Promise((r) => setTimeout(r, 30));
  return { n: input.n };
});
const oneStep = workflow({ name: "one-step", version: "1" }, async (ctx, input: { n: number }) =>
  ctx.step("s", () => input.n),
);

describe("close() while folded creates wait for the committer (SQLite)", () => {
  it("every start resolves with a durable run or rejects writing nothing; none is left unexecuted", async () => {
    const path = db();
    const engine = createEngine({
      store: sqliteStore(path),
      workflows: [empty, ownIo, oneStep],
      pollIntervalMs: 20,
      concurrency: 64,
    });
    await engine.start(empty, { n: -1 }); // opens the store and starts the worker
    const starts = Array.from({ length: 45 }, (_, n) =>
      (n % 3 === 0
        ? engine.start(empty, { n })
        : n % 3 === 1
          ? engine.start(ownIo, { n })
          : engine.start(oneStep, { n })
      ).then(
        (h) => ({ ok: true as const, id: h.id }),
        (err: unknown) => ({ ok: false as const, err }),
      ),
    );
    const closed = engine.close();
    // Asked once close() has begun: refused, nothing of them written (rows counted below).
    const late = await Promise.all(
      Array.from({ length: 5 }, (_, n) =>
        engine.start(empty, { n: 100 + n }).then(
          () => "resolved",
          (err: Error) => err.name,
        ),
      ),
    );
    expect(late).toEqual(Array(5).fill("EngineClosedError"));
    const settled = await Promise.all(starts);
    await closed;
    const rows = committedRuns(path);
    const byId = new Map(rows.map((r) => [r.id, r]));
    const resolved = settled.flatMap((s) => (s.ok ? [s.id] : []));
    // Resolved: durable. Rejected: nothing of it written (no row beyond the resolved ones).
    for (const id of resolved) expect(byId.has(id), id).toBe(true);
    expect(rows.length).toBe(resolved.length + 1);
    // None left running under the closed worker's lease: each ended, or went back to pending.
    for (const r of rows) {
      expect(["completed", "pending"], `${r.id} ${r.status}`).toContain(r.status);
      if (r.status === "pending") expect(r.lease_owner).toBeNull();
    }
    // A later engine executes every run handed back.
    const again = createEngine({
      store: sqliteStore(path),
      workflows: [empty, ownIo, oneStep],
      pollIntervalMs: 20,
    });
    cleanups.push(() => again.close());
    for (const id of resolved) {
      const out = await again.handle(id).result();
      expect(out).toBeDefined();
    }
    expect(committedRuns(path).every((r) => r.status === "completed")).toBe(true);
  });
});

/** `inner` whose createReleasedRun throws `times` times (before it writes anything). */
function failingCreates(inner: Store, times: number): { store: Store; calls: () => number } {
  let failed = 0;
  let calls = 0;
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      if (prop !== "createReleasedRun") return value.bind(target);
      return async (...args: unknown[]) => {
        calls++;
        if (failed < times) {
          failed++;
          throw new Error("disk went away");
        }
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store, calls: () => calls };
}

/** `inner` whose createReleasedRun's release, once asked for, throws (inside the create's
 *  transaction), `times` times: as a release refused or one that cannot be encrypted. */
function refusedReleases(inner: Store, times: number): Store {
  let refused = 0;
  return new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      if (prop !== "createReleasedRun") return value.bind(target);
      return (run: unknown, end: () => unknown) =>
        (value as (...a: unknown[]) => unknown).call(target, run, () => {
          const release = end();
          if (release !== undefined && refused < times) {
            refused++;
            throw new Error("cannot encrypt this release");
          }
          return release;
        });
    },
  });
}

function keys() {
  return [{ id: "k1", key: randomBytes(32).toString("base64") }];
}

function engineOn(store: Store, workflows: AnyWorkflow[]) {
  const engine = createEngine({ store, workflows, pollIntervalMs: 20 });
  cleanups.push(() => engine.close());
  return engine;
}

describe("a store error on the folded transaction, under encryptedStore (SQLite)", () => {
  for (const wf of [empty, oneStep] as Array<Workflow<{ n: number }, unknown>>) {
    it(`the create throws (${wf.name}): start() rejects with it, nothing is written, the engine goes on`, async () => {
      const path = db();
      const { store, calls } = failingCreates(sqliteStore(path), 1);
      const engine = engineOn(encryptedStore(store, { keys: keys() }), [wf]);
      await expect(engine.start(wf, { n: 1 })).rejects.toThrow("disk went away");
      expect(calls()).toBe(1);
      expect(committedRuns(path)).toEqual([]);
      const h = await engine.start(wf, { n: 2 });
      expect(await h.result()).toEqual(wf === empty ? { n: 2 } : 2);
      expect(committedRuns(path)).toEqual([{ id: h.id, status: "completed", lease_owner: null }]);
    });
  }

  it("the release throws inside the create's transaction: start() rejects, the create is undone", async () => {
    const path = db();
    const store = encryptedStore(refusedReleases(sqliteStore(path), 1), { keys: keys() });
    const engine = engineOn(store, [empty]);
    await expect(engine.start(empty, { n: 1 })).rejects.toThrow("cannot encrypt this release");
    expect(committedRuns(path)).toEqual([]);
    const h = await engine.start(empty, { n: 2 });
    expect(await h.result()).toEqual({ n: 2 });
    expect(committedRuns(path)).toEqual([{ id: h.id, status: "completed", lease_owner: null }]);
  });
});
