// Torture tests note what they did (kills, zombie cycles, backend terminations, server
// restarts, runs) here; test/helpers/torture-summary.ts prints the totals once the whole
// vitest run has finished.

import { mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Set by the summary's global setup (one directory per vitest run, so that two runs in one
 *  checkout do not mix their counts); a test run without it writes to a shared fallback. */
export function countsDir(): string {
  return process.env.CAIRN_TORTURE_COUNTS_DIR ?? join(tmpdir(), "cairn-torture-counts");
}

export type TortureCounts = Record<string, number>;

/** Notes the counts of one test (a later call with the same name replaces them). */
export function recordTortureCounts(name: string, counts: TortureCounts, seed?: number): void {
  const dir = countsDir();
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${name.replace(/[^A-Za-z0-9_.-]/g, "_")}.json`);
  writeFileSync(file, JSON.stringify({ name, counts, seed }));
}
