// `npm run demo`: cairn's core promise with a real crash. A worker process runs an agent
// workflow (plan -> edit -> test -> draft PR -> open PR -> notify) and is SIGKILLed at the
// worst moment: the forge has just created the pull request, and the worker has not
// recorded it. A fresh worker then finishes the run. Replayed steps do not run again,
// the pull request is found by reconcile instead of being opened twice, and the ledger of
// side effects proves it. Offline, deterministic, a few seconds.
//
//   npm run demo            (add `-- --keep` to keep the temp dir with the db and ledger)

import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { createEngine, type Engine, sqliteStore } from "../../src/index.js";
import { type FakeForge, startFakeForge } from "../../src/testing/fake-forge.js";
import { type LedgerLine, readLedger } from "./ledger.js";
import { seedProject } from "./project.js";
import type { WorkerConfig } from "./worker.js";
import type { DemoEvent, FixBugOutput } from "./workflow.js";
import { RUN_ID } from "./workflow.js";

const WORKER = fileURLToPath(new URL("./worker.ts", import.meta.url));
const EXPECTED_KEYS = ["plan", "edit", "edit#2", "run-tests", "write-pr", "open-pr", "notify"];
const WORKER_TIMEOUT_MS = 30_000;

// ---- terminal output --------------------------------------------------------------------

const useColor = process.stdout.isTTY === true && !("NO_COLOR" in process.env);
const paint = (code: string) => (s: string) => (useColor ? `\x1b[${code}m${s}\x1b[0m` : s);
const bold = paint("1");
const dim = paint("2");
const red = paint("31");
const green = paint("32");
const yellow = paint("33");
const cyan = paint("36");
const say = (line = "") => process.stdout.write(`${line}\n`);

const HOW: Record<string, string> = {
  executed: green("✓ executed  "),
  performed: green("✓ performed "),
  replayed: cyan("↺ replayed  "),
  reconciled: yellow("⟲ reconciled"),
  calling: yellow("→ calling   "),
};

// ---- workers ----------------------------------------------------------------------------

interface WorkerProcess {
  n: number;
  child: ChildProcess;
  events: DemoEvent[];
  /** Resolves when the process is gone and its output is read. */
  closed: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const live = new Set<ChildProcess>();

function spawnWorker(config: WorkerConfig): WorkerProcess {
  // The IPC channel is only a lifeline: a worker exits when the demo is gone.
  const child = spawn(process.execPath, ["--import", "tsx", WORKER, JSON.stringify(config)], {
    stdio: ["ignore", "pipe", "pipe", "ipc"],
  });
  live.add(child);
  const events: DemoEvent[] = [];
  const prefix = `  ${dim("│")} `;
  createInterface({ input: child.stdout! }).on("line", (line) => {
    let event: DemoEvent;
    try {
      event = JSON.parse(line) as DemoEvent;
    } catch {
      say(prefix + line);
      return;
    }
    events.push(event);
    printEvent(prefix, event);
  });
  createInterface({ input: child.stderr! }).on("line", (line) => say(prefix + red(line)));
  const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>(
    (resolve, reject) => {
      child.on("error", reject);
      child.on("close", (code, signal) => {
        live.delete(child);
        resolve({ code, signal });
      });
    },
  );
  return { n: config.worker, child, events, closed };
}

function printEvent(prefix: string, e: DemoEvent): void {
  if (e.type === "worker") {
    say(bold(`▶ worker ${e.worker} started (pid ${e.pid})`));
  } else if (e.type === "calling") {
    say(`${prefix}${HOW.calling} ${e.key.padEnd(10)} ${e.label.padEnd(30)} ${dim(e.detail)}`);
  } else if (e.type === "step") {
    const detail =
      e.how === "replayed" ? dim("from the journal; function not called") : dim(e.detail);
    say(`${prefix}${HOW[e.how]} ${e.key.padEnd(10)} ${e.label.padEnd(30)} ${detail}`);
  }
}

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

// ---- the demo ---------------------------------------------------------------------------

async function main(dir: string): Promise<string[]> {
  const started = Date.now();
  const db = join(dir, "demo.db");
  const ledgerPath = join(dir, "side-effects.jsonl");
  const workspace = join(dir, "project");
  seedProject(workspace);

  let current: WorkerProcess | undefined;
  let kill: { pid: number; pull: number } | undefined;
  const forge: FakeForge = await startFakeForge({
    // The crash: the moment the forge has created the PR, before it answers the worker.
    onCreate: async (pull) => {
      if (current?.n !== 1 || kill) return;
      kill = { pid: current.child.pid ?? 0, pull: pull.number };
      current.child.kill("SIGKILL");
      await current.closed;
    },
  });
  let client: Engine | undefined;
  try {
    // A client engine (worker: false) inspects the journal; it never executes anything.
    client = createEngine({ store: sqliteStore(db), worker: false });
    await client.listRuns();

    say(bold("cairn demo: an agent workflow survives kill -9"));
    say();
    say(
      `  ${dim("forge  ")}  ${forge.url}  ${dim("(a fake pull-request service without idempotency keys)")}`,
    );
    say(`  ${dim("journal")}  ${db}`);
    say(
      `  ${dim("run    ")}  "${RUN_ID}": plan → edit ×2 → run tests → draft PR → open PR → notify`,
    );
    say();

    const config = { db, forgeUrl: forge.url, ledger: ledgerPath, workspace };
    const worker1 = spawnWorker({ ...config, worker: 1 });
    current = worker1;
    const first = await within(worker1.closed, WORKER_TIMEOUT_MS, "worker 1's crash");
    if (!kill || first.signal !== "SIGKILL") {
      return [
        `worker 1 exited (code ${first.code}, signal ${first.signal}) before the planned kill at "open-pr"`,
      ];
    }
    say();
    say(red(bold(`✖ SIGKILL worker 1 (pid ${kill.pid})`)));
    say(`  The forge had just created PR #${kill.pull}; the worker died before it could`);
    say("  record that. No cleanup code ran, no graceful shutdown.");
    say();
    say(dim("  journal after the crash, read by a client engine (worker: false):"));
    const atCrash = await client.getSteps(RUN_ID);
    for (const s of atCrash) {
      const state =
        s.status === "completed"
          ? green("✓ completed")
          : yellow(`… ${s.status}: intent recorded, completion missing`);
      say(`    ${s.key.padEnd(10)} ${s.kind.padEnd(7)} ${state}`);
    }
    const inWindow = atCrash.find((s) => s.key === "open-pr")?.status === "started";
    if (atCrash.filter((s) => s.status === "completed").length !== 5 || !inWindow) {
      return ["the journal at the crash is not: 5 steps completed, open-pr started"];
    }
    say();

    say(dim("  starting a fresh worker: same code, same run id; it resumes the run"));
    const worker2 = spawnWorker({ ...config, worker: 2 });
    current = worker2;
    const second = await within(worker2.closed, WORKER_TIMEOUT_MS, "worker 2's finish");
    if (second.code !== 0) return [`worker 2 failed (exit code ${second.code})`];
    return await report({
      client,
      forge,
      ledger: readLedger(ledgerPath),
      workers: [worker1, worker2],
      killedPull: kill.pull,
      started,
    });
  } finally {
    for (const child of live) child.kill("SIGKILL");
    await client?.close();
    await forge.close();
  }
}

// ---- the proof --------------------------------------------------------------------------

interface Evidence {
  client: Engine;
  forge: FakeForge;
  ledger: LedgerLine[];
  workers: [WorkerProcess, WorkerProcess];
  killedPull: number;
  started: number;
}

/** Prints the step table and the side-effect counts; returns what is wrong (nothing). */
async function report(e: Evidence): Promise<string[]> {
  const problems: string[] = [];
  const run = await e.client.getRun(RUN_ID);
  const steps = await e.client.getSteps(RUN_ID);
  const done = e.workers[1].events.find((ev) => ev.type === "done");
  const output = done?.type === "done" ? (done.output as FixBugOutput) : undefined;

  say();
  if (run?.status !== "completed" || !output) {
    return [`run "${RUN_ID}" is ${run?.status ?? "missing"}, not completed`];
  }
  say(
    green(bold(`✔ run "${RUN_ID}" completed in worker 2`)) +
      `: PR #${output.pullRequest.number} ${dim(output.pullRequest.url)}, ${output.tests.passed} tests passed`,
  );
  say();

  // Step by step: what each worker did with it.
  const how = (w: WorkerProcess, key: string) => {
    const ev = w.events.find((x) => x.type === "step" && x.key === key);
    if (ev?.type === "step") return ev.how;
    const calling = w.events.some((x) => x.type === "calling" && x.key === key);
    return calling ? "killed" : "—";
  };
  const cell = (h: string) =>
    ({
      executed: green("executed"),
      performed: green("performed"),
      replayed: cyan("replayed from journal"),
      reconciled: yellow("reconciled: found by marker"),
      killed: red(`performed; killed before its record`),
    })[h] ?? dim(h);
  const pad = (s: string, n: number) => s + " ".repeat(Math.max(0, n - visible(s).length));
  say(`  ${bold(pad("step", 11))}${bold(pad("worker 1 (killed)", 38))}${bold("worker 2")}`);
  for (const s of steps) {
    say(
      `  ${pad(s.key, 11)}${pad(cell(how(e.workers[0], s.key)), 38)}${cell(how(e.workers[1], s.key))}`,
    );
  }
  const keys = steps.map((s) => s.key);
  if (keys.join() !== EXPECTED_KEYS.join()) {
    problems.push(`journal keys are ${keys.join(", ")}; expected ${EXPECTED_KEYS.join(", ")}`);
  }
  for (const s of steps) {
    if (s.status !== "completed") problems.push(`step "${s.key}" is ${s.status}`);
    const before = how(e.workers[0], s.key);
    const after = how(e.workers[1], s.key);
    if ((before === "executed" || before === "performed") && after !== "replayed") {
      problems.push(`step "${s.key}" ran in worker 1 and was not replayed in worker 2 (${after})`);
    }
  }
  if (how(e.workers[1], "open-pr") !== "reconciled") {
    problems.push(`open-pr was ${how(e.workers[1], "open-pr")} in worker 2, not reconciled`);
  }

  // Side effects, counted where they landed: the ledger file and the forge itself.
  const effects = e.ledger.filter((l) => l.kind === "effect");
  const count = (pred: (l: LedgerLine) => boolean) => effects.filter(pred).length;
  const posts = e.forge.ledger.filter((r) => r.method === "POST" && r.path === "/pulls");
  const models = effects.filter((l) => l.what === "model call");
  const paidTokens = models.reduce((sum, l) => sum + (l.tokens ?? 0), 0);
  const paidUsd = models.reduce((sum, l) => sum + (l.usd ?? 0), 0);
  const spent = run.budget.spent;
  say();
  say(dim("  side effects, counted from the ledger file and the forge:"));
  const row = (what: string, n: number, note: string) =>
    say(`    ${what.padEnd(16)}${String(n).padStart(2)}   ${dim(note)}`);
  const written = effects.filter((l) => l.what.startsWith("wrote "));
  row(
    "model calls",
    models.length,
    `${models.map((l) => l.key).join(", ")}: paid ${paidTokens} tokens, $${paidUsd.toFixed(4)}; ` +
      `the run's recorded spend: ${spent.tokens ?? 0} tokens, $${(spent.usd ?? 0).toFixed(4)}`,
  );
  row("files written", written.length, written.map((l) => l.what.slice(6)).join(", "));
  row(
    "test runs",
    count((l) => l.what === "ran node --test"),
    "node --test",
  );
  row("POST /pulls", posts.length, `pull requests in the forge: ${e.forge.pulls().length}`);
  row(
    "chat messages",
    count((l) => l.what === "posted to team chat"),
    "#team",
  );

  const perKey = new Map<string, number>();
  for (const l of effects) perKey.set(l.key, (perKey.get(l.key) ?? 0) + 1);
  for (const key of EXPECTED_KEYS) {
    const n = perKey.get(key) ?? 0;
    if (n !== 1) problems.push(`step "${key}" performed its side effect ${n} times, not once`);
  }
  if (posts.length !== 1 || e.forge.pulls().length !== 1) {
    problems.push(
      `the forge received ${posts.length} POST /pulls and holds ${e.forge.pulls().length} pull requests; expected exactly 1`,
    );
  }
  if (output.pullRequest.number !== e.killedPull) {
    problems.push(
      `the run returned PR #${output.pullRequest.number}, not the PR #${e.killedPull} created before the crash`,
    );
  }
  if (spent.tokens !== paidTokens || Math.abs((spent.usd ?? 0) - paidUsd) > 1e-9) {
    problems.push(
      `the run's recorded spend (${spent.tokens} tokens) differs from the model calls paid (${paidTokens})`,
    );
  }
  if (problems.length === 0) {
    say();
    const secs = ((Date.now() - e.started) / 1000).toFixed(1);
    say(
      green(
        bold(
          `✔ no side effect ran twice: ${steps.length} steps, 1 kill -9, 1 pull request (${secs} s)`,
        ),
      ),
    );
  }
  return problems;
}

function visible(s: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: strips ANSI colors
  return s.replace(/\x1b\[[0-9;]*m/g, "");
}

// ---- process lifecycle ------------------------------------------------------------------

const dir = mkdtempSync(join(tmpdir(), "cairn-demo-"));
const keep = process.argv.includes("--keep");

process.on("exit", () => {
  // Last line of defence (an uncaught error, Ctrl-C): no worker outlives the demo.
  for (const child of live) child.kill("SIGKILL");
  if (!keep) rmSync(dir, { recursive: true, force: true });
});
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    say(red(`\ndemo interrupted (${signal})`));
    process.exit(130);
  });
}

try {
  const problems = await main(dir);
  if (problems.length > 0) {
    say();
    say(red(bold("✖ demo FAILED:")));
    for (const p of problems) say(red(`  - ${p}`));
    process.exitCode = 1;
  }
} catch (err) {
  say();
  say(red(bold(`✖ demo FAILED: ${(err as Error).message}`)));
  process.exitCode = 1;
}
if (keep) say(dim(`\nkept ${dir} (demo.db, side-effects.jsonl, project/)`));
