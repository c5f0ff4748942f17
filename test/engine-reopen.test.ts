// An engine whose store could not be opened (the database not up yet, the network down) is
// not broken for good: the next call opens it again, and an engine with a worker tries again
// on its own, so a process started before its database starts working once the database is
// up. Before, the failed open was kept: every call failed with it until a restart. Also
// cairn/ai's createAi, which opened its store the same way.

import net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { createAi } from "../src/ai/index.js";
import { createEngine, type Store, sqliteStore, workflow } from "../src/index.js";
import { postgresStore } from "../src/postgres.js";
import { postgresTestUrl, testSchema } from "./helpers/postgres.js";
import { tempDbPath } from "./helpers/sqlite.js";
import { within } from "./helpers/within.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
function dbPath(): string {
  const { path, cleanup } = tempDbPath();
  cleanups.push(cleanup);
  return path;
}

const quick = workflow({ name: "quick", version: "1" }, async (ctx, n: number) =>
  ctx.step("s", async () => n),
);

/** `inner` whose `verb` fails its first `times` calls; counts the calls of every verb. */
function failingFirst(inner: Store, verb: keyof Store, times: number) {
  const calls = new Map<string, number>();
  let failuresLeft = times;
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        calls.set(String(prop), (calls.get(String(prop)) ?? 0) + 1);
        if (prop === verb && failuresLeft > 0) {
          failuresLeft--;
          return Promise.reject(new Error(`${String(verb)} failed (the test's outage)`));
        }
        return value.apply(target, args);
      };
    },
  }) as Store;
  return { store, calls: (verb: keyof Store) => calls.get(verb) ?? 0 };
}

describe("an engine whose store failed to open", () => {
  it("opens it on the next call: the error reaches the call that tried, not every later one", async () => {
    const { store, calls } = failingFirst(sqliteStore(dbPath()), "open", 1);
    const logged: string[] = [];
    const engine = createEngine({
      store,
      workflows: [quick],
      worker: false,
      log: (m) => logged.push(m),
    });
    cleanups.push(() => engine.close());
    await expect(engine.start(quick, 1)).rejects.toThrow(/the test's outage/);
    const run = await engine.start(quick, 2);
    expect((await engine.getRun(run.id))?.status).toBe("pending");
    expect(calls("open")).toBe(2);
    // Without a worker no one waits for the store but the callers: nothing tries on its own.
    expect(logged).toEqual([]);
    await engine.close();
    expect(calls("close")).toBe(1);
  });

  it("a worker tries again on its own, says so, and then executes runs started elsewhere", async () => {
    const path = dbPath();
    const { store, calls } = failingFirst(sqliteStore(path), "open", 2);
    const logged: string[] = [];
    const worker = createEngine({ store, workflows: [quick], log: (m) => logged.push(m) });
    cleanups.push(() => worker.close());
    const starter = createEngine({ store: sqliteStore(path), workflows: [quick], worker: false });
    cleanups.push(() => starter.close());
    const run = await starter.start(quick, 7);
    // The worker's engine has no caller: only its own attempts (1 s, then 2 s later) open it.
    expect(await within(run.result(), 20_000, "the run executed by the reopened worker")).toBe(7);
    expect(calls("open")).toBe(3);
    expect(logged).toEqual([
      expect.stringMatching(
        /cannot open the store \(1 attempt failed; the last 1 s ago\).*tries again now/,
      ),
      expect.stringMatching(
        /cannot open the store \(2 attempts failed; the last 2 s ago\).*tries again now/,
      ),
    ]);
    await worker.close();
    expect(calls("close")).toBe(1);
  });

  it("calls made together after a failed open share one new attempt", async () => {
    const { store, calls } = failingFirst(sqliteStore(dbPath()), "open", 1);
    const engine = createEngine({ store, workflows: [quick], worker: false });
    cleanups.push(() => engine.close());
    await expect(engine.listRuns()).rejects.toThrow(/the test's outage/);
    const runs = await Promise.all([
      engine.start(quick, 1),
      engine.start(quick, 2),
      engine.listRuns(),
    ]);
    expect(runs).toHaveLength(3);
    expect(calls("open")).toBe(2);
  });

  it("a worker that failed to register is started again without opening the store twice", async () => {
    const { store, calls } = failingFirst(sqliteStore(dbPath()), "registerWorker", 1);
    const engine = createEngine({ store, workflows: [quick], log: () => {} });
    cleanups.push(() => engine.close());
    await expect(engine.start(quick, 1)).rejects.toThrow(/the test's outage/);
    expect(await (await engine.start(quick, 3)).result()).toBe(3);
    expect(calls("open")).toBe(1);
    expect(calls("registerWorker")).toBe(2);
    await engine.close();
    expect(calls("close")).toBe(1);
  });

  it("close() stops the attempts: none after it, nothing logged, no store left open", async () => {
    const { store, calls } = failingFirst(sqliteStore(dbPath()), "open", 1);
    const logged: string[] = [];
    const engine = createEngine({ store, workflows: [quick], log: (m) => logged.push(m) });
    await expect(engine.listRuns()).rejects.toThrow(/the test's outage/);
    await engine.close();
    // The worker's own attempt would have come 1 s after the failure.
    await new Promise((r) => setTimeout(r, 1_300));
    expect(calls("open")).toBe(1);
    expect(calls("close")).toBe(0);
    expect(logged).toEqual([]);
    await expect(engine.listRuns()).rejects.toThrow(/This engine is closed/);
  });

  it("createAi's store: a failed open is tried again by the next call", async () => {
    const { store, calls } = failingFirst(sqliteStore(dbPath()), "open", 1);
    const ai = createAi({ store });
    const read = async () => {
      const parts: unknown[] = [];
      for await (const part of ai.readStream("run_none", { follow: false })) parts.push(part);
      return parts;
    };
    await expect(read()).rejects.toThrow(/the test's outage/);
    expect(await read()).toEqual([]);
    await ai.close();
    expect(calls("open")).toBe(2);
    expect(calls("close")).toBe(1);
  });
});

const url = await postgresTestUrl();

describe.skipIf(!url)("an engine started before its PostgreSQL server", () => {
  it("starts working when the server comes up, without a restart", async () => {
    const base = new URL(url as string);
    // A port nothing listens on yet; later a proxy to the real server listens there.
    const port = await freePort();
    const late = new URL(base);
    late.hostname = "127.0.0.1";
    late.port = String(port);
    const { schema, drop } = testSchema(url as string, "cairn_reopen");
    cleanups.push(drop);
    let proxy: net.Server | undefined;
    // Cleanups run last to first: the engines close (their connections through the proxy
    // end) before the proxy does.
    cleanups.push(() => new Promise<void>((r) => (proxy ? proxy.close(() => r()) : r())));
    const logged: string[] = [];
    const worker = createEngine({
      store: postgresStore(late.toString(), { schema }),
      workflows: [quick],
      log: (m) => logged.push(m),
    });
    cleanups.push(() => worker.close());
    await expect(worker.listRuns()).rejects.toThrow(/Cannot reach PostgreSQL/);
    proxy = net
      .createServer((client) => {
        const server = net.connect(Number(base.port || 5432), base.hostname);
        client.pipe(server).pipe(client);
        client.on("error", () => server.destroy());
        server.on("error", () => client.destroy());
      })
      .listen(port, "127.0.0.1");
    const starter = createEngine({
      store: postgresStore(url as string, { schema }),
      workflows: [quick],
      worker: false,
    });
    cleanups.push(() => starter.close());
    const run = await starter.start(quick, 5);
    expect(await within(run.result(), 30_000, "the run executed once the server was up")).toBe(5);
    expect(logged[0]).toMatch(/cannot open the store \(1 attempt failed/);
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}
