// Runs `npm run demo` as a user would, end to end, and checks what its report claims: a
// worker SIGKILLed after an edit was recorded and before the test run; a second worker in
// another, empty directory that got the edited repository back byte for byte and finished;
// one pull request and one merge; the merge approved with the CLI while no worker held the
// run; tokens and dollars per model call; and a store left behind that `cairn show` reads
// with the command the demo prints. Also checks the repositories left on both "machines".

import { spawn } from "node:child_process";
import { existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../", import.meta.url));

interface Output {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(command: string, args: string[], timeoutMs: number): Promise<Output> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: ROOT,
      env: { ...process.env, NO_COLOR: "1" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => {
      stdout += d;
    });
    child.stderr.on("data", (d) => {
      stderr += d;
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

let leftBehind: string | undefined;
afterAll(() => {
  if (leftBehind) rmSync(leftBehind, { recursive: true, force: true });
});

it("npm run demo: kill -9 after an edit, resume on another machine, approval by CLI, one PR, one merge", {
  timeout: 180_000,
}, async () => {
  const demo = await run("npm", ["run", "--silent", "demo"], 150_000);
  const out = demo.stdout;
  expect(demo.code, `${out}\n${demo.stderr}`).toBe(0);
  expect(out).not.toContain("FAILED");
  leftBehind = /The store is left behind in (.+)\. Look at the run:/.exec(out)?.[1];
  expect(leftBehind).toBeDefined();
  const dir = leftBehind as string;

  // The kill: worker 1 recorded its edit, then died as its test run started.
  expect(out).toMatch(/✖ kill -9 worker 1 \(pid \d+\) as it starts the test run/);
  expect(out).toMatch(
    /recorded: 8 calls, the last edit \(tool:edit_file:call_2a\) with its workspace checkpoint/,
  );
  expect(out).toMatch(/not recorded: tool:run_tests:call_3a\./);
  expect(out).toMatch(/^\s+tool:edit_file:call_2a\s+executed\s+replayed\s*$/m);
  expect(out).toMatch(/^\s+tool:run_tests:call_3a\s+killed\s+executed\s*$/m);

  // Worker 2: another, empty directory; the repository restored byte for byte; its first
  // test run sees worker 1's edit (one test left failing, on the trailing dash).
  expect(out).toMatch(/▶ worker 2 \(pid \d+\) on machine-2: its workspaces in machine-2\/, empty/);
  expect(out).toMatch(
    /restored the workspace from the store: \d+ entries, identical byte for byte to machine-1's/,
  );
  expect(out).toMatch(
    /tool:run_tests:call_3a\s+node --test: 3 passed, 1 failed \(expected 'hello-world', got 'hello-world-'\)/,
  );
  expect(out).toMatch(/tool:run_tests:call_5a\s+node --test: 4 passed, 0 failed/);

  // Side effects, each once: one pull request, one merge; every model call made once.
  expect(out).toMatch(/POST \/pulls\s+1\s+the forge holds 1 pull request$/m);
  expect(out).toMatch(/merges\s+1\s+POST \/pulls\/1\/merge → 200$/m);
  expect(out).toMatch(/model calls\s+8\s+3 by worker 1, 5 by worker 2$/m);
  expect(out).toMatch(/test runs\s+2\s+2 by worker 2/);

  // The approval: the CLI, in its own process, while the run held no lease.
  expect(out).toMatch(/waiting for approval "merge": run waiting, lease owner none;/);
  expect(out).toMatch(/worker 2 \(pid \d+\) is alive, idle and holds nothing/);
  expect(out).toMatch(/Approved "merge" of run "fix-issue-42"/);
  expect(out).toMatch(/^\s+merge\s+—\s+approved via cli\s*$/m);

  // Spend: tokens and dollars on each model call's line, and the run's total.
  const modelRows = out.match(
    /^\s+model:coder-1(#\d)?\s+(executed|—)\s+(executed|replayed)\s+[\d,]+\s+\$0\.\d{4}$/gm,
  );
  expect(modelRows).toHaveLength(8);
  expect(out).toMatch(/the run's spend \(budget \$1\.00\)\s+[\d,]+\s+\$0\.\d{4}$/m);
  expect(out).toContain(
    "✔ nothing ran twice; the edit came back byte for byte on another machine; the merge waited for `cairn approve`",
  );

  // No worker outlives the demo.
  const pids = [...out.matchAll(/▶ worker \d \(pid (\d+)\)/g)].map((m) => Number(m[1]));
  expect(pids).toHaveLength(2);
  for (const pid of pids) expect(alive(pid)).toBe(false);

  // What is left on the two machines: machine-1's repository stopped after the first edit;
  // machine-2's holds both, committed on the branch.
  const source = (machine: string) =>
    readFileSync(join(dir, machine, "fix-issue-42", "repo", "src", "slugify.mjs"), "utf8");
  expect(source("machine-1")).toContain('.replace(/[^a-z0-9]+/g, "-");');
  expect(source("machine-2")).toContain('.replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, "");');
  expect(
    existsSync(
      join(dir, "machine-2", "fix-issue-42", "repo", ".git", "refs", "heads", "fix", "issue-42"),
    ),
  ).toBe(true);

  // The printed `cairn show` command works on the store left behind.
  const show =
    /^\s+(npx tsx src\/cli\/main\.ts show fix-issue-42 --store '?sqlite:.+cairn\.db'?)$/m.exec(
      out,
    )?.[1];
  expect(show).toBeDefined();
  const shown = await run("sh", ["-c", show as string], 60_000);
  expect(shown.code, shown.stderr).toBe(0);
  expect(shown.stdout).toMatch(/status\s+completed/);
  expect(shown.stdout).toMatch(/Steps \(20\):/);
  expect(shown.stdout).toMatch(/tool:run_tests:call_3a attempt 1: WorkerLostError \[WORKER_LOST\]/);
  expect(shown.stdout).toMatch(/merge\s+approved/);
  expect(shown.stdout).toMatch(/answered\s+approved by .+ via cli/);
  expect(shown.stdout).toMatch(/comment\s+Tests pass; ship it/);
  expect(shown.stdout).toMatch(
    /model:coder-1#8\s+step\s+completed\s+1\s+inputTokens=\d+ outputTokens=\d+ tokens=\d+ usd=0\.\d+/,
  );
});
