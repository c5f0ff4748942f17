// Runs `examples/demo/main.ts` as a user would (`npm run demo` is tsx on that file) and
// checks its promise: a worker SIGKILLed mid-run, a fresh worker finishing it, and no side
// effect performed twice. Also checks the demo cleans up its workers and temp dir.

import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../", import.meta.url));

function runDemo(): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", "examples/demo/main.ts"], {
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
    const timer = setTimeout(() => child.kill("SIGKILL"), 28_000);
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

it("survives kill -9 without running any side effect twice", { timeout: 30_000 }, async () => {
  const { code, stdout, stderr } = await runDemo();
  expect(code, `${stdout}\n${stderr}`).toBe(0);
  expect(stdout).toMatch(/✖ SIGKILL worker 1 \(pid \d+\)/);
  expect(stdout).toMatch(/↺ replayed\s+plan\b/);
  expect(stdout).toMatch(/⟲ reconciled\s+open-pr\b.*found PR #1 by its marker/);
  expect(stdout).toMatch(/✓ executed\s+notify\b/);
  expect(stdout).toMatch(/POST \/pulls\s+1\s+pull requests in the forge: 1/);
  expect(stdout).toContain("✔ no side effect ran twice");
  expect(stdout).not.toContain("FAILED");

  // Both worker processes are gone, and so is the temp dir with the journal.
  const pids = [...stdout.matchAll(/worker \d started \(pid (\d+)\)/g)].map((m) => Number(m[1]));
  expect(pids).toHaveLength(2);
  for (const pid of pids) expect(alive(pid)).toBe(false);
  const db = /journal\s+(\S+demo\.db)/.exec(stdout)?.[1];
  expect(db).toBeDefined();
  expect(existsSync(dirname(db!))).toBe(false);
});
