// vitest globalSetup: clears the torture counts before the run and prints their totals
// after it (what the run's torture tests did: kills, zombie cycles, backend terminations,
// server restarts, runs), with each test's seed.

import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TortureCounts } from "./torture-counts.js";

export default function setup(): () => void {
  // Both vitest projects run this setup in the one main process: the first makes the
  // directory, and test workers (started after both) inherit it through the environment.
  process.env.CAIRN_TORTURE_COUNTS_DIR ??= mkdtempSync(join(tmpdir(), "cairn-torture-counts-"));
  const COUNTS_DIR = process.env.CAIRN_TORTURE_COUNTS_DIR;
  return () => {
    try {
      printSummary(COUNTS_DIR);
    } finally {
      // Each vitest project runs this teardown: print once, leave nothing behind.
      rmSync(COUNTS_DIR, { recursive: true, force: true });
    }
  };
}

function printSummary(dir: string): void {
  let files: string[];
  try {
    files = readdirSync(dir).filter((f) => f.endsWith(".json"));
  } catch {
    return;
  }
  if (files.length === 0) return;
  const totals: TortureCounts = {};
  const lines: string[] = [];
  for (const f of files.sort()) {
    const { name, counts, seed } = JSON.parse(readFileSync(join(dir, f), "utf8")) as {
      name: string;
      counts: TortureCounts;
      seed?: number;
    };
    for (const [k, v] of Object.entries(counts)) totals[k] = (totals[k] ?? 0) + v;
    const what = Object.entries(counts)
      .map(([k, v]) => `${k} ${v}`)
      .join(", ");
    lines.push(`  ${name}: ${what}${seed === undefined ? "" : ` (CAIRN_SEED=${seed})`}`);
  }
  const total = Object.entries(totals)
    .map(([k, v]) => `${k} ${v}`)
    .join(", ");
  console.log(`\ncairn torture totals: ${total}\n${lines.join("\n")}\n`);
}
