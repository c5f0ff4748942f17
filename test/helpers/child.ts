// Spawns TypeScript fixtures as real child processes, for tests that kill, stop and restart
// workers. A fixture is bundled once per test process (esbuild, its packages left as
// imports) and each child runs the bundle in a plain `node`: starting under the tsx loader
// cost each child about a second of CPU (ai-kill alone starts 58).

import { type ChildProcess, spawn } from "node:child_process";
import { rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { buildSync } from "esbuild";
import { afterAll } from "vitest";

export const FIXTURES = fileURLToPath(new URL("../fixtures/", import.meta.url));

/** Fixtures that must run from their own files under tsx: import-root.ts reports which
 *  packages the root entry loads, which a bundle would answer for it. */
const UNBUNDLED = new Set(["import-root.ts"]);
/** Under node_modules, so that the bundles' package imports resolve. */
const BUNDLES = fileURLToPath(
  new URL(`../../node_modules/.cache/cairn-fixtures/${process.pid}/`, import.meta.url),
);
const bundles = new Map<string, string>();
// Registered on import, so on the test file that spawns (vitest ends its workers without
// an "exit" event to hook).
afterAll(() => {
  if (bundles.size > 0) rmSync(BUNDLES, { recursive: true, force: true });
  bundles.clear();
});

/** The bundle of fixture `file` (built on first use in this process). */
function bundleOf(file: string): string {
  let out = bundles.get(file);
  if (!out) {
    out = `${BUNDLES}${file.replace(/\.ts$/, ".mjs")}`;
    buildSync({
      entryPoints: [FIXTURES + file],
      bundle: true,
      packages: "external",
      platform: "node",
      format: "esm",
      target: "node20",
      outfile: out,
      logLevel: "warning",
    });
    bundles.set(file, out);
  }
  return out;
}

export interface ChildResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export function spawnFixture(
  file: string,
  args: string[],
  env: Record<string, string> = {},
): { child: ChildProcess; done: Promise<ChildResult> } {
  const entry = UNBUNDLED.has(file) ? ["--import", "tsx", FIXTURES + file] : [bundleOf(file)];
  const child = spawn(process.execPath, [...entry, ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (d) => {
    stdout += d;
  });
  child.stderr?.on("data", (d) => {
    stderr += d;
  });
  const done = new Promise<ChildResult>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
  return { child, done };
}

/** Runs async tasks with at most `limit` in flight. */
export async function pool<T>(
  items: T[],
  limit: number,
  fn: (t: T) => Promise<void>,
): Promise<void> {
  let i = 0;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (i < items.length) {
      const item = items[i++] as T;
      await fn(item);
    }
  });
  await Promise.all(workers);
}
