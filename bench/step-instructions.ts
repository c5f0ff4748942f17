// `tsx bench/step-instructions.ts STEPS [RUNS]`, meant to run under callgrind, where
// instructions repeat that a loaded machine's times do not. Compiled beside dist/ (tsx under
// valgrind counts its own transform too), e.g.:
//   npx esbuild bench/step-instructions.ts bench/cairn.ts bench/workflows.ts bench/lib.ts \
//     --outdir=/tmp/b/bench --format=esm --platform=node && ln -s $PWD/dist /tmp/b/dist
//   valgrind --tool=callgrind --callgrind-out-file=/dev/null node --single-threaded \
//     /tmp/b/bench/step-instructions.js 200 20
// It warms up (100 runs of 20 steps), then starts and awaits RUNS runs (default 20) of STEPS
// steps one after another on an in-memory SQLite store. Instructions per executed step are
// the difference of two such processes' totals (STEPS=200 and STEPS=20) over RUNS x 180:
// everything else (start-up, warm-up, a run's own work) is the same in both (issue 13).

import { cairn } from "./cairn.js";
import { expectedSum, loop } from "./workflows.js";

const { createEngine, sqliteStore } = cairn;
const steps = Number(process.argv[2] ?? 20);
const runs = Number(process.argv[3] ?? 20);
// No poll and no lease renewal while it measures: under callgrind a run takes seconds, and
// each poll and renewal (by the clock, not by the steps) added instructions that differed
// by ~100 M between two processes of the same code.
const engine = createEngine({
  store: sqliteStore(":memory:"),
  workflows: [loop],
  concurrency: 4,
  pollIntervalMs: 3_600_000,
  leaseMs: 3_600_000,
});
try {
  for (let i = 0; i < 100; i++) await (await engine.start(loop, { steps: 20 })).result();
  for (let i = 0; i < runs; i++) {
    const out = await (await engine.start(loop, { steps })).result();
    if (out !== expectedSum(steps)) throw new Error(`step-instructions: a run returned ${out}`);
  }
} finally {
  await engine.close();
}
