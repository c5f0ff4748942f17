// `tsx bench/step-cpu-by-durability.ts [steps=4000] [rounds=3]`: what the same run costs the
// main thread on three stores of the same code: in memory, a file with synchronous=NORMAL (WAL
// frames written, no fsync at commit) and a file with synchronous=FULL (an fsync per commit, the
// store's default). One run of `steps` steps per store per round, rounds alternating the three;
// prints per step the wall time, the process's CPU (process.cpuUsage) and the main thread's CPU
// (/proc/self/task/<pid>/stat, 10 ms ticks: keep steps x rounds large).
//
// Why it exists (issue 13): the sequential SQLite shape sits far below the raw floor although
// the JavaScript per step, measured in memory, is a fraction of a raw commit. Measured
// 2026-12-07 on the 2-core VM: main-thread user CPU per step 28 us in memory, 28 us on NORMAL,
// 105-125 us on FULL (earlier the same day, idle: 31, 40-50, 78-100). The thread runs the same
// code on NORMAL and FULL; only the blocking fsync differs, so the likely cause is a cold
// restart after each one (caches, predictors, the vCPU's frequency; the VM has no hardware
// counters to tell which). A raw floor with almost no JavaScript between commits pays little
// of it; cairn pays it on every step.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { cairn } from "./cairn.js";
import { median, tempDir } from "./lib.js";
import { expectedSum, loop } from "./workflows.js";

const { createEngine, sqliteStore } = cairn;
const steps = Number(process.argv[2] ?? 4000);
const rounds = Number(process.argv[3] ?? 3);
const TICK_US = 10_000;

/** The main thread's user and system CPU so far, in us (clock ticks of 10 ms). */
function mainThreadCpu(): { user: number; system: number } {
  const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return { user: Number(fields[11]) * TICK_US, system: Number(fields[12]) * TICK_US };
}

type Kind = "memory" | "normal" | "full";
const kinds: Kind[] = ["memory", "normal", "full"];
const tmp = tempDir();
const engines = kinds.map((kind) => {
  const store =
    kind === "memory"
      ? sqliteStore(":memory:")
      : sqliteStore(join(tmp.dir, `${kind}.db`), { synchronous: kind });
  return createEngine({ store, workflows: [loop], concurrency: 4 });
});

async function oneRun(i: number, n: number): Promise<void> {
  const out = await (await engines[i]!.start(loop, { steps: n })).result();
  if (out !== expectedSum(n)) throw new Error(`step-cpu: a run returned ${String(out)}`);
}

const figures = kinds.map(() => ({
  wall: [] as number[],
  user: [] as number[],
  main: [] as number[],
}));
try {
  // Warm-up: the same code on every store, so no store runs colder code than another.
  for (let i = 0; i < kinds.length; i++) for (let r = 0; r < 50; r++) await oneRun(i, 20);
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < kinds.length; i++) {
      const m0 = mainThreadCpu();
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      await oneRun(i, steps);
      const wall = ((performance.now() - t0) * 1000) / steps;
      const c = process.cpuUsage(c0);
      const m1 = mainThreadCpu();
      figures[i]!.wall.push(wall);
      figures[i]!.user.push((c.user + c.system) / steps);
      figures[i]!.main.push((m1.user - m0.user) / steps);
    }
  }
  for (const [i, kind] of kinds.entries()) {
    const f = figures[i]!;
    console.log(
      `${kind.padEnd(6)} per step: wall ${median(f.wall).toFixed(1)} us, process CPU ` +
        `${median(f.user).toFixed(1)} us, main thread user ${median(f.main).toFixed(1)} us ` +
        `(rounds: ${f.main.map((x) => x.toFixed(0)).join(", ")})`,
    );
  }
} finally {
  for (const e of engines) await e.close();
  tmp.cleanup();
}
