// The `cairn` CLI as users run it: a child process (node + tsx) against a real store that
// an in-process engine populates and executes. Covers listing, showing, events, cancel,
// resume, fork, usage errors (exit 2), expected errors (exit 1, one line, no stack), and
// `cairn worker` executing runs from a user's module until SIGTERM.

import { writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createEngine,
  type Engine,
  FatalError,
  type RunStatus,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { cairn, expectFailure, ROOT, startCairn } from "./helpers/cli.js";
import { postgresTestUrl, testSchema } from "./helpers/postgres.js";
import { tempDir, until } from "./helpers/sqlite.js";

const INDEX = join(ROOT, "src/index.ts");

const state = { failing: true };

const approveV1 = workflow({ name: "approve", version: "1" }, async (ctx, input: { n: number }) => {
  await ctx.step("plan", (s) => {
    s.spend({ usd: 0.25, tokens: 100 });
    return { edits: input.n };
  });
  const answer = await ctx.waitForEvent<{ ok: boolean }>("approval");
  return ctx.step("finish", () => ({
    approved: !answer.timedOut && answer.payload.ok,
    version: "1",
  }));
});

const approveV2 = workflow({ name: "approve", version: "2" }, async (ctx, input: { n: number }) => {
  await ctx.step("plan", () => ({ edits: input.n }));
  const answer = await ctx.waitForEvent<{ ok: boolean }>("approval");
  return ctx.step("finish", () => ({
    approved: !answer.timedOut && answer.payload.ok,
    version: "2",
  }));
});

const flaky = workflow({ name: "flaky", version: "1" }, async (ctx) =>
  ctx.step("call", () => {
    if (state.failing) throw new FatalError("upstream is down");
    return "ok";
  }),
);

const costly = workflow({ name: "costly", version: "1", budget: { usd: 1 } }, async (ctx) => {
  await ctx.step("a", (s) => {
    s.spend({ usd: 2 });
  });
  return ctx.step("b", () => "done");
});

describe("cairn CLI (SQLite)", () => {
  const dir = tempDir("cairn-cli-");
  const db = join(dir.dir, "cairn.db");
  const env = { CAIRN_STORE: `sqlite:${db}` };
  let engine: Engine;

  async function waitForStatus(id: string, status: RunStatus): Promise<void> {
    await until(async () => (await engine.getRun(id))?.status === status, `${id} ${status}`);
  }

  beforeAll(async () => {
    engine = createEngine({
      store: sqliteStore(db),
      workflows: [approveV1, approveV2, flaky, costly],
      pollIntervalMs: 20,
    });
    await engine.start(approveV1, { n: 1 }, { id: "wait-1" });
    await engine.start(approveV1, { n: 2 }, { id: "wait-2" });
    await engine.start(flaky, undefined, { id: "flaky-1" });
    await engine.start(costly, undefined, { id: "costly-1" });
    await waitForStatus("wait-1", "waiting");
    await waitForStatus("wait-2", "waiting");
    await waitForStatus("flaky-1", "failed");
    await waitForStatus("costly-1", "paused");
  });

  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("runs: lists runs as a table and as JSON, filtered by status and workflow", async () => {
    const table = await cairn(["runs"], env);
    expect(table.code, table.stderr).toBe(0);
    const lines = table.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^ID\s+WORKFLOW\s+STATUS\s+REASON\s+CREATED\s+UPDATED$/);
    expect(table.stdout).toMatch(
      /wait-1\s+approve@1\s+waiting\s+waiting for event "approval"\s+\d{4}-\d\d-\d\dT/,
    );
    expect(table.stdout).toMatch(/flaky-1\s+flaky@1\s+failed\s+/);
    expect(table.stdout).toMatch(/costly-1\s+costly@1\s+paused\s+paused for budget: usd 2 of 1/);

    const json = await cairn(["runs", "--json", "--status", "waiting,paused"], env);
    expect(json.code, json.stderr).toBe(0);
    const listed = JSON.parse(json.stdout) as Array<{ id: string; createdAt: string }>;
    expect(listed.map((r) => r.id).sort()).toEqual(["costly-1", "wait-1", "wait-2"]);
    expect(new Date(listed[0]!.createdAt).toISOString()).toBe(listed[0]!.createdAt);

    const byWorkflow = await cairn(["runs", "--json", "--workflow", "flaky", "--limit", "5"], env);
    expect((JSON.parse(byWorkflow.stdout) as Array<{ id: string }>).map((r) => r.id)).toEqual([
      "flaky-1",
    ]);
    const byVersion = await cairn(["runs", "--workflow", "approve@2"], env);
    expect(byVersion.stdout.trim()).toBe("No runs match.");
  });

  it("show: the run, its budget and its steps; attempt errors; --json", async () => {
    const shown = await cairn(["show", "wait-1"], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain('Run "wait-1"');
    expect(shown.stdout).toMatch(/workflow\s+approve@1/);
    expect(shown.stdout).toMatch(/status\s+waiting/);
    expect(shown.stdout).toMatch(/waiting for\s+"approval"/);
    // The CLI has no workflow code: it cannot tell "no limit" from a default's, and says so
    // once, after the amounts.
    expect(shown.stdout).toMatch(
      /budget\s+tokens 100 \(no limit given\), usd 0.25 \(no limit given\); where the run was given no limit, the workflow's default budget, if any, applies\n/,
    );
    expect(shown.stdout).toMatch(/input\s+\{"n":1\}/);
    expect(shown.stdout).toMatch(/plan\s+step\s+completed\s+1\s+tokens=100 usd=0.25/);
    expect(shown.stdout).toMatch(/approval\s+wait\s+waiting\s+0/);

    const failed = await cairn(["show", "flaky-1"], env);
    expect(failed.stdout).toMatch(/status\s+failed/);
    expect(failed.stdout).toMatch(/error\s+FatalError \[FATAL\]: upstream is down/);
    expect(failed.stdout).toContain("call attempt 1: FatalError [FATAL]: upstream is down");

    const json = await cairn(["show", "costly-1", "--json"], env);
    const parsed = JSON.parse(json.stdout) as {
      run: { status: string; budget: { limit: object; spent: object } };
      steps: Array<{ key: string; status: string }>;
    };
    expect(parsed.run.status).toBe("paused");
    expect(parsed.run.budget).toEqual({
      limit: { usd: 1 },
      spent: { usd: 2 },
      defaultsUnknown: true,
    });
    expect(parsed.steps.map((s) => [s.key, s.status])).toEqual([["a", "completed"]]);

    expectFailure(await cairn(["show", "nope"], env), 1, /Run "nope" does not exist/);
  });

  it("send: the event completes a waiting run; a finished run refuses it (exit 1)", async () => {
    const sent = await cairn(["send", "wait-1", "approval", '{"ok": true}'], env);
    expect(sent.code, sent.stderr).toBe(0);
    expect(sent.stdout.trim()).toBe('Sent event "approval" to run "wait-1".');
    await expect(engine.handle("wait-1").result()).resolves.toEqual({
      approved: true,
      version: "1",
    });

    expectFailure(
      await cairn(["send", "wait-1", "approval", "{}"], env),
      1,
      /Run "wait-1" is completed; event "approval" cannot be delivered/,
    );
  });

  it("cancel: cancels a waiting run; a finished run is a clear error (exit 1)", async () => {
    const canceled = await cairn(["cancel", "wait-2", "--reason", "not needed"], env);
    expect(canceled.code, canceled.stderr).toBe(0);
    expect(canceled.stdout.trim()).toBe('Canceled run "wait-2".');
    const run = await engine.getRun("wait-2");
    expect(run?.status).toBe("canceled");
    expect(run?.reason).toBe("not needed");

    await waitForStatus("wait-1", "completed");
    expectFailure(
      await cairn(["cancel", "wait-1"], env),
      1,
      /^cairn: Run "wait-1" is already completed; it cannot be canceled\n$/,
    );
  });

  it("resume: a failed run gets fresh attempts; a paused run gets a raised budget", async () => {
    state.failing = false;
    const resumed = await cairn(["resume", "flaky-1"], env);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stdout).toContain('Resumed run "flaky-1"');
    await expect(engine.handle("flaky-1").result()).resolves.toBe("ok");

    const raised = await cairn(["resume", "costly-1", "--budget", "usd=10,tokens=500"], env);
    expect(raised.code, raised.stderr).toBe(0);
    expect(raised.stdout).toContain("Budget: tokens 0 of 500, usd 2 of 10");
    await expect(engine.handle("costly-1").result()).resolves.toBe("done");

    expectFailure(
      await cairn(["resume", "costly-1"], env),
      1,
      /Run "costly-1" is completed; only paused or failed runs can be resumed/,
    );
  });

  it("fork: a new run from a step, on another version; an unknown step names the keys", async () => {
    await waitForStatus("wait-1", "completed");
    const forked = await cairn(
      ["fork", "wait-1", "--from", "finish", "--version", "2", "--id", "fork-1", "--json"],
      env,
    );
    expect(forked.code, forked.stderr).toBe(0);
    expect(JSON.parse(forked.stdout)).toMatchObject({
      id: "fork-1",
      workflow: "approve",
      version: "2",
    });
    // The approval recorded before "finish" is reused: the fork needs no new event.
    await expect(engine.handle("fork-1").result()).resolves.toEqual({
      approved: true,
      version: "2",
    });

    expectFailure(
      await cairn(["fork", "wait-1", "--from", "nope"], env),
      1,
      /no recorded step "nope"; fork from one of: plan, approval, finish/,
    );
  });

  it("usage errors exit 2 and point at --help", async () => {
    const cases: Array<[string[], RegExp]> = [
      [["frobnicate"], /unknown command "frobnicate"; commands: runs, show/],
      [["show"], /missing <id>/],
      [["show", "a", "b"], /unexpected argument "b"/],
      [
        ["send", "wait-1", "approval", "{not json"],
        /payload of event "approval" is not valid JSON/,
      ],
      [["runs", "--limit", "many"], /--limit must be a whole number >= 1/],
      [["runs", "--status", "done"], /unknown status "done"/],
      [["runs", "--bogus"], /Unknown option '--bogus'/],
      [["resume", "costly-1", "--budget", "usd=-1"], /--budget expects name=amount pairs/],
      [["fork", "wait-1"], /missing --from <step>/],
      // The engine's TypeError for a bad value is the command line's mistake, not a bug.
      [["fork", "wait-1", "--from", "plan", "--id", ""], /--id: run id "" is invalid/],
      [["runs", "--schema", "x"], /--schema applies only to a PostgreSQL store/],
      [["runs", "--store", "mysql://localhost/db"], /unsupported store "mysql:\/\/\.\.\."/],
      [["worker", "m.mjs", "--concurrency", "0"], /--concurrency must be a whole number >= 1/],
    ];
    const results = await Promise.all(cases.map(([args]) => cairn(args, env)));
    results.forEach((res, i) => {
      const [args, message] = cases[i]!;
      expectFailure(res, 2, message);
      if (args[0] !== "frobnicate") expect(res.stderr).toContain(`cairn ${args[0]} --help`);
    });
    const bare = await cairn([], env);
    expect(bare.code).toBe(2);
    expect(bare.stderr).toContain("Usage: cairn <command>");
  });

  it("--help for the CLI and for every command; --store before the command", async () => {
    const commands = ["runs", "show", "send", "cancel", "resume", "fork", "worker"];
    const results = await Promise.all([
      cairn(["--help"]),
      ...commands.map((c) => cairn([c, "--help"])),
    ]);
    expect(results[0]!.code).toBe(0);
    for (const c of commands) expect(results[0]!.stdout).toMatch(new RegExp(`^  ${c}\\s+\\S`, "m"));
    commands.forEach((c, i) => {
      expect(results[i + 1]!.code).toBe(0);
      expect(results[i + 1]!.stdout).toContain(`Usage: cairn ${c}`);
    });

    const global = await cairn(["--store", db, "runs", "--status", "canceled"]);
    expect(global.code, global.stderr).toBe(0);
    expect(global.stdout).toMatch(/wait-2\s+approve@1\s+canceled\s+not needed/);
  });

  it("a store that does not exist is an error, not a new empty store", async () => {
    const missing = join(dir.dir, "missing", "cairn.db");
    expectFailure(
      await cairn(["runs", "--store", `sqlite:${missing}`]),
      1,
      /No cairn store at ".*missing\/cairn\.db" \(SQLite\)/,
    );
  });
});

describe("cairn worker", () => {
  const dir = tempDir("cairn-cli-worker-");
  const db = join(dir.dir, "cairn.db");
  let worker: ReturnType<typeof startCairn> | undefined;

  afterAll(() => {
    if (worker && worker.child.exitCode === null) worker.child.kill("SIGKILL");
    dir.cleanup();
  });

  it("registers the module's workflows, executes runs, and stops cleanly on SIGTERM", async () => {
    const modulePath = join(dir.dir, "workflows.mjs");
    writeFileSync(
      modulePath,
      `import { workflow } from ${JSON.stringify(pathToFileURL(INDEX).href)};
export const greet = workflow({ name: "greet", version: "1" }, async (ctx, input) =>
  ctx.step("hello", () => \`hello \${input.name} from \${process.pid}\`));
const greetV2 = workflow({ name: "greet", version: "2" }, async (ctx, input) =>
  ctx.step("hello", () => \`hi \${input.name}\`));
export const workflows = [greet, greetV2];
export const notAWorkflow = { name: "x", version: "1" };
`,
    );
    // A relative path resolves against the current directory.
    worker = startCairn(["worker", relative(ROOT, modulePath), "--concurrency", "4"], {
      CAIRN_STORE: db,
    });
    const started = worker;
    await until(
      () => started.output.stdout.includes("Running;") || started.child.exitCode !== null,
      "worker start",
    );
    expect(started.output.stderr).toBe("");
    expect(started.output.stdout).toMatch(/Registered workflows:\n {2}greet@1\n {2}greet@2\n/);

    // A client engine in this process only needs the name and version.
    const client = createEngine({ store: sqliteStore(db), worker: false });
    try {
      const clientGreet = workflow(
        { name: "greet", version: "1" },
        async (_ctx, _input: { name: string }): Promise<string> => {
          throw new Error("a client never executes");
        },
      );
      const run = await client.start(clientGreet, { name: "ada" });
      await expect(run.result()).resolves.toBe(`hello ada from ${started.child.pid}`);
    } finally {
      await client.close();
    }

    started.child.kill("SIGTERM");
    const res = await started.done;
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toContain("Received SIGTERM");
    expect(res.stdout).toContain("Worker stopped.");
  });

  it("check-replay: the same code passes (exit 0), changed code is reported (exit 1)", async () => {
    const write = (file: string, stepName: string) => {
      const path = join(dir.dir, file);
      writeFileSync(
        path,
        `import { workflow } from ${JSON.stringify(pathToFileURL(INDEX).href)};
export const greet = workflow({ name: "greet", version: "1" }, async (ctx, input) =>
  ctx.step(${JSON.stringify(stepName)}, () => { throw new Error("a replay check executes nothing"); }));
`,
      );
      return path;
    };
    // The worker test above completed a greet@1 run whose journal has step "hello".
    const same = await cairn(["check-replay", write("same.mjs", "hello")], { CAIRN_STORE: db });
    expect(same.code, same.stderr).toBe(0);
    expect(same.stdout).toMatch(/greet@1\s+completed\s+ok/);
    expect(same.stdout).toMatch(/1 run\(s\) checked against greet@1: 1 ok, 0 not\./);
    const changed = await cairn(["check-replay", write("changed.mjs", "howdy"), "--json"], {
      CAIRN_STORE: db,
    });
    expect(changed.code, changed.stderr).toBe(1);
    const results = JSON.parse(changed.stdout) as Array<{ verdict: string; detail: string }>;
    expect(results).toHaveLength(1);
    expect(results[0]?.verdict).toBe("diverged");
    expect(results[0]?.detail).toContain('"howdy"');
    expect(results[0]?.detail).toContain('"hello"');
  });

  it("a module without workflows, or one that is missing, is a clear error", async () => {
    const empty = join(dir.dir, "empty.mjs");
    writeFileSync(empty, "export const answer = 42;\n");
    expectFailure(
      await cairn(["worker", empty, "--store", db]),
      1,
      /Module ".*empty\.mjs" exports no workflows/,
    );
    expectFailure(
      await cairn(["worker", join(dir.dir, "nope.mjs"), "--store", db]),
      1,
      /Module ".*nope\.mjs" not found/,
    );
  });
});

const pgUrl = await postgresTestUrl();

describe.skipIf(!pgUrl)("cairn CLI (PostgreSQL)", () => {
  it("lists and signals runs in a PostgreSQL schema", async () => {
    const url = pgUrl!;
    const { schema, drop } = testSchema(url, "cairn_cli");
    const engine = createEngine({
      store: postgresStore(url, { schema, poolSize: 2 }),
      workflows: [approveV1],
      pollIntervalMs: 20,
    });
    try {
      await engine.start(approveV1, { n: 1 }, { id: "pg-1" });
      await until(async () => (await engine.getRun("pg-1"))?.status === "waiting", "waiting");
      const env = { CAIRN_STORE: url, CAIRN_PG_SCHEMA: schema };

      const listed = await cairn(["runs"], env);
      expect(listed.code, listed.stderr).toBe(0);
      expect(listed.stdout).toMatch(/pg-1\s+approve@1\s+waiting/);

      const sent = await cairn(["send", "pg-1", "approval", '{"ok": false}'], env);
      expect(sent.code, sent.stderr).toBe(0);
      await expect(engine.handle("pg-1").result()).resolves.toEqual({
        approved: false,
        version: "1",
      });

      const shown = await cairn(["show", "pg-1", "--store", url, "--schema", schema], {});
      expect(shown.stdout).toMatch(/status\s+completed/);
    } finally {
      await engine.close();
      await drop();
    }
  });
});
