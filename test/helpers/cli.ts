// Runs the `cairn` CLI as users do: a child process (node + tsx, from the sources) in the
// repository root, with the CAIRN_* variables the CLI reads cleared unless given, so that
// a developer's own settings never reach a test.

import { spawn } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { expect } from "vitest";

export const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const MAIN = join(ROOT, "src/cli/main.ts");

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Every environment variable the CLI reads, empty (the CLI treats empty as unset). */
const CLEARED = Object.fromEntries(
  [
    "CAIRN_STORE",
    "CAIRN_PG_SCHEMA",
    "CAIRN_DEBUG",
    "CAIRN_ENCRYPTION_KEYS",
    "CAIRN_APPROVAL_KEYS",
    "CAIRN_APPROVER",
    "CAIRN_UI_URL",
    "CAIRN_UI_TOKEN",
    "CAIRN_UI_READ_TOKEN",
  ].map((name) => [name, ""]),
);

export function startCairn(args: string[], env: Record<string, string> = {}, input?: string) {
  const child = spawn(process.execPath, ["--import", "tsx", MAIN, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...CLEARED, ...env },
    stdio: [input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
  });
  if (input !== undefined) child.stdin?.end(input);
  const output = { stdout: "", stderr: "" };
  child.stdout?.on("data", (d) => {
    output.stdout += d;
  });
  child.stderr?.on("data", (d) => {
    output.stderr += d;
  });
  const done = new Promise<CliResult>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => resolve({ code, signal, ...output }));
  });
  return { child, output, done };
}

export function cairn(
  args: string[],
  env: Record<string, string> = {},
  input?: string,
): Promise<CliResult> {
  return startCairn(args, env, input).done;
}

/** An expected failure: the given exit code, one `cairn: ...` message, no stack trace. */
export function expectFailure(res: CliResult, code: 1 | 2, message: string | RegExp): void {
  expect(res.code, res.stderr).toBe(code);
  expect(res.stdout).toBe("");
  expect(res.stderr.startsWith("cairn: ")).toBe(true);
  expect(res.stderr).toMatch(message);
  expect(res.stderr).not.toMatch(/^\s+at /m);
}
