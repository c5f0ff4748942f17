// A user's first hour with the CLI: `cairn start` by name without the
// workflow's code (newest version a live worker serves, id reuse visible, budget replacing
// the workflow's default), why each unfinished run is where it is (`runs` and `show`: the
// wait and its deadline, an approval's deadline, a sleep's timer, the worker holding a run
// and its lease end or that its lease ended, no worker at all or none serving the version,
// a run paused because no live worker serves its version), events no wait consumed,
// durations counted from when a call began, the `send` warning for a name the run does not
// wait for, and the worker's --import, --lease, --poll-interval and --grace flags.

import { writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatDuration } from "../src/cli/format.js";
import {
  createEngine,
  type Engine,
  type RunStatus,
  realClock,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { cairn, expectFailure, ROOT, startCairn } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

const gate: { open?: () => void } = {};
let effectTries = 0;

const triageV1 = workflow(
  { name: "triage", version: "1", budget: { usd: 5, tokens: 500 } },
  async (ctx, input: { issue: number }) => {
    const label = await ctx.step("label", () => `bug-${input.issue}`);
    const answer = await ctx.waitForEvent<{ ok: boolean }>("approval", { timeout: "1h" });
    const note = await ctx.effect(
      "notify",
      {
        perform: () => {
          effectTries += 1;
          if (effectTries === 1) throw new Error("chat service hiccup");
          return { sent: true };
        },
        reconcile: () => undefined,
      },
      { retry: { initialDelay: "300ms", jitter: false } },
    );
    return { label, ok: !answer.timedOut && answer.payload.ok, note };
  },
);
const triageV2 = workflow({ name: "triage", version: "2" }, async (ctx, input: { issue: number }) =>
  ctx.step("label", () => `v2-${input.issue}`),
);
const spendy = workflow({ name: "spendy", version: "1", budget: { tokens: 10 } }, async (ctx) => {
  await ctx.step("a", (s) => {
    s.spend({ tokens: 20 });
  });
  return ctx.step("b", () => "done");
});
/** Comments a chat service holds: the first post goes through but its answer is lost. */
const posted = new Set<string>();
const poster = workflow({ name: "poster", version: "1" }, async (ctx) =>
  ctx.effect(
    "post",
    {
      perform: (key) => {
        const first = posted.size === 0;
        posted.add(key);
        if (first) throw new Error("connection reset after the post went through");
        return { id: key };
      },
      reconcile: (key) => (posted.has(key) ? { id: key } : undefined),
    },
    { retry: { initialDelay: "10ms" } },
  ),
);
const blocker = workflow({ name: "blocker", version: "1" }, async (ctx) =>
  ctx.step("hold", () => new Promise<string>((resolve) => (gate.open = () => resolve("held")))),
);

describe("cairn start, runs, show and send (SQLite)", () => {
  const dir = tempDir("cairn-cli-start-");
  const db = join(dir.dir, "cairn.db");
  const env = { CAIRN_STORE: `sqlite:${db}` };
  let engine: Engine;

  async function waitForStatus(id: string, status: RunStatus): Promise<void> {
    await until(async () => (await engine.getRun(id))?.status === status, `${id} ${status}`);
  }

  beforeAll(async () => {
    engine = createEngine({
      store: sqliteStore(db),
      workflows: [triageV1, triageV2, blocker, spendy, poster],
      pollIntervalMs: 20,
    });
    await engine.listRuns({ limit: 1 }); // registered as a live worker before any start
  });

  afterAll(async () => {
    gate.open?.();
    await engine.close();
    dir.cleanup();
  });

  it("start: the newest version a live worker serves, or @version; id reuse; --budget", async () => {
    const byName = await cairn(["start", "triage", "--input", '{"issue": 7}', "--id", "t-7"], env);
    expect(byName.code, byName.stderr).toBe(0);
    expect(byName.stdout).toContain('Started run "t-7" of triage@2.');
    expect(byName.stdout).toContain("Follow it with: cairn show t-7");
    expect(byName.stdout).toContain(
      "Budget: the workflow's default limits, applied by the worker that executes it",
    );
    await expect(engine.handle(triageV2, "t-7").result()).resolves.toBe("v2-7");

    const pinned = await cairn(
      ["start", "triage@1", "--input", "-", "--id", "t-42", "--budget", "usd=2", "--json"],
      env,
      '{"issue": 42}',
    );
    expect(pinned.code, pinned.stderr).toBe(0);
    const started = JSON.parse(pinned.stdout) as {
      created: boolean;
      run: { id: string; version: string; budget: { limit: object } };
    };
    expect(started.created).toBe(true);
    expect(started.run.version).toBe("1");
    // Started without the workflow's code: the run stores the limits it was given; the
    // worker fills in the workflow's defaults for the other names (see the budget test).
    expect(started.run.budget.limit).toEqual({ usd: 2 });
    await waitForStatus("t-42", "waiting");

    const again = await cairn(
      ["start", "triage@1", "--input", '{"issue": 42}', "--id", "t-42"],
      env,
    );
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain(
      'Run "t-42" of triage@1 already exists with this input (status waiting); nothing new was started.',
    );
    expectFailure(
      await cairn(["start", "triage@1", "--input", '{"issue": 43}', "--id", "t-42"], env),
      1,
      /Run "t-42" already exists with a different input/,
    );
    expectFailure(
      await cairn(["start", "ghost", "--input", "{}"], env),
      1,
      /No workflow named "ghost" is registered with this engine or served by a live worker/,
    );
    expectFailure(
      await cairn(["start", "triage", "--input", "{oops"], env),
      2,
      /--input is not valid JSON/,
    );
    expectFailure(
      await cairn(["start", "triage@"], env),
      2,
      /<workflow> must be NAME or NAME@VERSION/,
    );
    // Found by attacking it: a name no workflow can have was pinned (and never served), and
    // an invalid id was reported as a bug.
    expectFailure(
      await cairn(["start", "a@b@c", "--id", "never"], env),
      2,
      /"a@b@c" is not a workflow name or name@version/,
    );
    expect(await engine.getRun("never")).toBeUndefined();
    expectFailure(
      await cairn(["start", "triage@1", "--id", "x".repeat(300)], env),
      2,
      /run id "x+" is invalid; use 1-256 characters/,
    );
  });

  it("runs and show: a waiting run's wait and deadline; a running run's worker and lease end", async () => {
    const listed = await cairn(["runs"], env);
    expect(listed.code, listed.stderr).toBe(0);
    const deadline = (await engine.getRun("t-42"))?.wakeAt?.toISOString();
    expect(deadline).toBeDefined();
    expect(listed.stdout).toMatch(
      new RegExp(`t-42\\s+triage@1\\s+waiting\\s+waiting for event "approval" until ${deadline}`),
    );

    await engine.start(blocker, undefined, { id: "b-1" });
    await waitForStatus("b-1", "running");
    const shown = await cairn(["show", "b-1", "--json"], env);
    const readAt = Date.now();
    const json = JSON.parse(shown.stdout) as {
      why: string;
      run: { leaseOwner: string; leaseUntil: string };
    };
    expect(json.run.leaseOwner).toBe(engine.workerId);
    expect(json.why).toBe(`running on ${engine.workerId} (lease until ${json.run.leaseUntil})`);
    // The engine's default lease: renewed to at most 30 s after the last renewal.
    expect(new Date(json.run.leaseUntil).getTime()).toBeLessThanOrEqual(readAt + 30_000);
    const text = await cairn(["show", "b-1"], env);
    expect(text.stdout).toMatch(new RegExp(`lease\\s+${engine.workerId} until \\d{4}-`));
    expect(text.stdout).toMatch(new RegExp(`why\\s+running on ${engine.workerId}\n`));
    expect(text.stdout).not.toContain("lease until"); // the lease has its own line
    const running = await cairn(["runs", "--status", "running"], env);
    expect(running.stdout).toMatch(
      new RegExp(`b-1\\s+blocker@1\\s+running\\s+running on ${engine.workerId}`),
    );
    gate.open?.();
    await waitForStatus("b-1", "completed");
  });

  it("send: a name the run does not wait for is stored with a warning; show lists it", async () => {
    const typo = await cairn(["send", "t-42", "aproval", '{"ok": true}'], env);
    expect(typo.code, typo.stderr).toBe(0);
    expect(typo.stdout.trim()).toBe('Sent event "aproval" to run "t-42".');
    expect(typo.stderr).toContain(
      'cairn: warning: run "t-42" is waiting for "approval", not "aproval"; the event is stored',
    );
    expect(typo.stderr).toMatch(
      /Events not consumed by any wait \(1\):\n\s+SEQ\s+NAME\s+SENT\n\s+\d+\s+aproval\s/,
    );
    expect((await engine.getRun("t-42"))?.status).toBe("waiting");

    const shown = await cairn(["show", "t-42"], env);
    expect(shown.stdout).toMatch(
      /Events not consumed by any wait \(1\):\n\s+SEQ\s+NAME\s+SENT\n\s+\d+\s+aproval\s/,
    );
    const json = JSON.parse((await cairn(["show", "t-42", "--json"], env)).stdout) as {
      unconsumedEvents: Array<{ name: string; payload: unknown }>;
    };
    expect(json.unconsumedEvents.map((e) => [e.name, e.payload])).toEqual([
      ["aproval", { ok: true }],
    ]);

    // A name with terminal control characters is shown escaped, never sent to the terminal.
    const hostile = await cairn(["send", "t-42", "apr\u001b[2J\nx"], env);
    expect(hostile.code, hostile.stderr).toBe(0);
    expect(hostile.stderr).toContain('not "apr\\u001b[2J\\nx"; the event is stored');
    expect(hostile.stderr).not.toContain("\u001b");
    const both = await cairn(["show", "t-42"], env);
    expect(both.stdout).toMatch(
      /Events not consumed by any wait \(2\):\n.*\n.*aproval.*\n\s+\d+\s+apr\\u001b\[2J\\nx\s/,
    );
    expect(both.stdout).not.toContain("\u001b");

    const right = await cairn(["send", "t-42", "approval", '{"ok": true}'], env);
    expect(right.code, right.stderr).toBe(0);
    expect(right.stderr).toBe("");
    await expect(engine.handle(triageV1, "t-42").result()).resolves.toEqual({
      label: "bug-42",
      ok: true,
      note: { sent: true },
    });
  });

  it("show: a wait's and an effect's duration count from when the call began", async () => {
    const steps = await engine.getSteps("t-42");
    const notify = steps.find((s) => s.key === "notify")!;
    // Its intent is recorded before its first attempt starts: in an earlier millisecond, or,
    // on a fast disk, the same one (startedAt is the first attempt's start).
    expect(notify.intentAt!.getTime()).toBeLessThanOrEqual(notify.startedAt.getTime());
    expect(notify.attempts).toHaveLength(2);
    const shown = await cairn(["show", "t-42"], env);
    for (const key of ["approval", "notify"]) {
      const s = steps.find((x) => x.key === key)!;
      const began = s.intentAt ?? s.startedAt;
      const duration = formatDuration(s.completedAt!.getTime() - began.getTime());
      expect(shown.stdout).toMatch(
        new RegExp(
          `\\n\\s+${key}\\s+\\w+\\s+completed(/\\w+)?\\s+\\d+\\s+\\S+\\s+${duration}\\s+${began.toISOString()}`,
        ),
      );
    }
    // The misspelt event is never consumed: it stays listed.
    expect(shown.stdout).toMatch(/Events not consumed by any wait \(2\):\n.*\n\s+\d+\s+aproval\s/);
  });

  it("show: an effect says whether perform made it or reconcile found it", async () => {
    await cairn(["start", "poster", "--id", "p-1"], env);
    await waitForStatus("p-1", "completed");
    expect(posted.size).toBe(1); // posted once: the retry found it
    const shown = await cairn(["show", "p-1"], env);
    expect(shown.stdout).toMatch(/\n\s+post\s+effect\s+completed\/reconciled\s+2\s/);
    const triage = await cairn(["show", "t-42"], env);
    expect(triage.stdout).toMatch(/\n\s+notify\s+effect\s+completed\/performed\s+2\s/);
    const json = JSON.parse((await cairn(["show", "p-1", "--json"], env)).stdout) as {
      steps: Array<{ key: string; effect?: string }>;
    };
    expect(json.steps.map((x) => [x.key, x.effect])).toEqual([["post", "reconciled"]]);
  });

  it("start by name: the worker applies the workflow's default budget to names not given", async () => {
    const res = await cairn(["start", "spendy", "--id", "s-1"], env);
    expect(res.code, res.stderr).toBe(0);
    await waitForStatus("s-1", "paused");
    const run = await engine.getRun("s-1");
    // Stored: no limit (none given); held to, and shown by an engine with the code: the
    // workflow's default (h5).
    expect(run?.budget.limit).toEqual({ tokens: 10 });
    expect(run?.reason).toBe("budget: tokens 20 of 10 spent");
    expect((await engine.getSteps("s-1")).map((s) => s.key)).toEqual(["a"]);
    const listed = await cairn(["runs", "--status", "paused"], env);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(
      /s-1\s+spendy@1\s+paused\s+paused for budget: tokens 20 of 10 spent/,
    );

    // A limit given at start replaces the default of that name.
    const given = await cairn(["start", "spendy", "--id", "s-2", "--budget", "tokens=100"], env);
    expect(given.code, given.stderr).toBe(0);
    await expect(engine.handle(spendy, "s-2").result()).resolves.toBe("done");
  });
});

describe("cairn runs: a pending run says why no worker takes it", () => {
  const dir = tempDir("cairn-cli-pending-");
  const db = join(dir.dir, "cairn.db");
  const env = { CAIRN_STORE: `sqlite:${db}` };

  afterAll(() => dir.cleanup());

  it("no worker at all; then a live worker that serves other versions", async () => {
    const store = sqliteStore(db);
    const client = createEngine({ store, worker: false });
    try {
      await client.start("triage@1", { issue: 1 }, { id: "p-1" });
      const none = await cairn(["runs"], env);
      expect(none.stdout).toMatch(/p-1\s+triage@1\s+pending\s+pending: no worker is running/);

      // A worker row as a live worker elsewhere writes it; no sweep runs, so the run stays
      // pending rather than being paused as unserved.
      await store.registerWorker({
        id: "wrk_elsewhere",
        host: `${hostname()}-elsewhere`,
        pid: 1,
        pidNamespace: null,
        workflows: ["triage@2"],
      });
      const other = await cairn(["runs", "--json"], env);
      const runs = JSON.parse(other.stdout) as Array<{ id: string; why: string }>;
      expect(runs).toEqual([
        expect.objectContaining({ id: "p-1", why: "pending: no live worker serves triage@1" }),
      ]);
    } finally {
      await client.close();
    }
  });
});

describe("cairn runs: an approval, a sleep, a version no worker serves, a lease that ended", () => {
  const dirs: Array<{ cleanup: () => void }> = [];
  const engines: Engine[] = [];
  const stores: Array<ReturnType<typeof sqliteStore>> = [];

  /** A fresh store file and the env that points the CLI at it. */
  function freshStore(): { db: string; env: Record<string, string> } {
    const dir = tempDir("cairn-cli-why-");
    dirs.push(dir);
    const db = join(dir.dir, "cairn.db");
    return { db, env: { CAIRN_STORE: `sqlite:${db}` } };
  }

  function engineOn(db: string, options: Omit<Parameters<typeof createEngine>[0], "store">) {
    const e = createEngine({ store: sqliteStore(db), pollIntervalMs: 20, ...options });
    engines.push(e);
    return e;
  }

  /** `cairn runs --json`: each run's id and why, as the CLI explains it now. */
  async function whys(env: Record<string, string>): Promise<Record<string, string>> {
    const res = await cairn(["runs", "--json"], env);
    expect(res.code, res.stderr).toBe(0);
    const runs = JSON.parse(res.stdout) as Array<{ id: string; why: string }>;
    return Object.fromEntries(runs.map((r) => [r.id, r.why]));
  }

  afterAll(async () => {
    for (const e of engines) await e.close();
    for (const st of stores) await st.close();
    for (const d of dirs) d.cleanup();
  });

  it('waiting for approval "x" until its deadline; sleeping until the timer', async () => {
    const { db, env } = freshStore();
    const approver = workflow({ name: "approver", version: "1" }, async (ctx) =>
      ctx.approval("x", { request: { merge: "pr-1" }, timeout: "1h" }),
    );
    const sleeper = workflow({ name: "sleeper", version: "1" }, async (ctx) => {
      await ctx.sleep("nap", "2h");
      return "rested";
    });
    const engine = engineOn(db, { workflows: [approver, sleeper] });
    await engine.start(approver, undefined, { id: "ap-1" });
    await engine.start(sleeper, undefined, { id: "sl-1" });
    const waiting = async (id: string) => {
      const r = await until(async () => {
        const run = await engine.getRun(id);
        return run?.status === "waiting" ? run : undefined;
      }, `${id} waiting`);
      expect(r.wakeAt).toBeDefined();
      return r.wakeAt!.toISOString();
    };
    const deadline = await waiting("ap-1");
    const timer = await waiting("sl-1");

    expect(await whys(env)).toEqual({
      "ap-1": `waiting for approval "x" until ${deadline}`,
      "sl-1": `sleeping until ${timer}`,
    });
    const listed = await cairn(["runs"], env);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(
      new RegExp(`ap-1\\s+approver@1\\s+waiting\\s+waiting for approval "x" until ${deadline}\\s`),
    );
    expect(listed.stdout).toMatch(
      new RegExp(`sl-1\\s+sleeper@1\\s+waiting\\s+sleeping until ${timer}\\s`),
    );
  });

  it("paused: a run of a version no live worker serves says so", async () => {
    const { db, env } = freshStore();
    const legacyV2 = workflow({ name: "legacy", version: "2" }, async (ctx) =>
      ctx.step("s", () => "v2"),
    );
    // A worker that serves legacy@2 only; its sweep pauses the v1 run after a short grace
    // (the lease, 300 ms).
    engineOn(db, { workflows: [legacyV2], leaseMs: 300, heartbeatMs: 50 });
    const client = engineOn(db, { worker: false });
    await client.start("legacy@1", undefined, { id: "old-1" });
    const paused = await until(async () => {
      const run = await client.getRun("old-1");
      return run?.status === "paused" ? run : undefined;
    }, "old-1 paused as unserved");
    expect(paused.pausedFor).toBe("version");
    expect(paused.reason).toBe("no live worker has legacy@1");

    expect(await whys(env)).toEqual({ "old-1": "paused: no live worker has legacy@1" });
    const listed = await cairn(["runs", "--status", "paused"], env);
    expect(listed.stdout).toMatch(
      /old-1\s+legacy@1\s+paused\s+paused: no live worker has legacy@1\s/,
    );
  });

  it("running on a worker whose lease ended: it hands it back, or another worker takes it over", async () => {
    const { db, env } = freshStore();
    // A worker that claimed a run and then went quiet (no process here renews or sweeps):
    // its row and the run's lease stay as it left them.
    const store = sqliteStore(db);
    stores.push(store);
    await store.open({ clock: realClock });
    await store.registerWorker({
      id: "wrk_quiet",
      host: `${hostname()}-elsewhere`,
      pid: 1,
      pidNamespace: null,
      workflows: ["lapsed@1"],
    });
    await store.createRun({
      id: "lapsed-1",
      workflow: "lapsed",
      version: "1",
      input: "[null]",
      budgetLimit: {},
    });
    const [claim] = await store.claimRuns({
      workerId: "wrk_quiet",
      workflows: ["lapsed@1"],
      limit: 1,
      leaseMs: 50,
    });
    expect(claim?.run.id).toBe("lapsed-1");
    const leaseUntil = claim!.run.leaseUntil!;
    await until(() => Date.now() > leaseUntil + 5, "the lease ends");
    const run = await store.getRun("lapsed-1");
    expect(run?.status).toBe("running");
    const ended = new Date(leaseUntil).toISOString();

    // Its worker still live, and no other serving its version: nothing else takes it over
    // (a live worker keeps a run while a step body of it still runs there). Before, this
    // said another worker takes it over, with none there.
    expect(await whys(env)).toEqual({
      "lapsed-1": `running on wrk_quiet, whose lease ended ${ended}: that worker, still live, hands it back once no step body of it runs there (no other live worker serves lapsed@1)`,
    });
    await store.registerWorker({
      id: "wrk_other",
      host: `${hostname()}-elsewhere`,
      pid: 2,
      pidNamespace: null,
      workflows: ["lapsed@1"],
    });
    expect(await whys(env)).toEqual({
      "lapsed-1": `running on wrk_quiet, whose lease ended ${ended}: another worker takes it over`,
    });
    const listed = await cairn(["runs"], env);
    expect(listed.stdout).toMatch(
      new RegExp(
        `lapsed-1\\s+lapsed@1\\s+running\\s+running on wrk_quiet, whose lease ended ${ended}: another worker takes it over\\s`,
      ),
    );
  });
  it("running, held by no worker: the live worker serving it takes it over", async () => {
    const { db, env } = freshStore();
    const store = sqliteStore(db);
    stores.push(store);
    await store.open({ clock: realClock });
    await store.registerWorker({
      id: "wrk_gone",
      host: `${hostname()}-elsewhere`,
      pid: 1,
      pidNamespace: null,
      workflows: ["given@1"],
    });
    await store.createRun({
      id: "given-1",
      workflow: "given",
      version: "1",
      input: "[null]",
      budgetLimit: {},
    });
    const [claim] = await store.claimRuns({
      workerId: "wrk_gone",
      workflows: ["given@1"],
      limit: 1,
      leaseMs: 60_000,
    });
    // Its worker ended its lease to keep a crash for its next claimer (Store.expireLease).
    expect(await store.expireLease({ runId: "given-1", epoch: claim!.run.epoch })).toEqual({
      ok: true,
    });
    // Before, the workers were not fetched for a running run: "no worker is running".
    expect(await whys(env)).toEqual({
      "given-1":
        "running, held by no worker (its last one gave it up): the next of 1 live worker(s) serving given@1 takes it over",
    });
  });
});

describe("cairn worker --import, --lease, --poll-interval, --grace", () => {
  const dir = tempDir("cairn-cli-worker-flags-");
  const db = join(dir.dir, "cairn.db");
  let worker: ReturnType<typeof startCairn> | undefined;

  afterAll(() => {
    if (worker && worker.child.exitCode === null) worker.child.kill("SIGKILL");
    dir.cleanup();
  });

  it("imports a module before the workflows; leases last --lease", async () => {
    const setup = join(dir.dir, "setup.mjs");
    writeFileSync(setup, 'globalThis.cairnTestSetup = "imported first";\n');
    const go = join(dir.dir, "go");
    const module = join(dir.dir, "workflows.mjs");
    writeFileSync(
      module,
      `import { existsSync } from "node:fs";
import { workflow } from ${JSON.stringify(pathToFileURL(join(ROOT, "src/index.ts")).href)};
const seen = globalThis.cairnTestSetup; // read at import: --import ran before this module
export const hold = workflow({ name: "hold", version: "1" }, async (ctx) =>
  ctx.step("seen", async () => {
    while (!existsSync(${JSON.stringify(go)})) await new Promise((r) => setTimeout(r, 20));
    return seen;
  }));
`,
    );
    worker = startCairn(
      ["worker", module, "--import", setup, "--lease", "2s", "--poll-interval", "50ms"],
      { CAIRN_STORE: db },
    );
    const started = worker;
    await until(
      () => started.output.stdout.includes("Running;") || started.child.exitCode !== null,
      "worker start",
    );
    expect(started.output.stderr).toBe("");

    const env = { CAIRN_STORE: db };
    const begun = await cairn(["start", "hold", "--id", "h-1"], env);
    expect(begun.stdout, begun.stderr).toContain('Started run "h-1" of hold@1.');
    const client = createEngine({ store: sqliteStore(db), worker: false });
    try {
      await until(async () => (await client.getRun("h-1"))?.status === "running", "running");
      const run = await client.getRun("h-1");
      const readAt = Date.now();
      // Renewed to at most --lease (2 s) past the last renewal, not the default 30 s.
      expect(run?.leaseUntil?.getTime()).toBeLessThanOrEqual(readAt + 2_000);
      writeFileSync(go, "");
      await expect(client.handle("h-1").result()).resolves.toBe("imported first");
    } finally {
      await client.close();
    }
    started.child.kill("SIGTERM");
    expect((await started.done).code).toBe(0);
  });

  it("a module --import cannot load, or a lease too short, is a clear error", async () => {
    const module = join(dir.dir, "workflows.mjs");
    expectFailure(
      await cairn(["worker", module, "--import", "./no-such-loader.mjs", "--store", db]),
      1,
      /--import \.\/no-such-loader\.mjs: no such file/,
    );
    expectFailure(
      await cairn(["worker", module, "--lease", "0", "--store", db]),
      2,
      /--lease must be a duration/,
    );
    expectFailure(
      await cairn(["worker", module, "--poll-interval", "soon", "--store", db]),
      2,
      /--poll-interval must be a duration/,
    );
    expectFailure(
      await cairn(["worker", module, "--grace", "a while", "--store", db]),
      2,
      /--grace must be a duration of at least 0ms/,
    );
    const help = await cairn(["worker", "--help"]);
    for (const flag of [
      "--import <module>",
      "--lease <d>",
      "--poll-interval <d>",
      "--grace <d>",
      "NODE_OPTIONS",
    ]) {
      expect(help.stdout).toContain(flag);
    }
  });
});
