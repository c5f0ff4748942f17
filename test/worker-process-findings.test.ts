// Found by an adversarial review of worker processes over their lifecycle, with real child
// processes (`cairn worker`): signals in the middle of a step or an effect, stray errors in
// user code, SIGSTOP past the lease, rolling deploys (SQLite and PostgreSQL), pid reuse,
// close() past its grace. Four are bugs (a stray rejection, an uncaught exception, a reused
// pid, close() past its grace), each failing before its mend; the others guard what held.

import { spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, realClock, type Store, sqliteStore, workflow } from "../src/index.js";
import { pidNamespace } from "../src/lib/process-identity.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { ROOT, startCairn } from "./helpers/cli.js";
import { postgresTestUrl, testSchema } from "./helpers/postgres.js";
import { tempDir, until } from "./helpers/sqlite.js";

const pgUrl = await postgresTestUrl();
const INDEX = pathToFileURL(join(ROOT, "src/index.ts")).href;

/** A module whose steps log to `dir`/log and wait for `dir`/go-<step> when told to. */
function writeModule(dir: string, body: string): string {
  const path = join(dir, "workflows.mjs");
  writeFileSync(
    path,
    `import { appendFileSync, existsSync } from "node:fs";
import { workflow } from ${JSON.stringify(INDEX)};
const dir = ${JSON.stringify(dir)};
const log = (line) => appendFileSync(dir + "/log", line + "\\n");
const gate = async (name) => { while (!existsSync(dir + "/go-" + name)) await new Promise((r) => setTimeout(r, 5)); };
${body}
`,
  );
  return path;
}

function logLines(dir: string): string[] {
  return existsSync(join(dir, "log"))
    ? readFileSync(join(dir, "log"), "utf8").split("\n").filter(Boolean)
    : [];
}

const client = workflow({ name: "w", version: "1" }, async (): Promise<unknown> => {
  throw new Error("a client never executes");
});

describe("cairn worker processes", () => {
  const cleanups: Array<() => void> = [];
  afterEach(() => {
    for (const c of cleanups.splice(0)) c();
  });

  function setup(storeArgs?: string[]) {
    const t = tempDir("cairn-worker-process-");
    const db = join(t.dir, "cairn.db");
    const store = storeArgs ?? ["--store", db];
    const workers: Array<ReturnType<typeof startCairn>> = [];
    cleanups.push(() => {
      for (const w of workers)
        if (w.child.exitCode === null && w.child.signalCode === null) {
          w.child.kill("SIGCONT");
          w.child.kill("SIGKILL");
        }
      t.cleanup();
    });
    const spawnWorker = async (module: string, extra: string[] = []) => {
      const w = startCairn(["worker", module, ...store, ...extra]);
      workers.push(w);
      await until(
        () => w.output.stdout.includes("Running;") || w.child.exitCode !== null,
        "worker start",
      );
      return w;
    };
    return { dir: t.dir, db, spawnWorker };
  }

  it("SIGTERM during a step body: the step ends and is recorded, no later step starts, the run is handed back, exit 0", async () => {
    const { dir, db, spawnWorker } = setup();
    const module = writeModule(
      dir,
      `export const w = workflow({ name: "w", version: "1" }, async (ctx) => {
  await ctx.step("one", async () => { log("one-start"); await gate("one"); log("one-end"); return 1; });
  await ctx.step("two", () => { log("two " + process.pid); return 2; });
  return "done";
});`,
    );
    const first = await spawnWorker(module);
    const engine = createEngine({ store: sqliteStore(db), worker: false });
    try {
      const run = await engine.start(client, undefined, { id: "r1" });
      await until(() => logLines(dir).includes("one-start"), "step one started");
      first.child.kill("SIGTERM");
      await until(() => first.output.stdout.includes("Received SIGTERM"), "stopping");
      writeFileSync(join(dir, "go-one"), "");
      const res = await first.done;
      expect(res.code, res.stderr).toBe(0);
      expect(logLines(dir)).toEqual(["one-start", "one-end"]);
      const after = await engine.getRun("r1");
      expect(after?.status).toBe("pending");
      expect(after?.leaseOwner ?? null).toBe(null);

      const second = await spawnWorker(module);
      await expect(run.result()).resolves.toBe("done");
      expect(logLines(dir)).toEqual(["one-start", "one-end", `two ${second.child.pid}`]);
      second.child.kill("SIGINT");
      expect((await second.done).code).toBe(0);
    } finally {
      await engine.close();
    }
  });
  // Before: Node's default ended the process at the first rejection nobody awaited (a stack
  // trace, exit 1), every run of the worker left leased until its lease ended.
  it("a stray rejection in one run's code does not take the worker down: an error line, and it goes on", async () => {
    const { dir, db, spawnWorker } = setup();
    const module = writeModule(
      dir,
      `export const w = workflow({ name: "w", version: "1" }, async (ctx) => {
  await ctx.step("one", () => { Promise.reject(new Error("nobody awaited me")); return 1; });
  await ctx.step("two", async () => { log("two"); await gate("two"); return 2; });
  return "done";
});`,
    );
    const worker = await spawnWorker(module);
    const engine = createEngine({ store: sqliteStore(db), worker: false });
    try {
      const run = await engine.start(client, undefined, { id: "r1" });
      await until(
        () => logLines(dir).includes("two") || worker.child.exitCode !== null,
        "step two started, or the worker gone",
      );
      expect(worker.child.exitCode, worker.output.stderr).toBe(null);
      await until(() => worker.output.stderr.includes("nobody awaited me"), "the problem reported");
      expect(worker.output.stderr).toMatch(
        / error: unhandled rejection of a promise nobody awaited .*the worker goes on: nobody awaited me$/m,
      );
      expect(worker.output.stderr).not.toMatch(/^\s+at /m);
      writeFileSync(join(dir, "go-two"), "");
      await expect(run.result()).resolves.toBe("done");
      worker.child.kill("SIGTERM");
      expect((await worker.done).code).toBe(0);
    } finally {
      await engine.close();
    }
  });

  it("a second SIGTERM exits at once (130); the next worker on this host takes the run over at once", async () => {
    const { dir, db, spawnWorker } = setup();
    const module = writeModule(
      dir,
      `export const w = workflow({ name: "w", version: "1" }, async (ctx) => {
  await ctx.step("one", async () => { log("one " + process.pid); await gate("one-" + process.pid); return 1; });
  return "done";
});`,
    );
    // A lease far longer than the test: only the dead pid can free the run.
    const first = await spawnWorker(module, ["--lease", "10m"]);
    const engine = createEngine({ store: sqliteStore(db), worker: false });
    try {
      const run = await engine.start(client, undefined, { id: "r1" });
      await until(() => logLines(dir).length === 1, "step one started");
      first.child.kill("SIGTERM");
      await until(() => first.output.stdout.includes("Received SIGTERM"), "stopping");
      first.child.kill("SIGTERM");
      const res = await first.done;
      expect(res.code).toBe(130);
      expect(res.stderr).toMatch(
        /^cairn: SIGTERM again: exiting without waiting; leases expire on their own/m,
      );
      const second = await spawnWorker(module, ["--lease", "10m"]);
      await until(() => logLines(dir).length === 2, "step one started again");
      writeFileSync(join(dir, `go-one-${second.child.pid}`), "");
      await expect(run.result()).resolves.toBe("done");
      expect(second.output.stdout).toMatch(/took over the runs of/);
      second.child.kill("SIGTERM");
      expect((await second.done).code).toBe(0);
    } finally {
      await engine.close();
    }
  });
  // Before: the process died at once (a stack trace), its runs left leased, the step in
  // flight cut.
  it("an uncaught exception in a run's code: an error line, then a graceful stop (runs handed back), exit 1", async () => {
    const { dir, db, spawnWorker } = setup();
    const module = writeModule(
      dir,
      `export const w = workflow({ name: "w", version: "1" }, async (ctx) => {
  await ctx.step("one", async () => {
    log("one");
    setTimeout(() => { throw new Error("thrown in a timer"); }, 0);
    await gate("one");
    return 1;
  });
  await ctx.step("two", () => { log("two"); return 2; });
  return "done";
});`,
    );
    const worker = await spawnWorker(module);
    const engine = createEngine({ store: sqliteStore(db), worker: false });
    try {
      await engine.start(client, undefined, { id: "r1" });
      await until(
        () => worker.output.stdout.includes("Stopping after") || worker.child.exitCode !== null,
        "the worker stopping",
      );
      expect(worker.child.exitCode, worker.output.stderr).toBe(null);
      writeFileSync(join(dir, "go-one"), "");
      const res = await worker.done;
      expect(res.code).toBe(1);
      expect(res.stderr).toMatch(
        / error: uncaught exception .*stopping the worker: thrown in a timer$/m,
      );
      expect(res.stderr).not.toMatch(/^\s+at /m);
      expect(logLines(dir)).toEqual(["one"]);
      const after = await engine.getRun("r1");
      expect(after?.status).toBe("pending");
      expect(after?.leaseOwner ?? null).toBe(null);
      expect((await engine.getSteps("r1")).map((s) => s.key)).toEqual(["one"]);
    } finally {
      await engine.close();
    }
  });
  it("SIGSTOP past the lease, then SIGCONT: the stalled worker's step result does not land, it performs no effect", async () => {
    const { dir, db, spawnWorker } = setup();
    const module = writeModule(
      dir,
      `export const w = workflow({ name: "w", version: "1" }, async (ctx) => {
  const one = await ctx.step("one", async () => {
    log("one-start " + process.pid);
    await gate("one-" + process.pid);
    log("one-end " + process.pid);
    return process.pid;
  });
  await ctx.effect("mail", { perform: () => { log("effect " + process.pid); return 1; }, reconcile: () => undefined });
  return one;
});`,
    );
    const flags = ["--lease", "1s", "--poll-interval", "20ms"];
    const stalled = await spawnWorker(module, flags);
    const a = stalled.child.pid!;
    const engine = createEngine({ store: sqliteStore(db), worker: false });
    try {
      const run = await engine.start(client, undefined, { id: "r1" });
      await until(() => logLines(dir).includes(`one-start ${a}`), "step one started on A");
      stalled.child.kill("SIGSTOP");
      const next = await spawnWorker(module, flags);
      const b = next.child.pid!;
      await until(() => logLines(dir).includes(`one-start ${b}`), "step one started on B");
      writeFileSync(join(dir, `go-one-${b}`), "");
      await expect(run.result()).resolves.toBe(b);
      const journal = JSON.stringify(await engine.getSteps("r1"));

      writeFileSync(join(dir, `go-one-${a}`), "");
      stalled.child.kill("SIGCONT");
      await until(() => logLines(dir).includes(`one-end ${a}`), "A's step body ended");
      stalled.child.kill("SIGTERM");
      const res = await stalled.done;
      expect(res.code, res.stderr).toBe(0);
      expect(logLines(dir).filter((l) => l.startsWith("effect"))).toEqual([`effect ${b}`]);
      expect(JSON.stringify(await engine.getSteps("r1"))).toBe(journal);
      expect((await engine.getRun("r1"))?.status).toBe("completed");
      next.child.kill("SIGTERM");
      expect((await next.done).code).toBe(0);
    } finally {
      await engine.close();
    }
  });

  async function rollingDeploy(storeArgs: string[] | undefined, makeStore: (db: string) => Store) {
    const { dir, db, spawnWorker } = setup(storeArgs);
    const body = (
      v: string,
    ) => `export const w = workflow({ name: "w", version: "${v}" }, async (ctx) => {
  await ctx.step("one", async () => { log("one-start v${v} " + process.pid); await gate("one-v${v}"); return 1; });
  return ctx.step("two", () => "v${v} " + process.pid);
});`;
    const v1dir = join(dir, "v1");
    const v2dir = join(dir, "v2");
    const { mkdirSync } = await import("node:fs");
    mkdirSync(v1dir);
    mkdirSync(v2dir);
    const m1 = writeModule(v1dir, body("1"));
    const m2 = writeModule(v2dir, body("2"));
    const flags = ["--lease", "1s", "--poll-interval", "20ms"];
    const w1 = await spawnWorker(m1, flags);
    const engine = createEngine({ store: makeStore(db), worker: false });
    try {
      const run = await engine.start(client, undefined, { id: "r1" });
      await until(() => logLines(v1dir).length === 1, "v1 started step one");
      const w2 = await spawnWorker(m2, flags);
      w1.child.kill("SIGTERM");
      writeFileSync(join(v1dir, "go-one-v1"), "");
      expect((await w1.done).code).toBe(0);
      await until(async () => (await engine.getRun("r1"))?.status === "paused", "r1 paused");
      expect((await engine.getRun("r1"))?.reason).toMatch(/no live worker has w@1/);
      const back = await spawnWorker(m1, flags);
      await expect(run.result()).resolves.toBe(`v1 ${back.child.pid}`);
      expect(logLines(v1dir)).toHaveLength(1);
      for (const w of [w2, back]) w.child.kill("SIGTERM");
      expect((await w2.done).code).toBe(0);
      expect((await back.done).code).toBe(0);
    } finally {
      await engine.close();
    }
  }

  it("a rolling deploy (SQLite): runs pinned to v1 pause while only v2 is up, and complete on v1 when it is back", () =>
    rollingDeploy(undefined, (db) => sqliteStore(db)));

  it.skipIf(!pgUrl)("a rolling deploy (PostgreSQL): the same, workers in one schema", async () => {
    const { schema, drop } = testSchema(pgUrl!, "cairn_worker_process");
    try {
      await rollingDeploy(["--store", pgUrl!, "--schema", schema], () =>
        postgresStore(pgUrl!, { schema, poolSize: 2 }),
      );
    } finally {
      await drop();
    }
  });

  // Before: within one PID namespace only the pid counted: a reused pid kept the dead
  // worker's row for good, however long it had been silent.
  it("a dead worker whose pid a live unrelated process reuses: its row goes once silent past its lease", async () => {
    const { dir, db, spawnWorker } = setup();
    const module = writeModule(
      dir,
      `export const w = workflow({ name: "w", version: "1" }, async (ctx) => ctx.step("one", () => process.pid));`,
    );
    // The pid the dead worker had, now an unrelated live process's.
    const other = spawn(process.execPath, ["-e", "setInterval(() => {}, 1 << 30)"], {
      stdio: "ignore",
    });
    cleanups.push(() => other.kill("SIGKILL"));
    const store = sqliteStore(db);
    await store.open({ clock: realClock });
    try {
      await store.registerWorker({
        id: "wrk_gone",
        host: hostname(),
        pid: other.pid!,
        pidNamespace: pidNamespace(),
        workflows: ["w@1"],
        leaseMs: 300,
      });
    } finally {
      await store.close();
    }
    const engine = createEngine({ store: sqliteStore(db), worker: false });
    try {
      const worker = await spawnWorker(module, ["--lease", "1s", "--poll-interval", "20ms"]);
      const run = await engine.start(client, undefined, { id: "r1" });
      await expect(run.result()).resolves.toBe(worker.child.pid);
      await until(
        async () => !(await engine.listWorkers()).some((w) => w.id === "wrk_gone"),
        "the dead worker's row removed",
      );
      expect(worker.output.stdout).toMatch(/took over the runs of dead worker "?wrk_gone/);
      worker.child.kill("SIGTERM");
      expect((await worker.done).code).toBe(0);
    } finally {
      await engine.close();
    }
  });
  it("SIGTERM then SIGKILL during an effect's perform: the next worker reconciles it, never performs it again", async () => {
    const { dir, db, spawnWorker } = setup();
    const module = writeModule(
      dir,
      `import { readFileSync } from "node:fs";
const sent = () => { try { return readFileSync(dir + "/ledger", "utf8"); } catch { return undefined; } };
export const w = workflow({ name: "w", version: "1" }, async (ctx) => {
  const r = await ctx.effect("mail", {
    perform: async () => { log("perform " + process.pid); appendFileSync(dir + "/ledger", "sent"); await gate("mail-" + process.pid); return "performed"; },
    reconcile: () => { log("reconcile " + process.pid); return sent() ? "found" : undefined; },
  });
  await ctx.step("after", () => { log("after " + process.pid); return 1; });
  return r;
});`,
    );
    const flags = ["--lease", "10m", "--poll-interval", "20ms"];
    const first = await spawnWorker(module, flags);
    const a = first.child.pid!;
    const engine = createEngine({ store: sqliteStore(db), worker: false });
    try {
      const run = await engine.start(client, undefined, { id: "r1" });
      await until(() => logLines(dir).includes(`perform ${a}`), "perform began");
      first.child.kill("SIGTERM");
      await until(() => first.output.stdout.includes("Received SIGTERM"), "stopping");
      first.child.kill("SIGKILL");
      await first.done;
      const second = await spawnWorker(module, flags);
      const b = second.child.pid!;
      await expect(run.result()).resolves.toBe("found");
      expect(logLines(dir)).toEqual([`perform ${a}`, `reconcile ${b}`, `after ${b}`]);
      second.child.kill("SIGTERM");
      expect((await second.done).code).toBe(0);
    } finally {
      await engine.close();
    }
  });
  // Before: close() removed its worker row expiring every lease it held, so another worker
  // started the call at once while its body still ran here (docs/API.md close() says not).
  it("close(): a run whose attempt outlasts the grace stays leased while its body still runs here", async () => {
    const t = tempDir("cairn-close-grace-");
    cleanups.push(t.cleanup);
    const db = join(t.dir, "cairn.db");
    let started = false;
    let finish: () => void = () => {};
    const body = new Promise<void>((resolve) => {
      finish = resolve;
    });
    const wf = workflow({ name: "long", version: "1" }, async (ctx) =>
      ctx.step("long", async () => {
        started = true;
        await body;
        return 1;
      }),
    );
    const a = createEngine({
      store: sqliteStore(db),
      workflows: [wf],
      leaseMs: 600_000,
      closeGraceMs: 50,
      pollIntervalMs: 10,
    });
    const reader = createEngine({ store: sqliteStore(db), worker: false });
    try {
      await a.start(wf, undefined, { id: "r1" });
      await until(() => started, "step running");
      await a.close();
      const run = await reader.getRun("r1");
      expect(run?.status).toBe("running");
      // Still the closed worker's: no other worker may start the step while it runs.
      expect(run?.leaseOwner).toBe(a.workerId);
      expect(run?.leaseUntil?.getTime()).toBeGreaterThan(Date.now() + 300_000);
    } finally {
      finish();
      await reader.close();
    }
  });
});
