// Errors nobody hears. In Node an 'error' event without a listener, or a rejection nobody
// handles, ends the process: a worker that dies of it leaves its runs leased to nobody until
// the lease passes. Each case here was found by an audit of src/ for that class of bug,
// and failed before its mend:
// - a logger (or `log` option) that throws, called from a claim round or a heartbeat that
//   already failed: the throw became an unhandled rejection;
// - engine.close() after the worker failed to start left the store open (its heartbeat
//   timer running, and on PostgreSQL a pool that keeps the process alive);
// - the PostgreSQL LISTEN connection, reconnecting, could not even build its client (an
//   sslrootcert file gone): pg throws in the constructor, outside the try;
// - `cairn worker` whose stderr reader went away died of an unheard EPIPE, and one whose
//   stdout reader went away exited at once with code 0, its run left leased;
// - the HTTP app's `log` option that throws turned a request's 500 into a failed request
//   (and, not an error nobody hears but noise in the same log: a client leaving mid-body
//   was logged as an "unexpected error").

import { randomBytes } from "node:crypto";
import { rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createHttpApp, serveHttp } from "../src/http/index.js";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/postgres.js";
import { faultyStore } from "../src/testing/faulty-store.js";
import { startCairn } from "./helpers/cli.js";
import { postgresTestUrl, testSchema, withClient } from "./helpers/postgres.js";
import { tempDir, until } from "./helpers/sqlite.js";

const pgUrl = await postgresTestUrl();
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

function tempDirFor(what: string): string {
  const { dir, cleanup } = tempDir(`cairn-${what}-`);
  cleanups.push(cleanup);
  return dir;
}

/** Collects what would otherwise be unheard: with a listener of ours, vitest leaves them to
 *  the test (and Node does not end the process). */
function collectUnheard(): string[] {
  const seen: string[] = [];
  const onRejection = (e: unknown) => seen.push(`unhandledRejection: ${String(e)}`);
  const onUncaught = (e: unknown) => seen.push(`uncaughtException: ${String(e)}`);
  process.prependListener("unhandledRejection", onRejection);
  process.prependListener("uncaughtException", onUncaught);
  cleanups.push(() => {
    process.removeListener("unhandledRejection", onRejection);
    process.removeListener("uncaughtException", onUncaught);
  });
  return seen;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("the engine", () => {
  it("a logger that throws, while claim rounds and heartbeats fail, rejects nothing unheard", async () => {
    const unheard = collectUnheard();
    const dir = tempDirFor("throwing-logger");
    const store = faultyStore(sqliteStore(join(dir, "db.sqlite")));
    const throwing = () => {
      throw new Error("logger transport is down");
    };
    const wf = workflow({ name: "after-the-outage", version: "1" }, async (ctx) => {
      return ctx.step("one", () => 1);
    });
    const engine = createEngine({
      store,
      workflows: [wf],
      logger: { debug() {}, info() {}, warn: throwing, error: throwing },
      pollIntervalMs: 20,
      heartbeatMs: 20,
    });
    cleanups.push(() => engine.close());
    await engine.listRuns();
    store.plan.failing = new Set(["claimRuns", "renewLeases", "heartbeatWorker"]);
    await sleep(300);
    store.plan.failing = new Set();
    expect(unheard).toEqual([]);
    // The worker goes on once the store is back.
    expect(await (await engine.start(wf, undefined)).result()).toBe(1);
  });

  it("close() after the worker failed to start closes the store and stops the heartbeat", async () => {
    const dir = tempDirFor("failed-start");
    const path = join(dir, "db.sqlite");
    // The worker registers, then its first sweep of dead workers fails.
    const store = faultyStore(sqliteStore(path), { failing: new Set(["listWorkers"]) });
    const engine = createEngine({
      store,
      heartbeatMs: 20,
      logger: { debug() {}, info() {}, warn() {}, error() {} },
    });
    await expect(engine.listRuns()).rejects.toThrow(/listWorkers fails/);
    await engine.close();
    store.plan.failing = new Set();
    await expect(store.listRuns()).rejects.toThrow(/not open/);
    // Its worker row is gone, and no heartbeat brings it back.
    const look = sqliteStore(path);
    await look.open({ clock: realClock });
    cleanups.push(() => look.close());
    await sleep(100);
    expect(await look.listWorkers()).toEqual([]);
  });
});

describe("the HTTP app and server", () => {
  it("a body that ends as Node ends a departed client's is answered 400, not logged", async () => {
    const engine = createEngine({ store: sqliteStore(":memory:"), worker: false });
    cleanups.push(() => engine.close());
    const logs: string[] = [];
    const app = createHttpApp({ engine, log: (m) => logs.push(m) });
    cleanups.push(() => app.close());
    // What node:http's request stream fails with when its client goes away mid-body.
    const gone = Object.assign(new Error("aborted"), { code: "ECONNRESET" });
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('{"workflow":'));
        controller.error(gone);
      },
    });
    const res = await app.fetch(
      new Request("http://127.0.0.1/api/runs", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
        duplex: "half",
      } as RequestInit),
    );
    expect(res.status).toBe(400);
    expect(logs).toEqual([]);
  });

  // The same through a real socket (the error's shape is Node's own); the wait is a bound,
  // the test above is the exact one.
  it("a client that leaves while sending its body is not logged as an unexpected error", async () => {
    const engine = createEngine({ store: sqliteStore(":memory:"), worker: false });
    cleanups.push(() => engine.close());
    const logs: string[] = [];
    const server = await serveHttp({ engine, port: 0, log: (m) => logs.push(m) });
    cleanups.push(() => server.close());
    const socket = connect(server.port, "127.0.0.1");
    await new Promise((resolve) => socket.once("connect", resolve));
    socket.write(
      "POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
        'Content-Length: 100\r\n\r\n{"workflow":',
    );
    await sleep(100);
    socket.destroy();
    await sleep(200);
    // The server still answers, and logged nothing about the one that left.
    expect((await fetch(`${server.url}/api/runs`)).status).toBe(200);
    expect(logs).toEqual([]);
  });

  it("a log option that throws does not fail the request whose problem it reports", async () => {
    const store = faultyStore(sqliteStore(join(tempDirFor("http-log"), "db.sqlite")));
    const engine = createEngine({ store, worker: false });
    cleanups.push(() => engine.close());
    await engine.listRuns();
    const app = createHttpApp({
      engine,
      log: () => {
        throw new Error("log sink is down");
      },
    });
    cleanups.push(() => app.close());
    store.plan.failing = new Set(["listRuns"]);
    const res = await app.fetch(new Request("http://127.0.0.1/api/runs"));
    expect(res.status).toBe(500);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("INTERNAL");
  });
});

describe.skipIf(!pgUrl)("the PostgreSQL LISTEN connection", () => {
  it("keeps trying when its client cannot even be built, and hears hints again once it can", async () => {
    const unheard = collectUnheard();
    const base = pgUrl ?? "";
    // A schema and a connection tag of its own: its LISTEN backend is found (and terminated)
    // by the tag. (A database of its own cost a DROP DATABASE, which waits for a checkpoint
    // of the whole server: 1 to 40 s beside the other test files.)
    const { schema, drop } = testSchema(base, "cairn_listen");
    cleanups.push(drop);
    const tag = schema;
    const dir = tempDirFor("listen-ca");
    const ca = join(dir, "ca.pem");
    writeFileSync(ca, "not a certificate, and never used: sslmode=disable\n");
    // pg reads the sslrootcert file when it builds a client, whatever the sslmode.
    const url = new URL(base);
    url.searchParams.set("application_name", tag);
    url.searchParams.set("sslrootcert", ca);
    url.searchParams.set("sslmode", "disable");
    const store = postgresStore(url.toString(), { poolSize: 2, schema });
    await store.open({ clock: realClock });
    cleanups.push(() => store.close());
    const heard: Array<string | undefined> = [];
    const off = store.subscribe((h) => heard.push(h.runId ?? h.kind));
    cleanups.push(off);
    await until(() => heard.length > 0, "the first LISTEN");
    // The certificate file goes away (a rotation), then the LISTEN connection drops.
    rmSync(ca);
    const ended = await withClient(base, (c) =>
      c.query<{ ended: boolean; query: string }>(
        "SELECT pg_terminate_backend(pid) AS ended, query FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()",
        [tag],
      ),
    );
    // The tag reached the LISTEN connection (the URL's application_name is its name).
    expect(ended.rows.some((r) => r.ended && /^LISTEN /.test(r.query))).toBe(true);
    await sleep(1_000);
    expect(unheard).toEqual([]);
    writeFileSync(ca, "back\n");
    // A new pending run's hint reaches the subscriber once the listener is back.
    await until(
      async () => {
        const id = `run_${randomBytes(3).toString("hex")}`;
        await store.createRun({
          id,
          workflow: "alpha",
          version: "1",
          input: "{}",
          budgetLimit: {},
        });
        await sleep(100);
        return heard.includes(id);
      },
      "a hint after the reconnect",
      15_000,
    );
    expect(unheard).toEqual([]);
  });
});

describe("`cairn worker` whose output reader went away", () => {
  const MODULE = "test/fixtures/output-closed-workflows.ts";

  async function workerWithout(stream: "stdout" | "stderr", wf: "noisy" | "quiet") {
    const path = join(tempDirFor(`closed-${stream}`), "cairn.db");
    const worker = startCairn(["worker", MODULE, "--concurrency", "2"], { CAIRN_STORE: path });
    cleanups.push(async () => {
      if (worker.child.exitCode === null) {
        worker.child.kill("SIGKILL");
        await worker.done;
      }
    });
    await until(
      () => worker.output.stdout.includes("Running;") || worker.child.exitCode !== null,
      "the worker's start",
    );
    // As `cairn worker | head -n 5` does once it has its lines, or a log shipper restarting.
    worker.child[stream]?.destroy();
    const client = createEngine({ store: sqliteStore(path), worker: false });
    cleanups.push(() => client.close());
    const run = await client.start(wf, undefined, { id: `${wf}-run` });
    const settled = await Promise.race([
      run.result().then(() => "completed" as const),
      worker.done.then((r) => `exited with ${r.code}` as const),
    ]);
    return { worker, client, settled };
  }

  it("stderr gone: a warning does not kill it; it completes the run and stops when told", async () => {
    const { worker, settled } = await workerWithout("stderr", "noisy");
    expect(settled).toBe("completed");
    expect(worker.child.exitCode).toBeNull();
    worker.child.kill("SIGTERM");
    expect((await worker.done).code).toBe(0);
  });

  it("stdout gone: it does not exit at the next line; it completes the run and stops when told", async () => {
    const { worker, client, settled } = await workerWithout("stdout", "quiet");
    expect(settled).toBe("completed");
    expect(worker.child.exitCode).toBeNull();
    worker.child.kill("SIGTERM");
    expect((await worker.done).code).toBe(0);
    // A graceful stop: its worker row is gone.
    await until(async () => (await client.listWorkers()).length === 0, "the worker row's removal");
  });
});
