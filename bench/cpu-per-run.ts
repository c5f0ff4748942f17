// `tsx bench/cpu-per-run.ts [runs]`: CPU time (process.cpuUsage) per run of 0-step and of
// 20-step runs, started and awaited one after another on an in-memory SQLite store, after a
// warm-up; and the store calls a 0-step run makes. Counts, not wall time: the figure holds on
// a loaded machine.

import { cairn } from "./cairn.js";
import { countedStore } from "./lib.js";
import { expectedSum, loop } from "./workflows.js";

const { createEngine, sqliteStore } = cairn;
const runs = Number(process.argv[2] ?? 2000);
const store = sqliteStore(":memory:");
const calls = new Map<string, number>();
const engine = createEngine({
  store: countedStore(store, calls),
  workflows: [loop],
  concurrency: 10,
});
async function batch(n: number, steps: number): Promise<number> {
  const c0 = process.cpuUsage();
  for (let i = 0; i < n; i++) {
    const out = await (await engine.start(loop, { steps })).result();
    if (out !== expectedSum(steps)) throw new Error(`cpu-per-run: a run returned ${String(out)}`);
  }
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / n;
}
try {
  for (let i = 0; i < 3; i++) {
    await batch(runs / 4, 0);
    await batch(runs / 20, 20);
  }
  const rounds: string[] = [];
  for (let i = 0; i < 3; i++) {
    const e = await batch(runs, 0);
    calls.clear();
    await batch(100, 0);
    const perRun = [...calls].map(([v, n]) => `${v} ${n / 100}`).join(", ");
    const s = await batch(runs / 10, 20);
    rounds.push(`0-step ${e.toFixed(0)} us/run (${perRun}); 20-step ${s.toFixed(0)} us/run`);
  }
  console.log(rounds.join("\n"));
} finally {
  await engine.close();
}
