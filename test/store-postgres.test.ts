// The PostgreSQL store: the shared Store contract, plus what only a real server can show:
// concurrent migrations, a newer schema refused, SKIP LOCKED claims racing, surviving
// terminated backends, and LISTEN/NOTIFY across store instances (including its reconnect).
// Each test uses its own schema, dropped afterwards.

import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { StoreError } from "../src/errors.js";
import type { Clock } from "../src/lib/clock.js";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { Store, StoreHint } from "../src/store/store.js";
import { createSettableClock, describeStoreContract } from "../src/testing/store-contract.js";
import { postgresTestUrl, testSchema, withClient } from "./helpers/postgres.js";
import { until } from "./helpers/sqlite.js";

const url = await postgresTestUrl();

if (url) {
  describeStoreContract("postgres", async () => {
    const { schema, drop } = testSchema(url);
    return {
      store: postgresStore(url, { schema, poolSize: 4 }),
      clock: createSettableClock(),
      cleanup: drop,
    };
  });
}

/** A URL whose connections carry a unique application_name, so a test can find (and
 *  terminate) exactly its own backends while other test files use the same server. */
function taggedUrl(base: string): { url: string; tag: string } {
  const tag = `ctest_${randomBytes(5).toString("hex")}`;
  const u = new URL(base);
  u.searchParams.set("application_name", tag);
  return { url: u.toString(), tag };
}

async function terminateBackends(base: string, tag: string, extra = "true"): Promise<number> {
  return withClient(base, async (c) => {
    const r = await c.query(
      `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
        WHERE application_name = $1 AND pid <> pg_backend_pid() AND ${extra}`,
      [tag],
    );
    return r.rowCount ?? 0;
  });
}

/**
 * A pool whose next `n` COMMITs are applied by the server but answered with a lost
 * connection: the "commit outcome unknown" case of failure-modes.md row 9, on demand.
 */
function lossyPool(real: pg.Pool): { pool: pg.Pool; loseCommits: (n: number) => void } {
  let toLose = 0;
  const pool = {
    options: real.options,
    on: (event: "error", fn: (err: Error) => void) => {
      real.on(event, fn);
      return pool;
    },
    removeListener: (event: "error", fn: (err: Error) => void) => {
      real.removeListener(event, fn);
      return pool;
    },
    end: () => real.end(),
    async connect(): Promise<pg.PoolClient> {
      const client = await real.connect();
      return new Proxy(client, {
        get(target, prop) {
          if (prop === "query") {
            return async (sql: string, params?: unknown[]) => {
              const result = await target.query(sql, params);
              if (sql === "COMMIT" && toLose > 0) {
                toLose--;
                throw new Error("Connection terminated unexpectedly");
              }
              return result;
            };
          }
          const v: unknown = Reflect.get(target, prop, target);
          return typeof v === "function" ? v.bind(target) : v;
        },
      });
    },
  };
  return {
    pool: pool as unknown as pg.Pool,
    loseCommits: (n) => {
      toLose = n;
    },
  };
}

describe.skipIf(!url)("PostgreSQL store", () => {
  const base = url ?? "";
  const cleanups: Array<() => Promise<void>> = [];
  const clock: Clock = realClock;

  afterEach(async () => {
    for (const fn of cleanups.splice(0).reverse()) await fn();
  });

  /** A store on a fresh schema, opened, closed and dropped after the test. */
  async function openStore(
    o: { schema?: string; url?: string; pool?: pg.Pool } = {},
  ): Promise<{ store: Store; schema: string }> {
    let schema = o.schema;
    if (!schema) {
      const s = testSchema(base);
      schema = s.schema;
      cleanups.push(s.drop);
    }
    const store = postgresStore(o.pool ?? o.url ?? base, { schema, poolSize: 4 });
    await store.open({ clock });
    cleanups.push(() => store.close());
    return { store, schema };
  }

  function newRunFor(id: string) {
    return { id, workflow: "alpha", version: "1", input: "{}", budgetLimit: {} };
  }

  describe("configuration and migrations", () => {
    it("refuses a schema name that is not a plain identifier", () => {
      for (const bad of ['x"; DROP SCHEMA public; --', "Upper", "1abc", "", "a".repeat(64)]) {
        expect(() => postgresStore(base, { schema: bad })).toThrow(StoreError);
      }
      expect(() => postgresStore(base, { schema: `_${"a".repeat(62)}` })).not.toThrow();
    });

    it("4 stores migrating a fresh schema at once all succeed, once", async () => {
      const { schema, drop } = testSchema(base);
      cleanups.push(drop);
      const stores = Array.from({ length: 4 }, () => postgresStore(base, { schema, poolSize: 2 }));
      await Promise.all(stores.map((s) => s.open({ clock })));
      for (const s of stores) cleanups.push(() => s.close());
      const versions = await withClient(base, (c) =>
        c.query(`SELECT version FROM "${schema}".schema_version ORDER BY version`),
      );
      expect(versions.rows.map((r) => r.version)).toEqual([1]);
      // Every store works against the one schema.
      const { created } = await stores[0]!.createRun(newRunFor("run_m"));
      expect(created).toBe(true);
      expect((await stores[3]!.getRun("run_m"))?.id).toBe("run_m");
    });

    it("refuses a schema newer than it knows, and changes nothing", async () => {
      const { schema, drop } = testSchema(base);
      cleanups.push(drop);
      await withClient(base, async (c) => {
        await c.query(`CREATE SCHEMA "${schema}"`);
        await c.query(`CREATE TABLE "${schema}".schema_version (version integer PRIMARY KEY)`);
        await c.query(`INSERT INTO "${schema}".schema_version VALUES (1), (2), (999)`);
      });
      const store = postgresStore(base, { schema });
      const err = await store.open({ clock }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StoreError);
      expect(String((err as Error).message)).toMatch(/version 999, newer than/);
      expect(String((err as Error).message)).toContain(schema);
      const tables = await withClient(base, (c) =>
        c.query("SELECT table_name FROM information_schema.tables WHERE table_schema = $1", [
          schema,
        ]),
      );
      expect(tables.rows.map((r) => r.table_name)).toEqual(["schema_version"]);
      // Closed again after the failed open: verbs refuse instead of hanging.
      await expect(store.getRun("x")).rejects.toThrow(/not open/);
    });

    it("a store that is not open says so", async () => {
      const store = postgresStore(base, { schema: "cairn_never_opened" });
      await expect(store.now()).rejects.toThrow(StoreError);
    });
  });

  describe("time", () => {
    it("a virtual clock's reading is the store's now: exact, and never steps back", async () => {
      const { schema, drop } = testSchema(base);
      cleanups.push(drop);
      const virtual = createSettableClock(1_700_000_000_000);
      const store = postgresStore(base, { schema, poolSize: 2 });
      await store.open({ clock: virtual });
      cleanups.push(() => store.close());
      expect(await store.now()).toBe(1_700_000_000_000);
      // Created now, claimable now: every time, with the clock stopped.
      for (let i = 0; i < 100; i++) {
        const { run } = await store.createRun(newRunFor(`run_${i}`));
        expect(run.readyAt).toBe(1_700_000_000_000);
        const claimed = await store.claimRuns({
          workerId: "w",
          workflows: ["alpha@1"],
          limit: 10,
          leaseMs: 1_000,
        });
        expect(claimed.map((c) => c.run.id)).toEqual([run.id]);
      }
      virtual.set(1_700_000_060_000);
      expect(await store.now()).toBe(1_700_000_060_000);
    });

    it("a real clock (within a second of Date.now()) defers to the database's clock", async () => {
      const ahead: Clock = { ...realClock, now: () => Date.now() + 500 };
      const { store } = await openStoreWithClock(ahead);
      const db = await withClient(base, (c) =>
        c.query<{ ms: string }>(
          "SELECT floor(extract(epoch from clock_timestamp()) * 1000)::bigint AS ms",
        ),
      );
      expect(Math.abs((await store.now()) - Number(db.rows[0]?.ms))).toBeLessThan(400);
    });
  });

  async function openStoreWithClock(c: Clock): Promise<{ store: Store }> {
    const { schema, drop } = testSchema(base);
    cleanups.push(drop);
    const store = postgresStore(base, { schema, poolSize: 2 });
    await store.open({ clock: c });
    cleanups.push(() => store.close());
    return { store };
  }

  describe("claims", () => {
    it("two stores claiming at once never get the same run (SKIP LOCKED)", async () => {
      const { store: a, schema } = await openStore();
      const { store: b } = await openStore({ schema });
      const total = 150;
      for (let i = 0; i < total; i += 50) {
        await Promise.all(
          Array.from({ length: 50 }, (_, j) => a.createRun(newRunFor(`run_${i + j}`))),
        );
      }
      const claimedBy = new Map<string, string[]>();
      async function drain(store: Store, workerId: string) {
        for (;;) {
          const got = await store.claimRuns({
            workerId,
            workflows: ["alpha@1"],
            limit: 7,
            leaseMs: 60_000,
          });
          if (got.length === 0) return;
          for (const c of got) {
            claimedBy.set(c.run.id, [...(claimedBy.get(c.run.id) ?? []), workerId]);
            expect(c.run.epoch).toBe(1);
          }
        }
      }
      await Promise.all([drain(a, "w-a"), drain(b, "w-b"), drain(a, "w-c"), drain(b, "w-d")]);
      expect(claimedBy.size).toBe(total);
      const twice = [...claimedBy.entries()].filter(([, by]) => by.length > 1);
      expect(twice).toEqual([]);
      // Both stores took part (each drains until nothing is left).
      const owners = new Set([...claimedBy.values()].map((by) => by[0]));
      expect(owners.size).toBeGreaterThan(1);
    });
  });

  describe("connection loss", () => {
    it("recovers when the pool's backends are terminated between calls", async () => {
      const { url: tagged, tag } = taggedUrl(base);
      const { store } = await openStore({ url: tagged });
      for (let i = 0; i < 5; i++) {
        await store.createRun(newRunFor(`run_${i}`));
        // Several connections in the pool, all killed while idle.
        await Promise.all([store.getRun("x"), store.getRun("y"), store.listRuns()]);
        expect(await terminateBackends(base, tag)).toBeGreaterThan(0);
        const run = await store.getRun(`run_${i}`);
        expect(run?.id).toBe(`run_${i}`);
      }
      expect(await store.listRuns()).toHaveLength(5);
    });

    it("recovers on a pool the caller passed in, too", async () => {
      const { url: tagged, tag } = taggedUrl(base);
      const pool = new pg.Pool({ connectionString: tagged, max: 3 });
      cleanups.push(() => pool.end());
      const { store } = await openStore({ pool });
      await store.createRun(newRunFor("run_p"));
      expect(await terminateBackends(base, tag)).toBeGreaterThan(0);
      expect((await store.getRun("run_p"))?.id).toBe("run_p");
    });

    it("a transaction whose backend dies before COMMIT is retried and lands once", async () => {
      const { url: tagged, tag } = taggedUrl(base);
      const { store, schema } = await openStore({ url: tagged });
      await store.createRun(newRunFor("run_e"));
      // Hold the run's row lock from another session, so sendEvent blocks inside its
      // transaction; terminate its backend there; then let go.
      const locker = new pg.Client({ connectionString: base });
      locker.on("error", () => {});
      await locker.connect();
      cleanups.push(() => locker.end());
      await locker.query("BEGIN");
      await locker.query(`SELECT 1 FROM "${schema}".runs WHERE id = 'run_e' FOR UPDATE`);
      const sent = store.sendEvent({ runId: "run_e", name: "go", payload: "1" });
      await until(
        async () => (await terminateBackends(base, tag, "wait_event_type = 'Lock'")) > 0,
        "the blocked sendEvent backend to be terminated",
      );
      await locker.query("COMMIT");
      const out = await sent;
      expect(out.ok).toBe(true);
      const journal = await store.loadJournal("run_e");
      expect(journal.events.map((e) => e.name)).toEqual(["go"]);
    });

    it("a fenced write retried after its backend died keeps the fence", async () => {
      const { url: tagged, tag } = taggedUrl(base);
      const { store, schema } = await openStore({ url: tagged });
      await store.createRun(newRunFor("run_f"));
      const [claimed] = await store.claimRuns({
        workerId: "w1",
        workflows: ["alpha@1"],
        limit: 1,
        leaseMs: 60_000,
      });
      const run = claimed!.run;
      const locker = new pg.Client({ connectionString: base });
      locker.on("error", () => {});
      await locker.connect();
      cleanups.push(() => locker.end());
      await locker.query("BEGIN");
      await locker.query(`SELECT 1 FROM "${schema}".runs WHERE id = 'run_f' FOR UPDATE`);
      const step = {
        runId: run.id,
        key: "a",
        seq: 0,
        name: "a",
        kind: "step" as const,
        outcome: "ok" as const,
        result: "1",
        error: null,
        spend: { usd: 0.25 },
        attempt: 1,
        startedAt: 1,
        completedAt: 2,
      };
      const written = store.appendRecords([{ runId: run.id, epoch: run.epoch, steps: [step] }]);
      await until(
        async () => (await terminateBackends(base, tag, "wait_event_type = 'Lock'")) > 0,
        "the blocked appendRecords backend to be terminated",
      );
      // While the write waits to be retried, another worker takes the run over.
      await locker.query(`UPDATE "${schema}".runs SET epoch = epoch + 1 WHERE id = 'run_f'`);
      await locker.query("COMMIT");
      expect(await written).toEqual([{ ok: false, reason: "lease-lost" }]);
      expect((await store.loadJournal(run.id)).steps).toEqual([]);
      expect((await store.getRun(run.id))?.budgetSpent).toEqual({});
    });
  });

  describe("a COMMIT whose answer is lost", () => {
    async function lossyStore() {
      const real = new pg.Pool({ connectionString: base, max: 3 });
      cleanups.push(() => real.end());
      const { pool, loseCommits } = lossyPool(real);
      const { store } = await openStore({ pool });
      return { store, loseCommits };
    }

    async function claimOne(store: Store, id: string) {
      await store.createRun(newRunFor(id));
      const claimed = await store.claimRuns({
        workerId: "w1",
        workflows: ["alpha@1"],
        limit: 10,
        leaseMs: 60_000,
      });
      const mine = claimed.find((c) => c.run.id === id);
      if (!mine) throw new Error(`run "${id}" was not claimed`);
      return mine.run;
    }

    it("appendRecords is retried and lands once (spend counted once)", async () => {
      const { store, loseCommits } = await lossyStore();
      const run = await claimOne(store, "run_a");
      loseCommits(1);
      const out = await store.appendRecords([
        {
          runId: run.id,
          epoch: run.epoch,
          steps: [
            {
              runId: run.id,
              key: "s",
              seq: 0,
              name: "s",
              kind: "step",
              outcome: "ok",
              result: "1",
              error: null,
              spend: { usd: 0.5 },
              attempt: 1,
              startedAt: 1,
              completedAt: 2,
            },
          ],
        },
      ]);
      expect(out).toEqual([{ ok: true }]);
      expect((await store.loadJournal(run.id)).steps).toHaveLength(1);
      expect((await store.getRun(run.id))?.budgetSpent).toEqual({ usd: 0.5 });
    });

    it("releaseRun is retried, recognizes its own release, and stores its events once", async () => {
      const { store, loseCommits } = await lossyStore();
      const { run: parent } = await store.createRun(newRunFor("run_parent"));
      const child = await claimOne(store, "run_child");
      loseCommits(1);
      const out = await store.releaseRun({
        runId: child.id,
        epoch: child.epoch,
        status: "completed",
        output: "42",
        readyAt: null,
        events: [{ runId: parent.id, name: "child:run_child", payload: "42" }],
      });
      expect(out.ok && out.run.status).toBe("completed");
      expect((await store.loadJournal(parent.id)).events.map((e) => e.payload)).toEqual(["42"]);
    });

    it("resumeRun is retried and bumps a failed run's generation once", async () => {
      const { store, loseCommits } = await lossyStore();
      const run = await claimOne(store, "run_r");
      await store.releaseRun({
        runId: run.id,
        epoch: run.epoch,
        status: "failed",
        error: { name: "Error", message: "boom" },
        readyAt: null,
      });
      loseCommits(1);
      const out = await store.resumeRun(run.id, {});
      expect(out.ok && out.run.status).toBe("pending");
      expect((await store.getRun(run.id))?.generation).toBe(run.generation + 1);
    });

    it("claimRuns is retried and hands over the runs its lost try claimed", async () => {
      const { store, loseCommits } = await lossyStore();
      await store.createRun(newRunFor("run_x"));
      await store.createRun(newRunFor("run_y"));
      loseCommits(1);
      const claimed = await store.claimRuns({
        workerId: "w1",
        workflows: ["alpha@1"],
        limit: 10,
        leaseMs: 60_000,
      });
      expect(claimed.map((c) => [c.run.id, c.run.epoch, c.recovered]).sort()).toEqual([
        ["run_x", 1, false],
        ["run_y", 1, false],
      ]);
    });

    it("sendEvent is not repeated blindly: it says the outcome is unknown", async () => {
      const { store, loseCommits } = await lossyStore();
      await store.createRun(newRunFor("run_s"));
      loseCommits(1);
      await expect(store.sendEvent({ runId: "run_s", name: "n", payload: "1" })).rejects.toThrow(
        /whether it took effect is unknown/,
      );
      // It did commit, exactly once.
      expect((await store.loadJournal("run_s")).events).toHaveLength(1);
    });

    it("createRun is retried and answers with the run it made", async () => {
      const { store, loseCommits } = await lossyStore();
      loseCommits(1);
      const out = await store.createRun(newRunFor("run_c"));
      expect(out.run.id).toBe("run_c");
      expect(await store.listRuns()).toHaveLength(1);
    });
  });

  describe("LISTEN/NOTIFY", () => {
    /** Publishes with `publishOne(i)` until `hints` shows the matching hint (a LISTEN that
     *  is not active yet misses a notification, by design: hints are only hints). */
    async function publishUntilHeard(
      hints: StoreHint[],
      publishOne: (i: number) => Promise<string>,
      kind: StoreHint["kind"],
    ): Promise<void> {
      for (let i = 0; i < 50; i++) {
        const runId = await publishOne(i);
        const deadline = Date.now() + 200;
        while (Date.now() < deadline) {
          if (hints.some((h) => h.kind === kind && h.runId === runId)) return;
          await new Promise((r) => setTimeout(r, 10));
        }
      }
      throw new Error(`no "${kind}" hint arrived`);
    }

    it("hints reach a subscriber of another store instance", async () => {
      const { store: a, schema } = await openStore();
      const { store: b } = await openStore({ schema });
      const hints: StoreHint[] = [];
      const unsubscribe = b.subscribe((h) => hints.push(h));
      cleanups.push(async () => unsubscribe());
      await publishUntilHeard(
        hints,
        async (i) => {
          await a.createRun(newRunFor(`run_c${i}`));
          return `run_c${i}`;
        },
        "runnable",
      );
      // A cancel of a pending run finishes it; an event wakes a waiting run.
      await a.requestCancel("run_c0", "no longer needed");
      await until(
        () => hints.some((h) => h.kind === "finished" && h.runId === "run_c0"),
        "finished",
      );
      await a.createRun(newRunFor("run_w"));
      const [c] = await a
        .claimRuns({
          workerId: "w",
          workflows: ["alpha@1"],
          limit: 100,
          leaseMs: 60_000,
        })
        .then((cs) => cs.filter((x) => x.run.id === "run_w"));
      await a.releaseRun({
        runId: "run_w",
        epoch: c!.run.epoch,
        status: "waiting",
        readyAt: null,
        waitingFor: ["go"],
      });
      hints.length = 0;
      await a.sendEvent({ runId: "run_w", name: "go", payload: "1" });
      await until(() => hints.some((h) => h.kind === "runnable" && h.runId === "run_w"), "wake");
    });

    it("reconnects after its LISTEN backend is terminated, and says to poll", async () => {
      const { url: tagged, tag } = taggedUrl(base);
      const { store: a, schema } = await openStore();
      const { store: b } = await openStore({ schema, url: tagged });
      const hints: StoreHint[] = [];
      const unsubscribe = b.subscribe((h) => hints.push(h));
      cleanups.push(async () => unsubscribe());
      await publishUntilHeard(
        hints,
        async (i) => {
          await a.createRun(newRunFor(`run_a${i}`));
          return `run_a${i}`;
        },
        "runnable",
      );
      hints.length = 0;
      await until(
        async () => (await terminateBackends(base, tag, "query LIKE 'LISTEN%'")) > 0,
        "the LISTEN backend to be terminated",
      );
      await until(
        () => hints.some((h) => h.kind === "runnable" && h.runId === undefined),
        "the synthetic runnable hint after reconnecting",
      );
      // And it listens again.
      await publishUntilHeard(
        hints,
        async (i) => {
          await a.createRun(newRunFor(`run_b${i}`));
          return `run_b${i}`;
        },
        "runnable",
      );
    });
  });
});
