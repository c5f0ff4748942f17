// Structured logs: a replaceable pino-shaped logger receives the worker's lifecycle at info,
// one line per event (claimed, completed, failed, canceled, paused, released, recovered,
// takeover, lease-lost), and never a payload; `cairn worker` prints a banner with its pid
// and one line per event, as text, as JSON lines (--json), or not at all (--quiet).

import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import {
  createEngine,
  FatalError,
  type Logger,
  NonDeterminismError,
  type Store,
  sqliteStore,
  type WorkerEventFields,
  workflow,
} from "../src/index.js";
import { pidNamespace } from "../src/lib/process-identity.js";
import { faultyStore } from "../src/testing/index.js";
import { ROOT, startCairn } from "./helpers/cli.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { tempDir, until } from "./helpers/sqlite.js";
import { within } from "./helpers/within.js";

const SECRET = "PayloadSecret4b1e";

interface Line {
  level: string;
  fields: Record<string, unknown>;
  message: string | undefined;
}

function capture(): { logger: Logger; lines: Line[]; events(runId?: string): string[] } {
  const lines: Line[] = [];
  const at =
    (level: string) =>
    (fields: object, message?: string): void => {
      lines.push({ level, fields: fields as Record<string, unknown>, message });
    };
  return {
    logger: { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") },
    lines,
    events: (runId) =>
      lines
        .filter((l) => l.level === "info" && (runId === undefined || l.fields.runId === runId))
        .map((l) => String(l.fields.event)),
  };
}

/** The lifecycle events of `runId` once there are `count` of them: a run's result() can
 *  resolve (a hint, a poll) a moment before its execution logs how it ended. */
async function eventsOnce(
  log: ReturnType<typeof capture>,
  runId: string,
  count: number,
): Promise<string[]> {
  await until(() => log.events(runId).length >= count, `${count} lifecycle events of "${runId}"`);
  return log.events(runId);
}

/** The pid of a process of ours that has exited (and been reaped): a dead worker's pid. */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ["-e", ""], { stdio: "ignore" });
  await new Promise<void>((r) => child.once("exit", () => r()));
  return child.pid!;
}

describe.each(BACKENDS)("worker lifecycle logs (%s)", (backend) => {
  const harness = useHarness(backend);

  it("one info line per event, with ids and names, never a payload", async () => {
    const h = harness();
    const log = capture();
    const wf = workflow(
      { name: "logged", version: "1" },
      async (ctx, input: { mode: string; secret: string }) => {
        const r = await ctx.step("s", () => `${input.secret}-result`, {
          retry: { maxAttempts: 1 },
        });
        if (input.mode === "fail") {
          await ctx.step("boom", () => {
            throw new FatalError(`${input.secret} in an error message`);
          });
        }
        if (input.mode === "wait") await ctx.waitForEvent("go");
        if (input.mode === "spend") {
          await ctx.step("spend", (s) => {
            s.spend({ usd: 5 });
            return 1;
          });
          await ctx.step("more", () => 2);
        }
        return r;
      },
    );
    const e = h.engine([wf], { logger: log.logger });
    const ok = await e.start(wf, { mode: "ok", secret: SECRET }, { id: "ok" });
    await ok.result();
    const failed = await e.start(wf, { mode: "fail", secret: SECRET }, { id: "fails" });
    await expect(failed.result()).rejects.toThrow(FatalError);
    await e.start(wf, { mode: "wait", secret: SECRET }, { id: "waits" });
    await until(async () => (await e.getRun("waits"))?.status === "waiting", "waits");
    await e.sendEvent("waits", "go", { said: SECRET });
    await e.handle("waits").result();
    await e.start(wf, { mode: "spend", secret: SECRET }, { id: "spends", budget: { usd: 1 } });
    await until(async () => (await e.getRun("spends"))?.status === "paused", "pauses");
    await e.start(wf, { mode: "wait", secret: SECRET }, { id: "canceled" });
    await until(async () => (await e.getRun("canceled"))?.status === "waiting", "waits");
    await e.cancel("canceled");

    expect(await eventsOnce(log, "ok", 2)).toEqual(["claimed", "completed"]);
    expect(await eventsOnce(log, "fails", 2)).toEqual(["claimed", "failed"]);
    expect(await eventsOnce(log, "waits", 4)).toEqual([
      "claimed",
      "released",
      "claimed",
      "completed",
    ]);
    expect(log.events("spends")).toEqual(["claimed", "paused"]);
    expect(log.events("canceled")).toEqual(["claimed", "released"]);
    const failLine = log.lines.find(
      (l) => l.fields.runId === "fails" && l.fields.event === "failed",
    );
    expect(failLine?.fields.error).toEqual({ name: "FatalError", code: "FATAL" });
    expect(failLine?.message).toBe('failed run "fails" (logged@1): FatalError FATAL');
    const released = log.lines.find((l) => l.fields.event === "released");
    expect(released?.fields).toMatchObject({
      runId: "waits",
      workflow: "logged",
      version: "1",
      status: "waiting",
      waitingFor: ["go"],
      workerId: e.workerId,
    });
    const paused = log.lines.find((l) => l.fields.event === "paused");
    expect(paused?.message).toMatch(/^paused run "spends" \(logged@1\): budget/);
    // Never a payload, in any field or message.
    expect(JSON.stringify(log.lines)).not.toContain(SECRET);
  });

  it("a logger that throws does not stop the worker", async () => {
    const h = harness();
    const boom = () => {
      throw new Error("logger down");
    };
    const wf = workflow({ name: "unlogged", version: "1" }, async (ctx) => ctx.step("s", () => 1));
    const e = h.engine([wf], { logger: { debug: boom, info: boom, warn: boom, error: boom } });
    expect(await (await e.start(wf, undefined)).result()).toBe(1);
  });

  it("recovered on the worker that takes a run over; lease-lost on the one that lost it", async () => {
    const h = harness();
    const first = capture();
    const second = capture();
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const wf = workflow({ name: "slow", version: "1" }, async (ctx) =>
      ctx.step("slow", () => gate.then(() => "done")),
    );
    // Once down, every call of a's store fails, as in an outage (subscribe is local to it).
    let down = false;
    const outage = {
      has: (verb: keyof Store) => down && verb !== "subscribe" && verb !== "close",
    } as Set<keyof Store>;
    const aStore = faultyStore(h.store(), { failing: outage });
    const a = h.engine([wf], { store: aStore, logger: first.logger, leaseMs: 30_000 });
    await a.start(wf, undefined, { id: "slow" });
    await until(async () => (await a.getRun("slow"))?.status === "running", "runs on a");
    down = true;
    await h.clock.advance(31_000);
    await until(() => first.events("slow").includes("lease-lost"), "a reports the lost lease");
    const b = h.engine([wf], { logger: second.logger, leaseMs: 30_000 });
    await until(() => second.events("slow").includes("recovered"), "b takes the run over");
    release();
    expect(await b.handle("slow").result()).toBe("done");
    expect(first.events("slow")).toEqual(["claimed", "lease-lost"]);
    expect(await eventsOnce(second, "slow", 2)).toEqual(["recovered", "completed"]);
    down = false; // a's store comes back, so that a closes cleanly
  });

  it("failed on a NonDeterminismError: the run, the error's name and code, never a payload or the message", async () => {
    const h = harness();
    const before = capture();
    const v1 = workflow(
      { name: "nd-log", version: "1" },
      async (ctx, input: { secret: string }) => {
        await ctx.step("a", () => `${input.secret}-a`);
        await ctx.step("b", () => `${input.secret}-b`);
        await ctx.waitForEvent("go");
        return ctx.step("c", () => input.secret);
      },
    );
    const e1 = h.engine([v1], { logger: before.logger });
    await e1.start(v1, { secret: SECRET }, { id: "nd-run" });
    await until(async () => (await e1.getRun("nd-run"))?.status === "waiting", "the run waits");
    await e1.close();
    expect(before.events("nd-run")).toEqual(["claimed", "released"]);

    // The same name and version, changed code: the replay diverges at the second call.
    const after = capture();
    const changed = workflow(
      { name: "nd-log", version: "1" },
      async (ctx, input: { secret: string }) => {
        await ctx.step("a", () => `${input.secret}-a`);
        await ctx.step("x", () => `${input.secret}-x`);
        return input.secret;
      },
    );
    const e2 = h.engine([changed], { logger: after.logger });
    await e2.sendEvent("nd-run", "go", { said: SECRET });
    const err = await e2
      .handle("nd-run")
      .result()
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NonDeterminismError);
    await until(() => after.events("nd-run").includes("failed"), "the failed line");

    expect(after.events("nd-run")).toEqual(["claimed", "failed"]);
    const failLine = after.lines.find(
      (l) => l.fields.runId === "nd-run" && l.fields.event === "failed",
    );
    expect(failLine?.level).toBe("info");
    expect(failLine?.fields).toMatchObject({
      event: "failed",
      runId: "nd-run",
      workflow: "nd-log",
      version: "1",
      workerId: e2.workerId,
    });
    expect(failLine?.fields.error).toEqual({
      name: "NonDeterminismError",
      code: "NON_DETERMINISM",
    });
    expect(failLine?.message).toBe(
      'failed run "nd-run" (nd-log@1): NonDeterminismError NON_DETERMINISM',
    );
    // Neither a payload (input, results, the event's) nor the error's message, which names
    // the calls and could quote anything.
    const logged = [...before.lines, ...after.lines]
      .flatMap((l) => [
        l.message ?? "",
        ...Object.values(l.fields).map((v) => (typeof v === "string" ? v : JSON.stringify(v))),
      ])
      .join("\n");
    expect(logged).not.toContain(SECRET);
    expect((err as Error).message).toContain('"x"');
    expect(logged).not.toContain((err as Error).message);
    expect(logged).not.toContain('"x"');
  });

  it("takeover: a dead worker of this host is named once, then its run is recovered", async () => {
    const h = harness();
    const log = capture();
    const wf = workflow({ name: "orphaned", version: "1" }, async (ctx) =>
      ctx.step("work", () => "done"),
    );
    // A worker row of this host whose process is gone, holding a run under a long lease.
    const side = h.store();
    await side.open({ clock: h.clock });
    await side.registerWorker({
      id: "wrk_dead",
      host: hostname(),
      pid: await deadPid(),
      pidNamespace: pidNamespace(),
      workflows: [wf.id],
    });
    await side.createRun({
      id: "orphan",
      workflow: wf.name,
      version: wf.version,
      input: "[null]",
      budgetLimit: {},
    });
    const claimed = await side.claimRuns({
      workerId: "wrk_dead",
      workflows: [wf.id],
      limit: 1,
      leaseMs: 3_600_000,
    });
    expect(claimed.map((c) => c.run.id)).toEqual(["orphan"]);
    try {
      // No clock moves: the lease (an hour) has not run out; only the takeover frees it.
      const e = h.engine([wf], { logger: log.logger, leaseMs: 60_000 });
      expect(await within(e.handle("orphan").result(), 30_000, "the orphaned run")).toBe("done");
      const takeovers = log.lines.filter((l) => l.fields.event === "takeover");
      expect(takeovers).toHaveLength(1);
      expect(takeovers[0]?.level).toBe("info");
      expect(takeovers[0]?.fields).toEqual({
        event: "takeover",
        deadWorkerId: "wrk_dead",
        workerId: e.workerId,
      });
      expect(takeovers[0]?.message).toBe('took over the runs of dead worker "wrk_dead"');
      expect(await eventsOnce(log, "orphan", 2)).toEqual(["recovered", "completed"]);
      // Reported before the run it freed was claimed.
      const recovered = log.lines.findIndex(
        (l) => l.fields.runId === "orphan" && l.fields.event === "recovered",
      );
      expect(log.lines.indexOf(takeovers[0]!)).toBeLessThan(recovered);
      expect((await side.listWorkers()).map((w) => w.id)).not.toContain("wrk_dead");
    } finally {
      await side.close();
    }
  });
});

describe.each(BACKENDS)("a renewal racing the release (%s)", (backend) => {
  const harness = useHarness(backend);

  it("a renewal that finds the run already released by this execution is not a lost lease", async () => {
    const h = harness();
    const log = capture();
    let stepGate!: () => void;
    const stepWaits = new Promise<void>((r) => {
      stepGate = r;
    });
    let renewGate!: () => void;
    const renewWaits = new Promise<void>((r) => {
      renewGate = r;
    });
    let releaseGate!: () => void;
    const releaseWaits = new Promise<void>((r) => {
      releaseGate = r;
    });
    let holdRenewals = false;
    let renewalAnswered = false;
    let released = false;
    const inner = faultyStore(h.store()); // a proxy that binds the store's methods
    // The renewal is asked while the run executes and reaches the store after the release
    // committed; the release's answer comes back only after the renewal's.
    const store = new Proxy(inner, {
      get(target, prop, receiver) {
        if (prop === "renewLeases") {
          return async (p: Parameters<Store["renewLeases"]>[0]) => {
            if (!holdRenewals) return target.renewLeases(p);
            holdRenewals = false;
            await renewWaits;
            const res = await target.renewLeases(p);
            renewalAnswered = true;
            return res;
          };
        }
        if (prop === "releaseRun") {
          return async (p: Parameters<Store["releaseRun"]>[0]) => {
            const res = await target.releaseRun(p);
            released = true;
            await releaseWaits;
            return res;
          };
        }
        return Reflect.get(target, prop, receiver);
      },
    });
    const wf = workflow({ name: "racing", version: "1" }, async (ctx) =>
      ctx.step("s", () => stepWaits.then(() => "done")),
    );
    const e = h.engine([wf], { store, logger: log.logger, heartbeatMs: 3_600_000 });
    const run = await e.start(wf, undefined, { id: "racing" });
    await until(async () => (await e.getRun("racing"))?.status === "running", "the run executes");
    holdRenewals = true;
    await h.clock.advance(0); // a heartbeat: its renewal is held
    stepGate();
    await until(() => released, "the release committed");
    renewGate();
    await until(() => renewalAnswered, "the renewal is answered (the run is not running)");
    await new Promise((r) => setImmediate(r));
    releaseGate();
    expect(await run.result()).toBe("done");
    expect(log.events("racing")).toEqual(["claimed", "completed"]);
  });
});

describe("cairn worker output", () => {
  it("text, --json and --quiet: a banner with the pid, then one line per event (or none)", async () => {
    const dir = tempDir("cairn-worker-log-");
    const db = join(dir.dir, "cairn.db");
    const mod = join(dir.dir, "wf.mjs");
    writeFileSync(
      mod,
      `import { workflow } from ${JSON.stringify(pathToFileURL(join(ROOT, "src/index.ts")).href)};
export const hello = workflow({ name: "hello", version: "1" }, async (ctx, input) =>
  ctx.step("s", () => "hi " + input.who));
`,
    );
    const client = createEngine({ store: sqliteStore(db), worker: false });
    const hello = workflow(
      { name: "hello", version: "1" },
      async (_ctx, _i: { who: string }) => "",
    );
    try {
      for (const mode of ["text", "json", "quiet"] as const) {
        const flags = mode === "text" ? [] : [`--${mode}`];
        const w = startCairn(["worker", mod, ...flags], { CAIRN_STORE: db });
        await until(
          () => w.output.stdout.includes(String(w.child.pid)) || w.child.exitCode !== null,
          `${mode} banner`,
        );
        const run = await client.start(hello, { who: SECRET });
        await expect(run.result()).resolves.toBe(`hi ${SECRET}`);
        if (mode !== "quiet") {
          await until(
            () => w.output.stdout.includes(run.id.slice(0, 8)) && /completed/.test(w.output.stdout),
            "lines",
          );
        }
        w.child.kill("SIGTERM");
        const { code, stdout, stderr } = await w.done;
        expect(code).toBe(0);
        expect(stderr).toBe("");
        expect(stdout).not.toContain(SECRET);
        if (mode === "text") {
          expect(stdout).toMatch(new RegExp(`^cairn worker wrk_\\S+ \\(pid ${w.child.pid}, `));
          expect(stdout).toMatch(
            new RegExp(`\\d\\d:\\d\\d:\\d\\d\\.\\d{3} claimed run "${run.id}" \\(hello@1\\)\\n`),
          );
          expect(stdout).toMatch(new RegExp(`completed run "${run.id}" \\(hello@1\\)\\n`));
        } else if (mode === "json") {
          const lines = stdout
            .trim()
            .split("\n")
            .map((l) => JSON.parse(l) as Record<string, unknown>);
          expect(lines[0]).toMatchObject({ event: "started", pid: w.child.pid, level: 30 });
          const mine = lines.filter((l) => (l as Partial<WorkerEventFields>).runId === run.id);
          expect(mine.map((l) => l.event)).toEqual(["claimed", "completed"]);
          expect(mine[1]).toMatchObject({ workflow: "hello", version: "1", pid: w.child.pid });
          expect(lines.at(-1)).toMatchObject({ event: "stopped" });
        } else {
          expect(stdout).toMatch(new RegExp(`\\(pid ${w.child.pid}, `));
          expect(stdout).not.toContain(run.id);
        }
      }
    } finally {
      await client.close();
      dir.cleanup();
    }
  });
});
