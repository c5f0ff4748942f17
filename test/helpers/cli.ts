// Runs the `cairn` CLI as users do: a child process (node, from the sources) in the
// repository root, with the CAIRN_* variables the CLI reads cleared unless given, so that
// a developer's own settings never reach a test.
//
// The sources are bundled once per test process (esbuild, packages left as imports) and a
// plain `node` runs the bundle: under the tsx loader every `cairn` started cost about a
// second of CPU loading src/ file by file, and the suite starts a few hundred. Commands that
// load a user's module (worker, ui, check-replay, or any argument naming a module file) run
// under tsx from the sources as before: the module imports cairn's sources itself, and one
// copy of cairn in the process is what a user has (ui also reads files beside its source).

import { spawn } from "node:child_process";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { buildSync } from "esbuild";
import { afterAll, expect } from "vitest";

export const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const MAIN = join(ROOT, "src/cli/main.ts");
/** Under node_modules, so that the bundle's package imports resolve. */
const BUNDLE_DIR = join(ROOT, "node_modules", ".cache", "cairn-cli", String(process.pid));
let bundle: string | undefined;
// Registered on import (vitest ends its workers without an "exit" event to hook).
afterAll(() => {
  if (bundle) rmSync(BUNDLE_DIR, { recursive: true, force: true });
  bundle = undefined;
});

/** Commands and arguments that make the CLI import a module of the test's. */
const LOADS_MODULES = new Set(["worker", "ui", "check-replay"]);

function needsSources(args: string[]): boolean {
  return args.some((a) => LOADS_MODULES.has(a) || /\.(c|m)?(t|j)sx?$/.test(a));
}

/** src/cli/main.ts bundled (built on first use in this process). */
function cliBundle(): string {
  if (!bundle) {
    const out = join(BUNDLE_DIR, "main.mjs");
    buildSync({
      entryPoints: [MAIN],
      bundle: true,
      packages: "external",
      platform: "node",
      format: "esm",
      target: "node20",
      outfile: out,
      logLevel: "warning",
      // main.ts finds package.json (--version) beside its source, as from the sources.
      define: { "import.meta.url": JSON.stringify(pathToFileURL(MAIN).href) },
    });
    bundle = out;
  }
  return bundle;
}

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
  const entry = needsSources(args) ? ["--import", "tsx", MAIN] : [cliBundle()];
  const child = spawn(process.execPath, [...entry, ...args], {
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
