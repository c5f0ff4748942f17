// `npm run demo`: a coding agent (the AI SDK's generateText over cairn/ai, with a scripted
// model) fixes a failing test in a git repository, and everything that can go wrong on the
// way is made to happen:
//
// 1. Worker 1 is SIGKILLed at the worst moment: its edit is recorded, the test run has not
//    happened. The repository lived on worker 1's disk.
// 2. Worker 2 starts on "another machine": its workspace directory is empty. It replays
//    the recorded model calls and tools (none runs again), gets the edited repository back
//    from the store byte for byte, runs the tests (they fail), fixes, tests, commits and
//    opens a pull request (an effect: the forge has no idempotency keys).
// 3. The run asks for approval to merge and waits holding no lease; a person approves with
//    the cairn CLI, in another process. Worker 2 merges.
// 4. The report: each call executed or replayed by each worker, each side effect counted
//    where it happened, tokens and dollars per call from the run's journal. The store is
//    left behind for `cairn show`.
//
// Offline and deterministic; a few seconds.

import { existsSync, mkdirSync, mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createEngine, type Engine, realClock, sqliteStore } from "../../src/index.js";
import type { Store } from "../../src/store-api.js";
import { type FakeForge, startFakeForge } from "../../src/testing/fake-forge.js";
import { RUN_ID } from "./agent.js";
import type { DemoEvent } from "./ledger.js";
import { bold, count, cyan, dim, pad, red, say, yellow } from "./output.js";
import { createUpstream, differences, fingerprint, runTests } from "./repo.js";
import { report } from "./report.js";
import type { WorkerConfig } from "./worker.js";
import { killAll, runCli, spawnWorker, type WorkerProcess, within } from "./workers.js";

const PHASE_MS = 45_000;
const KEY_WIDTH = 34;
const COMMENT = "Tests pass; ship it";

/** What the story found out on its way, for the report. */
export interface Story {
  workers: [WorkerProcess, WorkerProcess];
  /** The call worker 1 was killed in. */
  killedIn: string;
  /** Keys recorded when worker 1 died. */
  recordedAtKill: string[];
  /** The repository directories of the two machines. */
  repos: [string, string];
  /** Entries of worker 2's repository before its first test run that differ from worker
   *  1's at the kill (none: restored byte for byte), and how many entries it had. */
  restore: { differing: string[]; entries: number };
  /** The run while it waited for the approval. */
  waiting: { status: string; leaseOwner: string | null; worker2Alive: boolean };
  cli: { args: string[]; code: number | null; stdout: string; stderr: string };
  started: number;
}

/** The live log of worker `n` (paths shown relative to the demo's directory). */
function printer(n: 1 | 2, dir: string, root: string, empty: boolean): (e: DemoEvent) => void {
  const short = (s: string) => s.replaceAll(`${dir}/`, "");
  return (e) => {
    if (e.type === "effect") {
      const tokens = e.line.tokens ? dim(`  ${count(e.line.tokens)} tokens`) : "";
      const detail = short(e.line.detail);
      say(
        `  ${dim("│")} ${pad(e.line.key, KEY_WIDTH)} ${e.line.kind === "lookup" ? yellow(detail) : detail}${tokens}`,
      );
    } else if (e.type === "hold") {
      say(`  ${dim("│")} ${pad(e.key, KEY_WIDTH)} ${yellow("about to run the tests …")}`);
    } else if (e.type === "worker") {
      say(
        `${bold(`▶ worker ${n}`)} (pid ${e.pid}) on machine-${n}: its workspaces in ${short(root)}/, ${empty ? "empty" : "NOT EMPTY"}`,
      );
    }
  };
}

async function main(dir: string): Promise<string[]> {
  const started = Date.now();
  const db = join(dir, "cairn.db");
  const ledger = join(dir, "side-effects.jsonl");
  const upstream = join(dir, "forge", "slugify");
  const roots = [join(dir, "machine-1"), join(dir, "machine-2")] as const;
  const repos: [string, string] = [join(roots[0], RUN_ID, "repo"), join(roots[1], RUN_ID, "repo")];
  mkdirSync(upstream, { recursive: true });
  await createUpstream(upstream);
  const before = await runTests(upstream);

  const forge: FakeForge = await startFakeForge();
  let client: Engine | undefined;
  let store: Store | undefined;
  try {
    // A client engine (worker: false) and the raw store only read; they execute nothing.
    client = createEngine({ store: sqliteStore(db), worker: false });
    store = sqliteStore(db);
    await store.open({ clock: realClock });

    say(bold("cairn demo: a coding agent fixes a failing test through kill -9, a move to"));
    say(bold("another machine, and a wait for approval"));
    say();
    say(`  ${dim("demo dir  ")}  ${dir}/ ${dim("(paths below are relative to it)")}`);
    say(
      `  ${dim("repository")}  forge/slugify: git, issue #42, node --test: ${before.passed} passed, ${before.failed} failed`,
    );
    say(`  ${dim("forge     ")}  ${forge.url} ${dim("(fake pull requests, no idempotency keys)")}`);
    say(`  ${dim("store     ")}  cairn.db ${dim("(SQLite)")}`);
    say(
      `  ${dim("agent     ")}  AI SDK generateText + cairn/ai, a scripted model; its repository is a workspace`,
    );
    say();

    const config = (n: 1 | 2): WorkerConfig => ({
      worker: n,
      db,
      root: roots[n - 1] as string,
      forgeUrl: forge.url,
      ledger,
      upstream,
      holdAtTests: n === 1,
    });

    // ---- worker 1, killed as it starts the test run ---------------------------------
    let hold: ((key: string) => void) | undefined;
    const held = new Promise<string>((resolve) => {
      hold = resolve;
    });
    const show1 = printer(1, dir, roots[0], isEmpty(roots[0]));
    const worker1 = spawnWorker(config(1), (e) => {
      show1(e);
      if (e.type === "hold") hold?.(e.key);
    });
    const killedIn = await within(
      Promise.race([
        held,
        worker1.closed.then((x) => {
          throw new Error(`worker 1 exited (code ${x.code}) before its first test run`);
        }),
      ]),
      PHASE_MS,
      "worker 1's first test run",
    ).catch((err: Error) => {
      printStderr(worker1);
      throw err;
    });
    worker1.child.kill("SIGKILL");
    const exit1 = await worker1.closed;
    if (exit1.signal !== "SIGKILL")
      return [`worker 1 ended with ${JSON.stringify(exit1)}, not SIGKILL`];
    const atKill = fingerprint(repos[0]);
    const recordedAtKill = (await client.getSteps(RUN_ID))
      .filter((s) => s.status === "completed")
      .map((s) => s.key);
    const lastEdit = [...recordedAtKill].reverse().find((k) => k.startsWith("tool:edit_file:"));
    say(`${red(bold(`✖ kill -9 worker 1 (pid ${worker1.pid})`))} as it starts the test run`);
    say(
      `  ${dim("recorded:")} ${recordedAtKill.length} calls, the last edit (${lastEdit ?? "none!"}) with its workspace checkpoint`,
    );
    say(`  ${dim("not recorded:")} ${killedIn}. Machine-1's disk is not used again.`);
    say();

    // ---- worker 2, on another machine ----------------------------------------------
    const emptyBefore = isEmpty(roots[1]);
    let firstTree: Map<string, string> | undefined;
    const show2 = printer(2, dir, roots[1], emptyBefore);
    let announced = false;
    const worker2 = spawnWorker(config(2), (e) => {
      if (e.type === "tree" && !firstTree) {
        firstTree = new Map(e.files);
        const differing = differences(atKill, firstTree);
        say(
          `  ${dim("│")} ${cyan(`replayed the ${recordedAtKill.length} recorded calls: no model call, no tool ran again`)}`,
        );
        say(
          `  ${dim("│")} ${cyan(
            differing.length === 0
              ? `restored the workspace from the store: ${firstTree.size} entries, identical byte for byte to machine-1's (.git too)`
              : `restored the workspace, but ${differing.length} path(s) differ from machine-1's: ${differing.slice(0, 3).join(", ")}`,
          )}`,
        );
        announced = true;
      }
      if (e.type === "effect" && !announced) {
        say(`  ${dim("│")} ${red("executed before its first test run (nothing should):")}`);
        announced = true;
      }
      show2(e);
    });

    // ---- the approval, answered from outside while nobody holds the run ---------------
    const waiting = await within(
      waitForApproval(client, store, worker2),
      PHASE_MS,
      "the run's wait for approval",
    ).catch((err: Error) => {
      printStderr(worker2);
      throw err;
    });
    const worker2Alive = worker2.child.exitCode === null && worker2.child.signalCode === null;
    say();
    say(
      `${yellow(bold('⏸ waiting for approval "merge"'))}: run ${waiting.status}, lease owner ${waiting.leaseOwner ?? "none"};`,
    );
    say(
      `  worker 2 (pid ${worker2.pid}) is ${worker2Alive ? "alive, idle" : "gone"} and holds nothing`,
    );
    const args = ["approve", RUN_ID, "merge", "--comment", COMMENT, "--store", `sqlite:${db}`];
    say(
      `${bold("$")} cairn approve ${RUN_ID} merge --comment "${COMMENT}" --store sqlite:cairn.db  ${dim("(src/cli/main.ts, in its own process)")}`,
    );
    const cli = await within(runCli(args), PHASE_MS, "cairn approve");
    for (const line of cli.stdout.trim().split("\n").slice(0, 1)) say(`  ${dim(line)}`);
    if (cli.code !== 0) {
      say(red(cli.stderr.trim()));
      return [`cairn approve exited with code ${cli.code}`];
    }
    const exit2 = await within(worker2.closed, PHASE_MS, "worker 2's finish");
    if (exit2.code !== 0) {
      printStderr(worker2);
      return [`worker 2 failed (exit code ${exit2.code})`];
    }
    say();

    const restore = {
      differing: firstTree ? differences(atKill, firstTree) : ["(worker 2 ran no test)"],
      entries: firstTree?.size ?? 0,
    };
    const story: Story = {
      workers: [worker1, worker2],
      killedIn,
      recordedAtKill,
      repos,
      restore,
      waiting: { ...waiting, worker2Alive },
      cli: { args, ...cli },
      started,
    };
    const problems = await report(story, client, forge, ledger);
    if (!emptyBefore) problems.push(`machine-2's directory ${roots[1]} was not empty at its start`);
    return problems;
  } finally {
    killAll();
    await client?.close();
    await store?.close();
    await forge.close();
  }
}

/** Waits until the run waits for its approval, then reads its lease from the store. */
async function waitForApproval(
  client: Engine,
  store: Store,
  worker2: WorkerProcess,
): Promise<{ status: string; leaseOwner: string | null }> {
  for (;;) {
    if (worker2.child.exitCode !== null || worker2.child.signalCode !== null) {
      throw new Error(`worker 2 exited (code ${worker2.child.exitCode}) before the approval`);
    }
    const run = await store.getRun(RUN_ID);
    if (run?.status === "waiting") {
      const pending = (await client.listApprovals(RUN_ID)).some(
        (a) => a.name === "merge" && a.status === "pending",
      );
      if (pending) return { status: run.status, leaseOwner: run.leaseOwner };
    }
    if (run?.status === "completed" || run?.status === "failed") {
      throw new Error(`the run is ${run.status} (${run.reason ?? ""}), not waiting for approval`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** `s` as one word of a POSIX shell command line. */
function shellWord(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", "'\\''")}'`;
}

function isEmpty(dir: string): boolean {
  return !existsSync(dir) || readdirSync(dir).length === 0;
}

function printStderr(w: WorkerProcess): void {
  for (const line of w.stderr.slice(-20)) say(red(`  │ ${line}`));
}

// ---- process lifecycle ----------------------------------------------------------------

const dir = mkdtempSync(join(tmpdir(), "cairn-demo-"));
process.on("exit", killAll); // last line of defence: no worker outlives the demo
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
say();
say(`The store is left behind in ${dir}. Look at the run:`);
say(
  `  ${bold(`npx tsx src/cli/main.ts show ${RUN_ID} --store ${shellWord(`sqlite:${join(dir, "cairn.db")}`)}`)}`,
);
