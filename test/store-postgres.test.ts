// The PostgreSQL store: the shared Store contract, plus what only a real server can show:
// concurrent migrations, a newer schema refused, SKIP LOCKED claims racing, surviving
// terminated backends, and LISTEN/NOTIFY across store instances (including its reconnect).
// Each test uses its own schema, dropped afterwards.

import { randomBytes } from "node:crypto";
import net from "node:net";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { StoreError } from "../src/errors.js";
import type { Clock } from "../src/lib/clock.js";
import { realClock } from "../src/lib/clock.js";
import { SCHEMA_VERSION } from "../src/store/postgres/migrations/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { RunRecord, RunWrite, StepRecord, Store, StoreHint } from "../src/store/store.js";
import { createSettableClock, describeStoreContract } from "../src/testing/store-contract.js";
import { postgresTestUrl, testSchema, withClient } from "./helpers/postgres.js";
import { reusableSchema } from "./helpers/postgres-reuse.js";
import { until } from "./helpers/sqlite.js";
import { stepOf } from "./helpers/step-records.js";

const url = await postgresTestUrl();

if (url) {
  // Each test gets an empty schema: one an earlier contract test used, emptied (migrating a
  // fresh one for each of them was most of this file's time); the migrations themselves are
  // tested below, on fresh schemas.
  describeStoreContract("postgres", async () => {
    const { schema, url: tagged, release } = reusableSchema(url);
    return {
      store: postgresStore(tagged, { schema, poolSize: 4 }),
      clock: createSettableClock(),
      cleanup: release,
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
 * connection: the "commit outcome unknown" case, on demand.
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

/** `real`, counting the statements the server failed as deadlocked (40P01). */
function deadlockCountingPool(real: pg.Pool): { pool: pg.Pool; deadlocks: () => number } {
  let deadlocks = 0;
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
              try {
                return await target.query(sql, params);
              } catch (err) {
                if ((err as { code?: string }).code === "40P01") deadlocks++;
                throw err;
              }
            };
          }
          const v: unknown = Reflect.get(target, prop, target);
          return typeof v === "function" ? v.bind(target) : v;
        },
      });
    },
  };
  return { pool: pool as unknown as pg.Pool, deadlocks: () => deadlocks };
}

/**
 * A TCP proxy to the server that can hold what clients send (it still passes on what the
 * server answers): a client's Terminate message stays unsent while its backend is
 * terminated, the order DROP DATABASE ... WITH (FORCE) right after close() can make.
 */
async function holdingProxy(base: string): Promise<{
  url: string;
  /** The local ports of its connections to the server (pg_stat_activity.client_port). */
  ports: number[];
  hold: () => void;
  /** Holds what either side sends: a network partition, no FIN, no RST. */
  silence: () => void;
  /** Passes data on again (what was held is lost). */
  resume: () => void;
  allClosed: () => Promise<void>;
  close: () => Promise<void>;
}> {
  const target = new URL(base);
  let holding = false;
  let silent = false;
  const ports: number[] = [];
  const sockets = new Set<net.Socket>();
  const closed: Array<Promise<void>> = [];
  // allowHalfOpen: a client that has sent its Terminate still reads the server's answer.
  const server = net.createServer({ allowHalfOpen: true }, (client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    sockets.add(client).add(upstream);
    closed.push(new Promise((resolve) => client.once("close", () => resolve())));
    upstream.once("connect", () => ports.push(upstream.localPort ?? 0));
    client.on("error", () => upstream.destroy());
    upstream.on("error", () => client.destroy());
    const toServer = (send: () => void) => (holding ? undefined : send());
    client.on("data", (d) => toServer(() => upstream.write(d)));
    client.on("end", () => toServer(() => upstream.end()));
    upstream.on("data", (d) => (silent ? undefined : client.write(d)));
    upstream.on("end", () => (silent ? undefined : client.end()));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = new URL(base);
  url.host = `127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  return {
    url: url.toString(),
    ports,
    hold: () => {
      holding = true;
    },
    silence: () => {
      holding = true;
      silent = true;
    },
    resume: () => {
      holding = false;
      silent = false;
    },
    allClosed: async () => {
      await Promise.all(closed);
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
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

  /** Undoes migrations 5 to 15 (errors as text, the PID namespace, cairn/ai's tables,
   *  workspaces, approvals, effects' reconciled flag, trace context, the events-by-run
   *  index, release_runs, workers' leases and the epoch floor): a version-4 schema. Each new
   *  migration adds its undo here. */
  async function revertToVersion4(schema: string): Promise<void> {
    const toJsonb = `CASE WHEN error IS NULL THEN NULL ELSE jsonb_strip_nulls(jsonb_build_object(
        'name', error::jsonb -> 0, 'message', error::jsonb -> 1,
        'code', error::jsonb -> 2, 'stack', error::jsonb -> 3)) END`;
    await withClient(base, async (c) => {
      const q = `"${schema}"`;
      await c.query(`DROP FUNCTION ${q}.release_runs`);
      await c.query(`DROP TABLE ${q}.workspace_refs, ${q}.workspace_objects, ${q}.approvals`);
      await c.query(
        `DROP TABLE ${q}.rate_grants, ${q}.rate_limiters, ${q}.run_streams, ${q}.run_stream_heads`,
      );
      await c.query(
        `ALTER TABLE "${schema}".workers DROP COLUMN pid_namespace, DROP COLUMN lease_ms`,
      );
      await c.query(`DROP TABLE ${q}.epoch_floor, ${q}.store_marks`);
      await c.query(`ALTER TABLE "${schema}".steps DROP COLUMN reconciled`);
      await c.query(
        `ALTER TABLE "${schema}".runs DROP COLUMN trace_context, DROP COLUMN crash_unjudged,
           DROP COLUMN handed_input_digest, DROP COLUMN create_token, DROP COLUMN held_by,
           DROP COLUMN held_until`,
      );
      await c.query(`ALTER TABLE "${schema}".events DROP COLUMN send_token`);
      await c.query(`DROP INDEX "${schema}".events_run`);
      await c.query(`DROP INDEX "${schema}".events_unconsumed_by_name`);
      await c.query(`DROP INDEX "${schema}".steps_run_seq`);
      // Migration 26's indexes back to migration 1's.
      await c.query(`DROP INDEX "${schema}".runs_ready_idle`);
      await c.query(
        `CREATE INDEX runs_ready_at ON "${schema}".runs (ready_at) WHERE ready_at IS NOT NULL`,
      );
      await c.query(
        `CREATE INDEX runs_lease_owner ON "${schema}".runs (lease_owner)
          WHERE lease_owner IS NOT NULL`,
      );
      // Migration 27 dropped steps' foreign key to runs: migration 1's again.
      await c.query(
        `ALTER TABLE "${schema}".steps ADD CONSTRAINT steps_run_id_fkey FOREIGN KEY (run_id)
          REFERENCES "${schema}".runs (id) ON DELETE CASCADE`,
      );
      for (const table of ["runs", "steps", "attempts"]) {
        await c.query(
          `ALTER TABLE "${schema}".${table} ALTER COLUMN error TYPE jsonb USING ${toJsonb}`,
        );
      }
      await c.query(`DELETE FROM "${schema}".schema_version WHERE version > 4`);
    });
  }

  /** A store on an empty schema of its own (or `o.schema`), opened, and closed after the
   *  test. */
  async function openStore(
    o: { schema?: string; url?: string; pool?: pg.Pool } = {},
  ): Promise<{ store: Store; schema: string }> {
    let schema = o.schema;
    let own: string | undefined;
    if (!schema) {
      // An empty migrated schema an earlier test of this file used (helpers/postgres-reuse.ts):
      // migrating a fresh one for every test took seconds of the file; a test that altered
      // its schema gets a fresh one next time.
      const s = reusableSchema(base);
      schema = s.schema;
      own = s.url;
      cleanups.push(s.release);
    }
    const store = postgresStore(o.pool ?? o.url ?? own ?? base, { schema, poolSize: 4 });
    await store.open({ clock });
    cleanups.push(() => store.close());
    return { store, schema };
  }

  /** Another session that holds `runId`'s row lock (in an open transaction) until the
   *  test commits it: verbs of the store then wait for it inside their transactions. */
  async function holdRunLock(
    schema: string,
    runId: string,
    mode: "UPDATE" | "NO KEY UPDATE" = "UPDATE",
  ): Promise<pg.Client> {
    const locker = new pg.Client({ connectionString: base });
    locker.on("error", () => {});
    await locker.connect();
    cleanups.push(() => locker.end());
    await locker.query("BEGIN");
    await locker.query(`SELECT 1 FROM "${schema}".runs WHERE id = $1 FOR ${mode}`, [runId]);
    return locker;
  }

  function newRunFor(id: string) {
    return { id, workflow: "alpha", version: "1", input: "{}", budgetLimit: {} };
  }

  describe("configuration and migrations", () => {
    it("refuses a schema name that is not a plain identifier", () => {
      for (const bad of ['x"; DROP SCHEMA public; --', "Upper", "1abc", "", "a".repeat(64)]) {
        expect(() => postgresStore(base, { schema: bad })).toThrow(StoreError);
        expect(() => postgresStore(base, { schema: bad })).toThrow(
          /^postgresStore\(\): invalid PostgreSQL schema name ".*"; use lowercase letters/,
        );
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
      expect(versions.rows.map((r) => r.version)).toEqual(
        Array.from({ length: SCHEMA_VERSION }, (_, i) => i + 1),
      );
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

    it("upgrades a schema of version 4: errors recorded as jsonb read back the same as text", async () => {
      const { store, schema } = await openStore();
      await store.createRun(newRunFor("run_e"));
      const [claimed] = await store.claimRuns({
        workerId: "w1",
        workflows: ["alpha@1"],
        limit: 1,
        leaseMs: 60_000,
      });
      const run = claimed!.run;
      const message = 'line\nbreak "quoted" \\ back \u0001 ünï 👍 \u2028 end';
      const error = {
        name: "FatalError",
        code: "FATAL",
        message,
        stack: `Error: ${message}\n  at x`,
      };
      const plain = { name: "Error", message: "no code, no stack" };
      const s0 = stepOf(run.id, "a", 0, { outcome: "error", result: null, error });
      const a1 = {
        runId: run.id,
        key: "a",
        attempt: 1,
        generation: 0,
        startedAt: 1,
        endedAt: 2,
        error: plain,
        spend: {},
        retryAt: null,
      };
      const write = { runId: run.id, epoch: run.epoch, steps: [s0], attempts: [a1] };
      expect(await store.appendRecords([write])).toEqual([{ ok: true }]);
      await store.releaseRun({
        runId: run.id,
        epoch: run.epoch,
        status: "failed",
        error,
        readyAt: null,
      });
      await revertToVersion4(schema);
      const types = await withClient(base, (c) =>
        c.query(
          `SELECT DISTINCT data_type FROM information_schema.columns
            WHERE table_schema = $1 AND column_name = 'error'`,
          [schema],
        ),
      );
      expect(types.rows).toEqual([{ data_type: "jsonb" }]);
      const { store: upgraded } = await openStore({ schema });
      expect((await upgraded.getRun(run.id))?.error).toEqual(error);
      const j = await upgraded.loadJournal(run.id);
      expect(j.steps).toEqual([s0]);
      expect(j.attempts.map((a) => a.error)).toEqual([plain]);
      // Converted to the very text this cairn writes: the same records again are a no-op.
      expect(await upgraded.appendRecords([write])).toEqual([{ ok: true }]);
    });

    it("upgrades a schema of version 1 in place: its journal stays, and writes go on", async () => {
      const { store, schema } = await openStore();
      await store.createRun(newRunFor("run_u"));
      const [claimed] = await store.claimRuns({
        workerId: "w1",
        workflows: ["alpha@1"],
        limit: 1,
        leaseMs: 60_000,
      });
      const run = claimed!.run;
      // What a version-1 journal holds: no generation (0), no place in the delivery order.
      const legacy = { delivery: null, issuedAfter: null, issuedLate: false };
      const s0 = stepOf(run.id, "a", 0, { spend: { usd: 0.1 }, ...legacy });
      expect(await store.appendRecords([{ runId: run.id, epoch: run.epoch, steps: [s0] }])).toEqual(
        [{ ok: true }],
      );
      // Back to what version 1 was: the tables of migration 1 alone.
      await revertToVersion4(schema);
      await withClient(base, async (c) => {
        const q = `"${schema}"`;
        await c.query(`DROP FUNCTION ${q}.append_records, ${q}.add_amounts`);
        await c.query(`ALTER TABLE ${q}.steps DROP CONSTRAINT steps_pkey`);
        await c.query(
          `ALTER TABLE ${q}.steps DROP COLUMN generation, DROP COLUMN delivery,
             DROP COLUMN issued_after, DROP COLUMN issued_late, ADD PRIMARY KEY (run_id, key)`,
        );
        await c.query(`ALTER TABLE ${q}.runs DROP COLUMN failed_calls`);
        await c.query(`ALTER TABLE ${q}.events DROP COLUMN idempotency_key`);
        await c.query(`DELETE FROM ${q}.schema_version WHERE version > 1`);
      });
      const { store: upgraded } = await openStore({ schema });
      const s1 = stepOf(run.id, "b", 1, { spend: { usd: 0.2 } });
      expect(
        await upgraded.appendRecords([{ runId: run.id, epoch: run.epoch, steps: [s0, s1] }]),
      ).toEqual([{ ok: true }]);
      expect((await upgraded.loadJournal(run.id)).steps).toEqual([s0, s1]);
      // Read rounded to 12 decimals, as every sum of amounts is (lib/amounts.ts).
      expect((await upgraded.getRun(run.id))?.budgetSpent).toEqual({ usd: 0.3 });
      expect((await upgraded.getRun(run.id))?.failedCalls).toEqual([]);
    });
  });

  describe("group commit (appendRecords)", () => {
    /** `n` runs created and claimed on `store`, in id order. */
    async function claimedRuns(store: Store, n: number): Promise<RunRecord[]> {
      const ids = Array.from({ length: n }, (_, i) => `run_${String(i).padStart(3, "0")}`);
      await Promise.all(ids.map((id) => store.createRun(newRunFor(id))));
      const claimed = await store.claimRuns({
        workerId: "w1",
        workflows: ["alpha@1"],
        limit: n,
        leaseMs: 60_000,
      });
      expect(claimed).toHaveLength(n);
      return claimed.map((c) => c.run).sort((a, b) => (a.id < b.id ? -1 : 1));
    }

    /** A pool that logs every statement its clients send. */
    function loggingPool(real: pg.Pool): { pool: pg.Pool; log: string[] } {
      const log: string[] = [];
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
                return (sql: string, params?: unknown[]) => {
                  log.push(sql);
                  return target.query(sql, params);
                };
              }
              const v: unknown = Reflect.get(target, prop, target);
              return typeof v === "function" ? v.bind(target) : v;
            },
          });
        },
      };
      return { pool: pool as unknown as pg.Pool, log };
    }

    it("a batch of 50 with one lease lost and one conflict commits the other 48, once", async () => {
      const { store, schema } = await openStore();
      const runs = await claimedRuns(store, 50);
      const r10 = runs[10]!;
      const r20 = runs[20]!;
      // Run #10 is taken over by another worker; run #20 already holds key "a".
      await withClient(base, (c) =>
        c.query(`UPDATE "${schema}".runs SET epoch = epoch + 1 WHERE id = $1`, [r10.id]),
      );
      const existing = stepOf(r20.id, "a", 0, { result: '"first"' });
      await store.appendRecords([{ runId: r20.id, epoch: r20.epoch, steps: [existing] }]);

      const writeOf = (run: RunRecord): RunWrite => ({
        runId: run.id,
        epoch: run.epoch,
        steps: [
          stepOf(run.id, "a", 0, { spend: { tokens: 10, usd: 0.1 } }),
          stepOf(run.id, "b", 1, { spend: { usd: 0.2 } }),
        ],
        attempts: [
          {
            runId: run.id,
            key: "b",
            attempt: 1,
            generation: 0,
            startedAt: 1,
            endedAt: 2,
            error: { name: "Error", message: "first try failed" },
            spend: { tokens: 1 },
            retryAt: 3,
          },
        ],
        intents: [
          { runId: run.id, key: "c", kind: "effect", name: "c", data: '{"x":1}', createdAt: 4 },
        ],
      });
      const batch = runs.map(writeOf);
      const expected = runs.map((run) =>
        run === r10
          ? { ok: false, reason: "lease-lost" }
          : run === r20
            ? { ok: false, reason: "conflict", key: "a" }
            : { ok: true },
      );
      expect(await store.appendRecords(batch)).toEqual(expected);

      async function expectLandedOnce() {
        for (const run of runs) {
          const journal = await store.loadJournal(run.id);
          const spent = (await store.getRun(run.id))?.budgetSpent;
          if (run === r10) {
            expect(journal).toEqual({ steps: [], attempts: [], intents: [], events: [] });
            expect(spent).toEqual({});
          } else if (run === r20) {
            expect(journal).toEqual({ steps: [existing], attempts: [], intents: [], events: [] });
            expect(spent).toEqual({});
          } else {
            const w = writeOf(run);
            expect(journal).toEqual({
              steps: w.steps,
              attempts: w.attempts,
              intents: w.intents,
              events: [],
            });
            // Each row once, read rounded to 12 decimals (lib/amounts.ts): 0.1 + 0.2 is 0.3.
            expect(spent).toEqual({ tokens: 11, usd: 0.3 });
          }
        }
      }
      await expectLandedOnce();
      // The whole batch again, as after a lost answer: the same outcomes, nothing new.
      expect(await store.appendRecords(structuredClone(batch))).toEqual(expected);
      await expectLandedOnce();
    });

    it("sends a batch of any size as one statement", async () => {
      const real = new pg.Pool({ connectionString: base, max: 2 });
      cleanups.push(() => real.end());
      const { pool, log } = loggingPool(real);
      const { store } = await openStore({ pool });
      const runs = await claimedRuns(store, 40);
      for (const size of [1, 40]) {
        log.length = 0;
        const out = await store.appendRecords(
          runs.slice(0, size).map((run) => ({
            runId: run.id,
            epoch: run.epoch,
            steps: [stepOf(run.id, `s${size}`, size)],
          })),
        );
        expect(out).toEqual(runs.slice(0, size).map(() => ({ ok: true })));
        // A caller's pool gets the session timeouts in its BEGIN; the store's own pool
        // sends the one SELECT alone, in autocommit.
        expect(log).toHaveLength(3);
        expect(log[0]).toMatch(/^BEGIN/);
        expect(log[1]).toMatch(/^SELECT "[a-z0-9_]+"\.append_records\(\$1::jsonb, \$2::bigint\)/);
        expect(log[2]).toBe("COMMIT");
      }
    });

    it("compares repeats of a key within one write, and writes of one run in one batch", async () => {
      const { store } = await openStore();
      const [run] = await claimedRuns(store, 1);
      const a = stepOf(run!.id, "a", 0, { spend: { tokens: 5 } });
      const w = { runId: run!.id, epoch: run!.epoch };
      // The same record twice in a write: stored and counted once.
      expect(await store.appendRecords([{ ...w, steps: [a, { ...a }] }])).toEqual([{ ok: true }]);
      // A different one after it: a conflict, and the write's other records land nothing.
      const b = stepOf(run!.id, "b", 1, { spend: { tokens: 7 } });
      expect(await store.appendRecords([{ ...w, steps: [b, { ...b, name: "other" }] }])).toEqual([
        { ok: false, reason: "conflict", key: "b" },
      ]);
      // Two writes of one run in one batch: the second sees the first.
      expect(
        await store.appendRecords([
          { ...w, steps: [b] },
          { ...w, steps: [b, stepOf(run!.id, "c", 2)] },
          { ...w, steps: [{ ...b, result: '"changed"' }] },
        ]),
      ).toEqual([{ ok: true }, { ok: true }, { ok: false, reason: "conflict", key: "b" }]);
      expect((await store.loadJournal(run!.id)).steps.map((s) => s.key)).toEqual(["a", "b", "c"]);
      expect((await store.getRun(run!.id))?.budgetSpent).toEqual({ tokens: 12 });
    });

    it("an event named twice in one write goes to its first key", async () => {
      const { store } = await openStore();
      const [run] = await claimedRuns(store, 1);
      const ev = await store.sendEvent({ runId: run!.id, name: "go", payload: "1" });
      if (!ev.ok) throw new Error("sendEvent refused");
      const w = { runId: run!.id, epoch: run!.epoch };
      expect(
        await store.appendRecords([
          {
            ...w,
            consume: [
              { eventSeq: ev.event.seq, key: "wait:0" },
              { eventSeq: ev.event.seq, key: "wait:1" },
            ],
          },
        ]),
      ).toEqual([{ ok: false, reason: "conflict", key: "wait:1" }]);
      expect((await store.loadJournal(run!.id)).events).toEqual([ev.event]);
      const twice = [
        { eventSeq: ev.event.seq, key: "wait:0" },
        { eventSeq: ev.event.seq, key: "wait:0" },
      ];
      expect(await store.appendRecords([{ ...w, consume: twice }])).toEqual([{ ok: true }]);
      expect(await store.appendRecords([{ ...w, consume: twice }])).toEqual([{ ok: true }]);
      expect((await store.loadJournal(run!.id)).events).toEqual([]);
    });

    it("a write PostgreSQL cannot store fails alone as unstorable; the good write of its batch lands", async () => {
      const { store } = await openStore();
      const [good, bad] = await claimedRuns(store, 2);
      const goodWrite = {
        runId: good!.id,
        epoch: good!.epoch,
        steps: [stepOf(good!.id, "a", 0, { spend: { tokens: 1 } })],
      };
      const cases: Array<{ step: StepRecord; message: RegExp }> = [
        // Refused before the batch is sent (storable.ts), as the SQLite store refuses them.
        { step: stepOf(bad!.id, "nul\u0000key", 0), message: /key .*NUL character/ },
        { step: stepOf(bad!.id, "k", 0, { result: "a\u0000b" }), message: /result .*NUL/ },
        // Refused by PostgreSQL itself, inside the one-statement batch: found by sending the
        // writes one by one. A seq over int4 is a data exception (SQLSTATE 22003) ...
        { step: stepOf(bad!.id, "big", 2 ** 40), message: /SQLSTATE 22003/ },
        // ... and random hex, which does not compress, is too big for a btree entry (54000).
        { step: stepOf(bad!.id, randomBytes(8_000).toString("hex"), 0), message: /SQLSTATE 54000/ },
      ];
      for (const c of cases) {
        const out = await store.appendRecords([
          goodWrite,
          { runId: bad!.id, epoch: bad!.epoch, steps: [c.step] },
        ]);
        expect(out).toEqual([
          { ok: true },
          {
            ok: false,
            reason: "unstorable",
            key: c.step.key,
            message: expect.stringMatching(c.message),
          },
        ]);
      }
      expect((await store.loadJournal(good!.id)).steps).toEqual(goodWrite.steps);
      expect((await store.getRun(good!.id))?.budgetSpent).toEqual({ tokens: 1 });
      expect((await store.loadJournal(bad!.id)).steps).toEqual([]);
      expect((await store.getRun(bad!.id))?.budgetSpent).toEqual({});
    });

    describe("grouped releases (release_runs)", () => {
      it("releases asked for in one turn go as one statement; each gets its own answer", async () => {
        const real = new pg.Pool({ connectionString: base, max: 2 });
        cleanups.push(() => real.end());
        const { pool, log } = loggingPool(real);
        const { store } = await openStore({ pool });
        const runs = await claimedRuns(store, 12);
        log.length = 0;
        const out = await Promise.all(
          runs.map((run, i) =>
            store.releaseRun({
              runId: run.id,
              // One of them is a stale owner's: fenced out alone.
              epoch: i === 3 ? run.epoch - 1 : run.epoch,
              status: i % 2 === 0 ? "completed" : "failed",
              output: i % 2 === 0 ? String(i) : null,
              error: i % 2 === 0 ? null : { name: "Error", message: `boom ${i}` },
              failedKeys: i % 2 === 0 ? [] : [`s${i}`],
              readyAt: null,
            }),
          ),
        );
        expect(log.filter((q) => q.includes("release_runs"))).toHaveLength(1);
        out.forEach((o, i) => {
          if (i === 3) expect(o).toEqual({ ok: false, reason: "lease-lost" });
          else
            expect(o.ok && [o.run.id, o.run.status, o.run.output]).toEqual([
              runs[i]!.id,
              i % 2 === 0 ? "completed" : "failed",
              i % 2 === 0 ? String(i) : null,
            ]);
        });
        expect((await store.getRun(runs[3]!.id))?.status).toBe("running");
        expect((await store.getRun(runs[5]!.id))?.failedCalls).toEqual([
          { key: "s5", generation: 0 },
        ]);
      });

      it("takes a release from an older cairn, which names one failed call as failed_key", async () => {
        const { store, schema } = await openStore();
        const [run] = await claimedRuns(store, 1);
        // A worker of cairn before migration 16, during a rolling deploy.
        const older = {
          run_id: run!.id,
          epoch: run!.epoch,
          status: "failed",
          error: JSON.stringify(["Error", "boom", null, null]),
          ready_at: null,
          waiting_for: [],
          failed_key: "s1",
        };
        await withClient(base, (c) =>
          c.query(`SELECT id FROM "${schema}".release_runs(NULL, $1::jsonb, false, 'x')`, [
            JSON.stringify([older]),
          ]),
        );
        expect((await store.getRun(run!.id))?.failedCalls).toEqual([{ key: "s1", generation: 0 }]);
      });

      it("a release PostgreSQL cannot store fails alone; the others of its group land", async () => {
        const { store } = await openStore();
        const runs = await claimedRuns(store, 3);
        const out = await Promise.allSettled(
          runs.map((run, i) =>
            store.releaseRun({
              runId: run.id,
              epoch: run.epoch,
              status: "pending",
              // Past bigint: PostgreSQL refuses the number (a data exception).
              readyAt: i === 1 ? 1e30 : 1_700_000_000_000,
            }),
          ),
        );
        expect(out.map((o) => o.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
        expect((out[1] as PromiseRejectedResult).reason).toBeInstanceOf(StoreError);
        expect((await store.getRun(runs[0]!.id))?.status).toBe("pending");
        expect((await store.getRun(runs[1]!.id))?.status).toBe("running");
        expect((await store.getRun(runs[2]!.id))?.status).toBe("pending");
      });

      it("creates asked for in one turn go as one statement; a taken id is not made", async () => {
        const real = new pg.Pool({ connectionString: base, max: 2 });
        cleanups.push(() => real.end());
        const { pool, log } = loggingPool(real);
        const { store } = await openStore({ pool });
        await store.createRun(newRunFor("run_taken"));
        log.length = 0;
        const claimBy = { workerId: "w1", leaseMs: 60_000 };
        const asked = [
          { ...newRunFor("run_a"), claimBy },
          { ...newRunFor("run_b"), claimBy },
          { ...newRunFor("run_taken"), claimBy },
          { ...newRunFor("run_a"), claimBy },
          newRunFor("run_c"),
          newRunFor("run_b"),
        ];
        const out = await Promise.all(asked.map((run) => store.createRun(run)));
        // One INSERT for the distinct ids, one for the repeated ids; reads for those not made.
        expect(log.filter((q) => q.includes(`INSERT INTO "`))).toHaveLength(2);
        expect(out.map((o) => [o.run.id, o.created, o.run.status, o.run.leaseOwner])).toEqual([
          ["run_a", true, "running", "w1"],
          ["run_b", true, "running", "w1"],
          ["run_taken", false, "pending", null],
          ["run_a", false, "running", "w1"],
          ["run_c", true, "pending", null],
          ["run_b", false, "running", "w1"],
        ]);
        expect((await store.getRun("run_taken"))?.leaseOwner).toBeNull();
        const c = await store.getRun("run_c");
        expect([c?.epoch, c?.readyAt === c?.createdAt]).toEqual([0, true]);
      });

      it("a claimed create PostgreSQL cannot store fails alone; the others of its turn are made", async () => {
        const { store } = await openStore();
        const out = await Promise.allSettled(
          [60_000, 1e30, 60_000].map((leaseMs, i) =>
            store.createRun({ ...newRunFor(`run_${i}`), claimBy: { workerId: "w1", leaseMs } }),
          ),
        );
        expect(out.map((o) => o.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
        expect((out[1] as PromiseRejectedResult).reason).toBeInstanceOf(StoreError);
        expect((await store.listRuns()).map((r) => r.id).sort()).toEqual(["run_0", "run_2"]);
      });

      it("a create or release a CHECK or NOT NULL refuses fails alone; the others of its turn land", async () => {
        const { store } = await openStore();
        const runs = await claimedRuns(store, 3);
        const released = await Promise.allSettled(
          runs.map((run, i) =>
            store.releaseRun({
              runId: run.id,
              epoch: run.epoch,
              // Not a status: the table's CHECK refuses it.
              status: (i === 1 ? "sleeping" : "completed") as "completed",
              readyAt: null,
            }),
          ),
        );
        expect(released.map((o) => o.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
        expect((await store.getRun(runs[1]!.id))?.status).toBe("running");
        const created = await Promise.allSettled(
          ["run_n0", "run_n1", "run_n2"].map((id, i) =>
            store.createRun({
              ...newRunFor(id),
              // No version: NOT NULL refuses it.
              ...(i === 1 ? { version: undefined as unknown as string } : {}),
            }),
          ),
        );
        expect(created.map((o) => o.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
        expect(await store.getRun("run_n1")).toBeUndefined();
        expect((await store.getRun("run_n2"))?.status).toBe("pending");
      });

      it("two stores creating the same ids in opposite orders insert them in one order (no deadlock)", async () => {
        // Each deadlock the server breaks fails one of its transactions with 40P01 (which the
        // store retries): counted on the stores' own connections. (A database of its own,
        // counted by pg_stat_database, cost a DROP DATABASE: a checkpoint of the whole
        // server, up to tens of seconds beside the other test files.)
        const { schema, drop } = testSchema(base);
        cleanups.push(drop);
        const counted = [0, 1].map(() =>
          deadlockCountingPool(new pg.Pool({ connectionString: base, max: 4 })),
        );
        const stores = counted.map(({ pool }) => postgresStore(pool, { schema }));
        for (const [i, store] of stores.entries()) {
          await store.open({ clock });
          cleanups.push(() => counted[i]!.pool.end());
          cleanups.push(() => store.close());
        }
        const deadlocks = async () => counted.reduce((n, c) => n + c.deadlocks(), 0);
        for (let round = 0; round < 5; round++) {
          const ids = Array.from(
            { length: 100 },
            (_, i) => `run_${round}_${String(i).padStart(3, "0")}`,
          );
          const claimBy = { workerId: "w", leaseMs: 60_000 };
          const [a, b] = await Promise.all([
            Promise.all(ids.map((id) => stores[0]!.createRun({ ...newRunFor(id), claimBy }))),
            Promise.all(
              [...ids].reverse().map((id) => stores[1]!.createRun({ ...newRunFor(id), claimBy })),
            ),
          ]);
          // Each id made exactly once, by one of the two.
          const made = [...a, ...b].filter((o) => o.created).map((o) => o.run.id);
          expect(made.sort()).toEqual([...ids].sort());
        }
        // Inserted in the order asked for, this made several deadlocks a round.
        expect(await deadlocks()).toBe(0);
      });

      it("one run released twice in a turn: the second goes after the first, and finds it released", async () => {
        const { store } = await openStore();
        const [run] = await claimedRuns(store, 1);
        const release = { runId: run!.id, epoch: run!.epoch, readyAt: null } as const;
        const [first, second] = await Promise.all([
          store.releaseRun({ ...release, status: "completed", output: "1" }),
          store.releaseRun({ ...release, status: "completed", output: "2" }),
        ]);
        expect(first.ok && first.run.output).toBe("1");
        // A run no longer running is released by no one (migration 17; SQLite alike): the
        // first release is never rewritten.
        expect(second).toEqual({ ok: false, reason: "lease-lost" });
        expect((await store.getRun(run!.id))?.output).toBe("1");
      });

      it("two close() calls at once close it once: it opens again and works", async () => {
        const s = testSchema(base);
        cleanups.push(s.drop);
        const store = postgresStore(base, { schema: s.schema, poolSize: 2 });
        await store.open({ clock });
        const created = store.createRun(newRunFor("run_before_close"));
        await Promise.all([store.close(), store.close()]);
        expect((await created).created).toBe(true);
        // Opened again while a last close() is still ending the pool: it waits for it.
        await store.open({ clock });
        const closing = store.close();
        await store.open({ clock });
        await closing;
        expect((await store.createRun(newRunFor("run_between"))).created).toBe(true);
        await store.close();
        await store.open({ clock });
        cleanups.push(() => store.close());
        expect((await store.createRun(newRunFor("run_after"))).created).toBe(true);
        expect((await store.listRuns()).map((r) => r.id).sort()).toEqual([
          "run_after",
          "run_before_close",
          "run_between",
        ]);
      });

      it("backends terminated after close() resolved, before their sockets closed, crash nothing", async () => {
        // pg-pool's end() resolves when its clients are asked to end, not when they have:
        // a FATAL "terminating connection" arriving then is re-emitted as 'error' on the
        // pool, an uncaught exception if close() had taken the pool's listener away.
        const proxy = await holdingProxy(base);
        cleanups.push(proxy.close);
        const uncaught: unknown[] = [];
        const onUncaught = (err: unknown) => uncaught.push(err);
        process.prependListener("uncaughtException", onUncaught);
        cleanups.push(async () => {
          process.removeListener("uncaughtException", onUncaught);
        });
        const s = testSchema(base);
        cleanups.push(s.drop);
        const store = postgresStore(proxy.url, { schema: s.schema, poolSize: 2 });
        await store.open({ clock });
        await store.listRuns();
        const pids = await withClient(base, async (c) =>
          (
            await c.query("SELECT pid FROM pg_stat_activity WHERE client_port = ANY($1::int[])", [
              proxy.ports,
            ])
          ).rows.map((r) => r.pid as number),
        );
        expect(pids.length).toBeGreaterThan(0);
        proxy.hold();
        await store.close();
        await withClient(base, (c) =>
          c.query("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", [pids]),
        );
        await proxy.allClosed();
        await new Promise((resolve) => setTimeout(resolve, 20));
        expect(uncaught.map(String)).toEqual([]);
      });

      it("close() during a network partition ends, its sockets closed after a wait", async () => {
        const proxy = await holdingProxy(base);
        cleanups.push(proxy.close);
        const s = testSchema(base);
        cleanups.push(s.drop);
        const store = postgresStore(proxy.url, { schema: s.schema, poolSize: 2 });
        await store.open({ clock });
        const heard: string[] = [];
        const off = store.subscribe((h) => heard.push(h.kind));
        await until(() => heard.length > 0, "the LISTEN connection");
        off();
        proxy.silence();
        const sockets = () =>
          process.getActiveResourcesInfo().filter((r) => r === "TCPSocketWrap").length;
        const before = sockets();
        // Before, pg's end() waited for the server's goodbye, forever (the LISTEN client),
        // or left the pool's sockets half-closed, keeping the process alive.
        await store.close();
        // What is left open is the proxy's own pair per connection, not the store's side
        // (a dropped socket is gone once its 'close' has been emitted, a tick later).
        await new Promise((resolve) => setTimeout(resolve, 50));
        expect(sockets()).toBe(before - proxy.ports.length);
      }, 20_000);

      it("a server silent for a moment: the client's query_timeout counts as a lost connection, retried", async () => {
        const proxy = await holdingProxy(base);
        cleanups.push(proxy.close);
        const s = testSchema(base);
        cleanups.push(s.drop);
        // A caller's pool with short client-side limits (the store's own pool times a query
        // out at statement_timeout + 5 s).
        const pool = new pg.Pool({
          connectionString: proxy.url,
          max: 1,
          query_timeout: 300,
          connectionTimeoutMillis: 300,
        });
        cleanups.push(() => pool.end());
        const store = postgresStore(pool, { schema: s.schema });
        await store.open({ clock });
        cleanups.push(() => store.close());
        await store.createRun(newRunFor("run_partition"));
        proxy.silence();
        const read = store.getRun("run_partition");
        // The partition heals after the first try timed out; the retries (seconds of them)
        // find the server again. Taken as any other error, the read failed at its first
        // timeout.
        await new Promise((resolve) => setTimeout(resolve, 500));
        proxy.resume();
        expect((await read)?.id).toBe("run_partition");
      }, 30_000);

      it("close() sends the releases asked for before it", async () => {
        const s = testSchema(base);
        cleanups.push(s.drop);
        const store = postgresStore(base, { schema: s.schema, poolSize: 2 });
        await store.open({ clock });
        const runs = await claimedRuns(store, 5);
        const released = runs.map((run) =>
          store.releaseRun({ runId: run.id, epoch: run.epoch, status: "completed", readyAt: null }),
        );
        await store.close();
        expect((await Promise.all(released)).every((o) => o.ok)).toBe(true);
        const again = postgresStore(base, { schema: s.schema, poolSize: 2 });
        await again.open({ clock });
        cleanups.push(() => again.close());
        for (const run of runs) expect((await again.getRun(run.id))?.status).toBe("completed");
      });
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

    it("a stopped virtual clock started at Date.now() stays the store's time as real time passes", async () => {
      // It was taken for the real clock while its reading was within a second of Date.now():
      // a run created then got the database's time as readyAt, and a claim a second later,
      // at the clock's stopped reading, never found it (a retention test hung on this).
      const stopped = createSettableClock(Date.now());
      const { store } = await openStoreWithClock(stopped);
      const { run } = await store.createRun(newRunFor("run_early"));
      expect(run.readyAt).toBe(stopped.now());
      await new Promise((r) => setTimeout(r, 1_100));
      expect(await store.now()).toBe(stopped.now());
      const claimed = await store.claimRuns({
        workerId: "w",
        workflows: ["alpha@1"],
        limit: 10,
        leaseMs: 1_000,
      });
      expect(claimed.map((c) => c.run.id)).toEqual(["run_early"]);
    });

    it("a system clock (clock.system, as realClock) defers to the database's clock", async () => {
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
      const locker = await holdRunLock(schema, "run_e");
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

    // Sessions whose server default is REPEATABLE READ (set here in the URL, as a role or a
    // database setting would): the store's verbs must still see each statement's commits.
    const repeatableRead = `${base}${base.includes("?") ? "&" : "?"}options=${encodeURIComponent(
      "-c default_transaction_isolation=repeatable\\ read",
    )}`;
    const setups = [
      ["the store's own pool", () => openStore()],
      ["its own pool, server default REPEATABLE READ", () => openStore({ url: repeatableRead })],
      [
        "a caller's pool, server default REPEATABLE READ",
        () => {
          const pool = new pg.Pool({ connectionString: repeatableRead, max: 3 });
          cleanups.push(() => pool.end());
          return openStore({ pool });
        },
      ],
    ] as const;
    for (const [setup, open] of setups) {
      for (const withEvents of [false, true]) {
        it(`a release to waiting sees an event whose sender held the run's lock first (${setup}${withEvents ? ", a release with events" : ""})`, async () => {
          // The release locks the row, THEN looks for an unconsumed event in a new statement
          // (and snapshot): an event committed while it waited for the lock must wake the
          // run. Looked for in an older snapshot, it would not be seen and the run would wait
          // forever with its event beside it.
          const { store, schema } = await open();
          await store.createRun(newRunFor("run_w"));
          const [claimed] = await store.claimRuns({
            workerId: "w1",
            workflows: ["alpha@1"],
            limit: 1,
            leaseMs: 60_000,
          });
          const run = claimed!.run;
          const locker = await holdRunLock(schema, "run_w", "NO KEY UPDATE");
          await locker.query(
            `INSERT INTO "${schema}".events (run_id, name, payload, created_at) VALUES ('run_w', 'go', '1', 1)`,
          );
          const released = store.releaseRun({
            runId: run.id,
            epoch: run.epoch,
            status: "waiting",
            readyAt: null,
            waitingFor: ["go"],
            // An event for a run that does not exist is dropped; it only makes this release
            // the transaction of a release with events.
            ...(withEvents ? { events: [{ runId: "run_nobody", name: "x", payload: "1" }] } : {}),
          });
          await until(
            async () =>
              (
                await withClient(base, (c) =>
                  c.query(
                    "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
                    [`%"${schema}".%`],
                  ),
                )
              ).rowCount === 1,
            "the release to wait for the run's lock",
          );
          await locker.query("COMMIT");
          const out = await released;
          expect(out.ok && out.run.status).toBe("waiting");
          expect(out.ok && out.run.readyAt).not.toBeNull();
        });
      }
    }

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
      const locker = await holdRunLock(schema, "run_f");
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
        generation: 0,
        delivery: 0,
        issuedAfter: 0,
        issuedLate: false,
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
              generation: 0,
              delivery: 0,
              issuedAfter: 0,
              issuedLate: false,
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

    it("a release without events (sent in a group) is retried and recognizes its own release", async () => {
      const { store, loseCommits } = await lossyStore();
      const run = await claimOne(store, "run_lost_release");
      loseCommits(1);
      const out = await store.releaseRun({
        runId: run.id,
        epoch: run.epoch,
        status: "failed",
        error: { name: "Error", message: "boom" },
        failedKeys: ["s"],
        readyAt: null,
      });
      // Applied twice, the failed call would be listed twice.
      expect(out.ok && out.run.failedCalls).toEqual([{ key: "s", generation: 0 }]);
      expect((await store.getRun(run.id))?.failedCalls).toEqual([{ key: "s", generation: 0 }]);
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

    it("sendEvent is not repeated blindly: its retry answers the event its lost try stored", async () => {
      const { store, loseCommits } = await lossyStore();
      await store.createRun(newRunFor("run_s"));
      loseCommits(1);
      const sent = await store.sendEvent({ runId: "run_s", name: "n", payload: "1" });
      expect(sent).toMatchObject({ ok: true, duplicate: false });
      // It did commit, exactly once.
      expect((await store.loadJournal("run_s")).events).toHaveLength(1);
    });

    it("claimed creates of one turn, retried as a group, are each recognized as made", async () => {
      const { store, loseCommits } = await lossyStore();
      loseCommits(1);
      const claimBy = { workerId: "w1", leaseMs: 60_000 };
      const out = await Promise.all(
        ["run_g1", "run_g2", "run_g3"].map((id) => store.createRun({ ...newRunFor(id), claimBy })),
      );
      // Read back by claim token: created, and leased to w1, not "someone else's run".
      expect(out.map((o) => [o.run.id, o.created, o.run.leaseOwner])).toEqual([
        ["run_g1", true, "w1"],
        ["run_g2", true, "w1"],
        ["run_g3", true, "w1"],
      ]);
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
