// Findings of an adversarial review of the worker's lifecycle: close() past its grace, a
// stop asked while `cairn worker` opens its store, a lost commit of markUnserved on
// PostgreSQL, and a crash during a short retry backoff. Each test failed on the code it
// was written against, and stays as the regression test of its mend.

import { writeFileSync } from "node:fs";
import { type AddressInfo, createServer, type Socket } from "node:net";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, EngineClosedError, sqliteStore, workflow } from "../src/index.js";
import { postgresStore } from "../src/postgres.js";
import { createVirtualClock } from "../src/testing/index.js";
import { ROOT, startCairn } from "./helpers/cli.js";
import { pgUrl } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";
import { tempDbPath, tempDir, until } from "./helpers/sqlite.js";

// The tests in this process run one after the other; `cairn worker` asked to stop runs beside
// them (its time is the CLI's own fixed waits after a stop: close() and the leftovers' bound,
// 10 s each, with the process idle), with cleanups of its own.

/** A pg pool whose connection drops right after the server committed the first
 *  transaction that ran a statement `pick` matches: the client sees the connection end,
 *  as when a backend is terminated between the commit and its answer. With `outageMs`,
 *  the database then refuses connections that long (a failover). */
function poolLosingOneCommit(url: string, pick: (sql: string) => boolean, outageMs = 0) {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  let armed = true;
  let lost = 0;
  let downUntil = 0;
  const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
  const wrapped = new WeakSet<object>();
  (pool as unknown as { connect: () => Promise<pg.PoolClient> }).connect = async () => {
    if (Date.now() < downUntil) {
      throw Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" });
    }
    const client = await connect();
    if (wrapped.has(client)) return client;
    wrapped.add(client);
    const query = client.query.bind(client) as (sql: string, params?: unknown[]) => unknown;
    let picked = false;
    (client as unknown as { query: unknown }).query = async (sql: string, params?: unknown[]) => {
      if (sql !== "COMMIT") {
        if (typeof sql === "string" && pick(sql)) picked = true;
        return query(sql, params);
      }
      const out = await query(sql);
      if (armed && picked) {
        armed = false;
        lost++;
        downUntil = Date.now() + outageMs;
        (
          client as unknown as { connection: { stream: { destroy(): void } } }
        ).connection.stream.destroy();
        throw new Error("Connection terminated unexpectedly");
      }
      picked = false;
      return out;
    };
    return client;
  };
  return { pool, lost: () => lost, down: () => Date.now() < downUntil };
}

/** A TCP server that accepts connections and never answers: a database behind a silent
 *  network. */
async function silentServer(
  cleanups: Array<() => void | Promise<void>>,
): Promise<{ port: number; connections: () => number }> {
  const sockets: Socket[] = [];
  const server = createServer((socket) => {
    socket.on("error", () => {});
    sockets.push(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  );
  return { port: (server.address() as AddressInfo).port, connections: () => sockets.length };
}

describe("in this process", { concurrent: true }, () => {
  const cleanups: Array<() => void | Promise<void>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  describe.sequential("close() past its grace", () => {
    it("keeps leased only the run whose attempt still runs here; hands every other run back at once", async () => {
      const db = tempDbPath();
      cleanups.push(db.cleanup);
      let started = false;
      let finish: () => void = () => {};
      const body = new Promise<void>((resolve) => {
        finish = resolve;
      });
      cleanups.push(() => finish());
      const long = workflow({ name: "long", version: "1" }, async (ctx) =>
        ctx.step("long", async () => {
          started = true;
          await body;
          return 1;
        }),
      );
      const quick = workflow({ name: "quick", version: "1" }, async (ctx) =>
        ctx.step("only", () => 2, { retry: { maxAttempts: 1 } }),
      );
      // A slow read of one run's journal (a store under load): its execution has no attempt
      // in flight when the grace ends.
      let reading = false;
      const inner = sqliteStore(db.path);
      const store = new Proxy(inner, {
        get(target, prop, receiver) {
          if (prop === "loadJournal") {
            return async (runId: string) => {
              if (runId === "quick-run") {
                reading = true;
                await body;
              }
              return target.loadJournal(runId);
            };
          }
          const v = Reflect.get(target, prop, receiver);
          return typeof v === "function" ? v.bind(target) : v;
        },
      });
      const a = createEngine({
        store,
        workflows: [long, quick],
        leaseMs: 600_000,
        closeGraceMs: 50,
        pollIntervalMs: 10,
      });
      const client = createEngine({ store: sqliteStore(db.path), worker: false });
      cleanups.push(() => client.close());
      await a.start(long, undefined, { id: "long-run" });
      await client.start(quick, undefined, { id: "quick-run" });
      await until(() => started && reading, "both runs under way");
      await a.close();
      // The step still running here: its run stays leased (no other worker may start it).
      const longRun = await client.getRun("long-run");
      expect(longRun?.status).toBe("running");
      expect(longRun?.leaseOwner).toBe(a.workerId);
      // Before: leased to the closed worker for the whole lease (10 minutes) as well.
      const quickRun = await client.getRun("quick-run");
      expect(quickRun?.status).toBe("pending");
      expect(quickRun?.leaseOwner).toBeUndefined();
      // Handed back, not taken for a crash: its call is charged nothing.
      const b = createEngine({
        store: sqliteStore(db.path),
        workflows: [quick],
        leaseMs: 600_000,
        pollIntervalMs: 10,
      });
      cleanups.push(() => b.close());
      expect(await b.handle("quick-run").result()).toBe(2);
      const only = (await b.getSteps("quick-run")).find((s) => s.key === "only");
      expect(only?.attempts.map((x) => x.error?.code ?? "ok")).toEqual(["ok"]);
    });
  });

  describe.skipIf(!pgUrl)(
    "PostgreSQL markUnserved whose commit's answer is lost",
    { sequential: true },
    () => {
      it("its retry reports the run it canceled, so the cancel cascade reaches its children", async () => {
        const { schema, drop } = testSchema(pgUrl as string);
        cleanups.push(drop);
        const losing = poolLosingOneCommit(pgUrl as string, (sql) =>
          sql.includes("no live worker has"),
        );
        cleanups.push(() => losing.pool.end());
        const store = postgresStore(losing.pool, { schema });
        const clock = createVirtualClock();
        await store.open({ clock });
        cleanups.push(() => store.close());
        const newRun = (id: string, wf: string) => ({
          id,
          workflow: wf,
          version: "1",
          input: "null",
          budgetLimit: {},
        });
        await store.createRun(newRun("gone", "gone"));
        await store.claimRuns({ workerId: "w", workflows: ["gone@1"], limit: 1, leaseMs: 1_000 });
        // Its cancel is asked while it runs; its worker dies, and no live worker serves gone@1.
        expect((await store.requestCancel("gone", "stop")).state).toBe("requested");
        await clock.advance(5_000);
        const reported: string[] = [];
        await store.markUnserved({
          served: [],
          graceMs: 0,
          canceled: (ids) => reported.push(...ids),
        });
        expect(losing.lost()).toBe(1);
        expect((await store.getRun("gone"))?.status).toBe("canceled");
        // Before: the retry found it canceled already and reported nothing: its children
        // (cancel-children.ts) were never canceled.
        expect(reported).toEqual(["gone"]);
      });
    },
  );

  describe.sequential("close() while the store's open hangs", () => {
    it("settles within its bound instead of waiting for the open (a minute on PostgreSQL)", async () => {
      const silent = await silentServer(cleanups);
      const wf = workflow({ name: "never", version: "1" }, async () => 1);
      const e = createEngine({
        store: postgresStore(`postgres://postgres@127.0.0.1:${silent.port}/test`),
        workflows: [wf],
        closeGraceMs: 0,
        logger: { debug() {}, info() {}, warn() {}, error() {} },
      });
      let openEnded = false;
      const listed = e.listRuns({ limit: 1 }).finally(() => {
        openEnded = true;
      });
      listed.catch(() => {});
      await until(() => silent.connections() > 0, "the open under way");
      await e.close();
      // Before: close() waited for the open to give up (pg's connect timeout on each of its
      // tries: over a minute), so the open had always ended by now.
      expect(openEnded).toBe(false);
      await expect(e.start(wf, undefined)).rejects.toBeInstanceOf(EngineClosedError);
    });
  });

  describe.sequential("a slow sweep of the worker table", () => {
    it("does not hold up the renewal of the leases of running runs", async () => {
      const db = tempDbPath();
      cleanups.push(db.cleanup);
      const clock = createVirtualClock();
      let finish: () => void = () => {};
      const gate = new Promise<void>((resolve) => {
        finish = resolve;
      });
      let started = false;
      const wf = workflow({ name: "slow-sweep", version: "1" }, async (ctx) =>
        ctx.step("long", async () => {
          started = true;
          await gate;
          return 1;
        }),
      );
      // markUnserved answers at start, then hangs (a lock wait, a scan of a large backlog).
      let sweeps = 0;
      const inner = sqliteStore(db.path);
      const store = new Proxy(inner, {
        get(target, prop, receiver) {
          if (prop === "markUnserved") {
            return async (p: Parameters<typeof inner.markUnserved>[0]) => {
              if (++sweeps > 1) await gate;
              return target.markUnserved(p);
            };
          }
          const v = Reflect.get(target, prop, receiver);
          return typeof v === "function" ? v.bind(target) : v;
        },
      });
      const e = createEngine({
        store,
        workflows: [wf],
        clock,
        leaseMs: 3_000,
        pollIntervalMs: 10,
      });
      cleanups.push(() => e.close());
      cleanups.push(() => finish());
      await e.start(wf, undefined, { id: "r" });
      await until(() => started, "the step runs");
      for (let i = 0; i < 6; i++) {
        await clock.advance(1_000);
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(sweeps).toBeGreaterThan(1);
      // Before: the heartbeat waited for its sweep, so no renewal came after the first one
      // and the lease ran out while the step ran (any worker could take the run).
      const run = await e.getRun("r");
      expect(run?.status).toBe("running");
      expect(run?.leaseUntil?.getTime()).toBeGreaterThan(clock.now());
    });
  });

  describe.skipIf(!pgUrl)(
    "PostgreSQL: a claim whose commit's answer is lost, its retries failing",
    { sequential: true },
    () => {
      it("the run it leased to this worker is executed by it, not left leased for good", async () => {
        const { schema, drop } = testSchema(pgUrl as string);
        cleanups.push(drop);
        // The claim commits, its answer is lost, and the database refuses connections for
        // longer than the claim's retries last (about 3 s): the worker never learns it
        // leased the run.
        const losing = poolLosingOneCommit(
          pgUrl as string,
          (sql) => sql.includes("claim_token"),
          5_000,
        );
        cleanups.push(() => losing.pool.end());
        const clock = createVirtualClock();
        const wf = workflow({ name: "lost-claim", version: "1" }, async (ctx) =>
          ctx.step("only", () => "done"),
        );
        const client = createEngine({
          store: postgresStore(pgUrl as string, { schema }),
          worker: false,
          clock,
        });
        cleanups.push(() => client.close());
        await client.listRuns({ limit: 1 }); // creates the schema
        const e = createEngine({
          store: postgresStore(losing.pool, { schema }),
          workflows: [wf],
          clock,
          leaseMs: 2_000,
          pollIntervalMs: 10,
          logger: { debug() {}, info() {}, warn() {}, error() {} },
        });
        cleanups.push(() => e.close());
        await e.listRuns({ limit: 1 });
        await client.start(wf, undefined, { id: "r" });
        await until(() => losing.lost() === 1, "the claim's commit answer lost", 10_000);
        await until(() => !losing.down(), "the database back", 10_000);
        // Before: claimRuns never gives a worker its own runs, so with no other worker the run
        // stayed leased to this one for good.
        let settled = false;
        const result = client.handle("r").result();
        result.then(
          () => {
            settled = true;
          },
          () => {
            settled = true;
          },
        );
        // The claim's retries may outlast the outage by a few seconds: bounded by real time.
        await until(
          async () => {
            await clock.advance(500);
            return settled;
          },
          "the run to complete",
          20_000,
        ).catch(() => {});
        const run = await client.getRun("r");
        expect({ status: run?.status, leaseOwner: run?.leaseOwner }).toEqual({
          status: "completed",
          leaseOwner: undefined,
        });
        expect(await result).toBe("done");
        const only = (await client.getSteps("r")).find((s) => s.key === "only");
        expect(only?.attempts.map((a) => a.error?.code ?? "ok")).toEqual(["ok"]);
      });
    },
  );
});

describe("cairn worker asked to stop while it starts", { concurrent: true }, () => {
  const cleanups: Array<() => void | Promise<void>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it("SIGTERM while its store's open hangs: it stops cleanly (exit 0), not killed by the signal", async () => {
    const silent = await silentServer(cleanups);
    const t = tempDir("cairn-lifecycle-worker-");
    cleanups.push(t.cleanup);
    const module = join(t.dir, "workflows.mjs");
    writeFileSync(
      module,
      `import { workflow } from ${JSON.stringify(pathToFileURL(join(ROOT, "src/index.ts")).href)};
export const w = workflow({ name: "w", version: "1" }, async () => 1);
`,
    );
    // --grace 1s: close() waits for the open at most 2 s (its floor) and the worker for what
    // it left running 1 s more, where the default grace waited 10 s and 10 s.
    const w = startCairn([
      "worker",
      module,
      "--grace",
      "1s",
      "--store",
      `postgres://postgres@127.0.0.1:${silent.port}/test`,
    ]);
    cleanups.push(() => {
      if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill("SIGKILL");
    });
    await until(() => silent.connections() > 0, "the store's open under way");
    w.child.kill("SIGTERM");
    const res = await w.done;
    // Before: the handlers were installed only once the store was open: killed by SIGTERM.
    expect(res.signal).toBeNull();
    expect(res.code).toBe(0);
    expect(res.stdout).toContain("Received SIGTERM while starting");
    expect(res.stdout).toContain("waiting up to 1 s to hand back what it leased");
  });
});
