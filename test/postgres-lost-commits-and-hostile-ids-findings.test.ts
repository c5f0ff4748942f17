// Findings on the PostgreSQL backend and on engines sharing it: hostile values compared with
// SQLite, connections lost mid-commit, races between engines. Each test failed on the code
// it was written against, and stays as the regression test of its fix.

import { Socket } from "node:net";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { RunNotFoundError, type Store, workflow } from "../src/index.js";
import { postgresStore } from "../src/postgres.js";
import { createVirtualClock } from "../src/testing/index.js";
import { BACKENDS, pgUrl, useHarness } from "./helpers/engines.js";
import { testSchema, withClient } from "./helpers/postgres.js";
import { until } from "./helpers/sqlite.js";

const NUL_ID = "no\u0000such";

describe.each(BACKENDS)("%s: hostile values", (backend) => {
  const harness = useHarness(backend);

  it("an id with a NUL finds no run, on every read and transition, as on SQLite", async () => {
    const h = harness();
    const wf = workflow({ name: "nul-id", version: "1" }, async (ctx) => {
      await ctx.waitForEvent("go");
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: "r1" });
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits");
    // PostgreSQL text cannot hold a NUL, so no run has such an id: each answer is "none",
    // never a StoreError as if the database had failed.
    expect(await e.getRun(NUL_ID)).toBeUndefined();
    await expect(e.getSteps(NUL_ID)).rejects.toBeInstanceOf(RunNotFoundError);
    await expect(e.listEvents(NUL_ID)).rejects.toBeInstanceOf(RunNotFoundError);
    expect(await e.listRuns({ idContains: "\u0000" })).toEqual([]);
    expect(await e.listRuns({ workflow: "nul-id\u0000" })).toEqual([]);
    expect(await e.listRuns({ parentId: NUL_ID })).toEqual([]);
    expect(await e.listRuns({ waitingForEventPrefix: "g\u0000" })).toEqual([]);
    await expect(e.cancel(NUL_ID)).rejects.toBeInstanceOf(RunNotFoundError);
    await expect(e.resume(NUL_ID)).rejects.toBeInstanceOf(RunNotFoundError);
    await expect(e.fork(NUL_ID, { fromStep: "x" })).rejects.toBeInstanceOf(RunNotFoundError);
    await expect(e.handle(NUL_ID).result()).rejects.toBeInstanceOf(RunNotFoundError);
    await expect(e.listApprovals(NUL_ID)).rejects.toBeInstanceOf(RunNotFoundError);
    await expect(e.readStream(NUL_ID)).rejects.toBeInstanceOf(RunNotFoundError);
    await expect(e.sendEvent(NUL_ID, "go")).rejects.toBeInstanceOf(RunNotFoundError);
    // The store's own verbs, which a third-party caller (or the CLI) reaches directly.
    const s = h.store();
    await s.open({ clock: h.clock });
    try {
      expect(await s.getRun(NUL_ID)).toBeUndefined();
      expect(await s.loadJournal(NUL_ID)).toEqual({
        steps: [],
        attempts: [],
        intents: [],
        events: [],
      });
      expect(await s.pendingEvents(NUL_ID)).toEqual([]);
      expect(await s.requestCancel(NUL_ID, "x")).toEqual({ state: "not-found" });
      expect(await s.resumeRun(NUL_ID, {})).toEqual({ ok: false, reason: "not-found" });
      expect(await s.deleteRun(NUL_ID)).toEqual({ deleted: false, reason: "not-found" });
      expect((await s.deleteRuns([NUL_ID])).deleted).toEqual([]);
      expect(await s.heldWorkspaceObjects(NUL_ID, ["a".repeat(64)])).toEqual([]);
      expect(await s.readStream({ runId: NUL_ID, from: 0 })).toEqual([]);
      expect(await s.appendStream({ runId: NUL_ID, chunks: ["x"] })).toEqual({
        ok: false,
        reason: "not-found",
      });
    } finally {
      await s.close();
    }
    // The run itself is untouched.
    expect((await e.getRun(run.id))?.status).toBe("waiting");
  });

  it("an approval answer whose via (given alone) cannot be stored is refused naming via, not by", async () => {
    const h = harness();
    const wf = workflow({ name: "via-name", version: "1" }, async (ctx) => {
      await ctx.approval("ok", { request: 1 });
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await until(async () => (await e.listApprovals(run.id)).length === 1, "the approval is asked");
    // by defaults to via, and was checked first: the error named "The approver (by)".
    await expect(e.approve(run.id, "ok", { via: "v\u0000" })).rejects.toThrow(/^via contains/);
    expect((await e.listApprovals(run.id))[0]?.status).toBe("pending");
  });

  it("listRuns takes time bounds past 2^53 as SQLite does (every run is before them)", async () => {
    const h = harness();
    const wf = workflow({ name: "far-bounds", version: "1" }, async () => "done");
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: "r1" });
    await run.result();
    // PostgreSQL got "1e+300" as bigint text and failed the listing.
    const page = await e.listRuns({ before: { createdAt: 1e300, id: "z" } });
    expect(page.map((r) => r.id)).toEqual(["r1"]);
    const finished = await e.listRuns({ finishedBefore: 1e300 });
    expect(finished.map((r) => r.id)).toEqual(["r1"]);
    expect(await e.listRuns({ before: { createdAt: -1e300, id: "z" } })).toEqual([]);
  });
});

// ---- a COMMIT whose answer is lost (it did commit) --------------------------------------

/**
 * A pool whose connection is dropped right after the server has committed a transaction
 * that ran a statement `lose` picks, once: the client sees "Connection terminated", as when
 * pg_terminate_backend or a network reset hits between the commit and its answer. (On a
 * caller's pool every verb runs in BEGIN ... COMMIT, so each one's commit can be lost.)
 */
function commitLosingPool(url: string): {
  pool: pg.Pool;
  loseAfter: (lose: (sql: string) => boolean) => void;
  lost: () => number;
} {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  let lose: ((sql: string) => boolean) | undefined;
  let lost = 0;
  const patched = new WeakSet<object>();
  const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
  (pool as unknown as { connect: () => Promise<pg.PoolClient> }).connect = async () => {
    const c = await connect();
    if (patched.has(c)) return c;
    patched.add(c);
    const query = c.query.bind(c) as (sql: string, params?: unknown[]) => Promise<unknown>;
    const seen: string[] = [];
    (c as unknown as { query: unknown }).query = async (sql: string, params?: unknown[]) => {
      if (sql === "COMMIT") {
        const inTx = seen.splice(0);
        const hit = lose !== undefined && inTx.some(lose);
        const out = await query(sql);
        if (hit) {
          lose = undefined;
          lost++;
          (
            c as unknown as { connection: { stream: { destroy(): void } } }
          ).connection.stream.destroy();
          throw new Error("Connection terminated unexpectedly");
        }
        return out;
      }
      if (typeof sql === "string" && !sql.startsWith("BEGIN")) seen.push(sql);
      return query(sql, params);
    };
    return c;
  };
  return {
    pool,
    loseAfter: (f) => {
      lose = f;
    },
    lost: () => lost,
  };
}

describe.skipIf(!pgUrl)("PostgreSQL: a commit whose answer is lost", () => {
  const cleanups: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function openStore() {
    const { schema, drop } = testSchema(pgUrl!);
    cleanups.push(drop);
    const losing = commitLosingPool(pgUrl!);
    cleanups.push(() => losing.pool.end());
    const store = postgresStore(losing.pool, { schema });
    const clock = createVirtualClock();
    await store.open({ clock });
    cleanups.push(() => store.close());
    return { store, clock, ...losing };
  }

  const newRun = (id: string, workflow: string, parentId?: string) => ({
    id,
    workflow,
    version: "1",
    input: "null",
    budgetLimit: {},
    ...(parentId !== undefined && { parentId }),
  });

  it("markUnserved wakes the parent of a child it canceled even when its commit's answer is lost", async () => {
    const { store, clock, loseAfter, lost } = await openStore();
    await store.createRun(newRun("parent", "p"));
    await store.createRun(newRun("parent/child", "c", "parent"));
    const claimed = await store.claimRuns({
      workerId: "w",
      workflows: ["p@1", "c@1"],
      limit: 10,
      leaseMs: 1_000,
    });
    expect(claimed.map((c) => c.run.id).sort()).toEqual(["parent", "parent/child"]);
    const parentEpoch = claimed.find((c) => c.run.id === "parent")!.run.epoch;
    // The parent waits for its child (no timer); the child's cancel is requested while it
    // runs, and its worker dies: its lease runs out with no worker serving c@1.
    const r = await store.releaseRun({
      runId: "parent",
      epoch: parentEpoch,
      status: "waiting",
      readyAt: null,
      waitingFor: ["child-done"],
    });
    expect(r.ok).toBe(true);
    expect((await store.requestCancel("parent/child", "stop")).state).toBe("requested");
    await clock.advance(5_000);
    loseAfter((sql) => sql.includes("no live worker has"));
    await store.markUnserved({ served: ["p@1"], graceMs: 0 });
    expect(lost()).toBe(1);
    expect((await store.getRun("parent/child"))?.status).toBe("canceled");
    // The parent must be runnable now, to read its child's outcome: the retry of the lost
    // commit found nothing left to cancel and woke nobody, and the parent waited forever.
    const parent = await store.getRun("parent");
    expect(parent?.status).toBe("waiting");
    expect(parent?.readyAt).not.toBeNull();
    expect(parent!.readyAt!).toBeLessThanOrEqual(await store.now());
  });

  it("a create whose commit's answer is lost answers created=true, as SQLite does", async () => {
    const { store, loseAfter, lost } = await openStore();
    loseAfter((sql) => sql.includes("jsonb_to_recordset"));
    const made = await store.createRun(newRun("mine", "f"));
    expect(lost()).toBe(1);
    // The retry found the run its lost try had made and answered created=false: start()
    // then told its caller (HTTP 200, the CLI's "already exists") the run was someone else's.
    expect(made.created).toBe(true);
    expect(made.run.status).toBe("pending");
    // Another create of the id is still answered created=false.
    expect((await store.createRun(newRun("mine", "f"))).created).toBe(false);
  });

  async function finished(store: Store, id: string): Promise<void> {
    await store.createRun(newRun(id, "f"));
    const [c] = await store.claimRuns({
      workerId: "w",
      workflows: ["f@1"],
      limit: 1,
      leaseMs: 1_000,
    });
    expect(c?.run.id).toBe(id);
    const r = await store.releaseRun({
      runId: id,
      epoch: c!.run.epoch,
      status: "completed",
      output: "null",
      readyAt: null,
    });
    expect(r.ok).toBe(true);
  }

  it("deleteRuns whose commit's answer is lost answers the runs it deleted, as deleteRun does", async () => {
    const { store, loseAfter, lost } = await openStore();
    await finished(store, "old-1");
    await finished(store, "old-2");
    loseAfter((sql) => sql.includes("DELETE FROM") && sql.includes("RETURNING epoch"));
    const out = await store.deleteRuns(["old-1", "old-2"]);
    expect(lost()).toBe(1);
    expect(await store.getRun("old-1")).toBeUndefined();
    // The retry found them gone and answered deleted: [], so gc counted 0 runs deleted.
    expect(out.deleted).toEqual(["old-1", "old-2"]);
  });
});

describe.skipIf(!pgUrl)("PostgreSQL: close() while calls are in flight", () => {
  it("a verb asked for while the last close() drains is refused, as on SQLite, not written", async () => {
    const { schema, drop } = testSchema(pgUrl!);
    // A caller's pool whose creates wait at a gate before they are sent: the create asked
    // for before close() is still being sent by close() when the next calls come.
    const pool = new pg.Pool({ connectionString: pgUrl!, max: 4 });
    let creates = 0;
    let openGate = () => {};
    const gate = new Promise<void>((resolve) => {
      openGate = resolve;
    });
    const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
    const gated = new WeakSet<object>();
    (pool as unknown as { connect: () => Promise<pg.PoolClient> }).connect = async () => {
      const c = await connect();
      if (gated.has(c)) return c;
      gated.add(c);
      const query = c.query.bind(c) as (sql: string, params?: unknown[]) => Promise<unknown>;
      (c as unknown as { query: unknown }).query = async (sql: string, params?: unknown[]) => {
        if (typeof sql === "string" && sql.includes("jsonb_to_recordset")) {
          creates++;
          await gate;
        }
        return query(sql, params);
      };
      return c;
    };
    const store = postgresStore(pool, { schema });
    await store.open({ clock: createVirtualClock() });
    try {
      const newRun = (id: string) => ({
        id,
        workflow: "w",
        version: "1",
        input: "null",
        budgetLimit: {},
      });
      const early = store.createRun(newRun("early"));
      await until(() => creates === 1, "the early create is being sent");
      const closing = store.close();
      const late = store.createRun(newRun("late"));
      const lateRead = store.getRun("early");
      let lateSettled = false;
      late
        .finally(() => {
          lateSettled = true;
        })
        .catch(() => {});
      lateRead.catch(() => {});
      // Fixed: refused at once. Before: queued, and sent by close() with the early one.
      await until(() => lateSettled || creates === 2, "the late create is answered or sent");
      openGate();
      await closing;
      expect((await early).created).toBe(true);
      await expect(late).rejects.toThrow(/not open/);
      await expect(lateRead).rejects.toThrow(/not open/);
      const r = await withClient(pgUrl!, (c) =>
        c.query(`SELECT id FROM "${schema}".runs ORDER BY id`),
      );
      expect(r.rows.map((row) => row.id)).toEqual(["early"]);
    } finally {
      openGate();
      await pool.end().catch(() => {});
      await drop();
    }
  });
});

describe("PostgreSQL: schema names", () => {
  it("PostgreSQL's own schema names are refused by name, before anything is created", () => {
    // information_schema was opened as given: a superuser's store created runs, steps,
    // workers... among the system views. pg_* failed only on open, with the server's words.
    for (const schema of ["information_schema", "pg_catalog", "pg_x"]) {
      expect(() => postgresStore("postgres://u@h/db", { schema })).toThrow(
        new RegExp(`invalid PostgreSQL schema name "${schema}".*reserved`),
      );
    }
    expect(() => postgresStore("postgres://u@h/db", { schema: "select" })).not.toThrow();
  });
});

describe.skipIf(!pgUrl)("PostgreSQL: subscribe and close", () => {
  it("a subscribe on a closed store opens no LISTEN connection; the next open starts it", async () => {
    const { schema, drop } = testSchema(pgUrl!);
    // The LISTEN client is made from the caller's pool's options: a socket factory there
    // counts every connection a client of this store makes (synchronously, in new Client()).
    let sockets = 0;
    const pool = new pg.Pool({
      connectionString: pgUrl!,
      max: 2,
      stream: () => {
        sockets++;
        return new Socket();
      },
    } as pg.PoolConfig);
    const store = postgresStore(pool, { schema });
    const clock = createVirtualClock();
    try {
      await store.open({ clock });
      await store.close();
      const before = sockets;
      const hints: string[] = [];
      const unsubscribe = store.subscribe((h) => hints.push(h.kind));
      // Before: a LISTEN client was made here for a closed store, and nothing ever closed
      // it: it kept the process alive, reconnecting for ever.
      expect(sockets).toBe(before);
      // Opened again, the subscriber hears hints (the LISTEN starts with the open).
      await store.open({ clock });
      await until(() => hints.includes("runnable"), "the subscriber hears the first hint");
      unsubscribe();
    } finally {
      await store.close();
      await pool.end().catch(() => {});
      await drop();
    }
  });
});
