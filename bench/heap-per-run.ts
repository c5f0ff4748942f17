// `node --expose-gc --min-semi-space-size=128 --max-semi-space-size=128 --import tsx
// bench/heap-per-run.ts [runs] [--steps=N]`: the heap one run allocates (bytes), counted, not
// timed: runs started and awaited one after another on an in-memory SQLite store, after a
// warm-up, with a young generation large enough that no collection runs inside the measured
// batch (a round that saw one is measured again). Also what stays allocated after a full
// collection (a leak shows there), and the Maps and Sets made per run.

import { PerformanceObserver } from "node:perf_hooks";
import { cairn } from "./cairn.js";
import { expectedSum, loop } from "./workflows.js";

const { createEngine, sqliteStore } = cairn;
const args = process.argv.slice(2);
const runs = Number(args.find((a) => !a.startsWith("--")) ?? 500);
const steps = Number(args.find((a) => a.startsWith("--steps="))?.slice(8) ?? 0);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error("heap-per-run: run node with --expose-gc");
let collections = 0;
new PerformanceObserver((list) => {
  collections += list.getEntries().length;
}).observe({ entryTypes: ["gc"] });
const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [loop], concurrency: 10 });
const oneRun = async () => {
  const out = await (await engine.start(loop, { steps })).result();
  if (out !== expectedSum(steps)) throw new Error(`heap-per-run: a run returned ${String(out)}`);
};
const settle = () => new Promise((r) => setTimeout(r, 20));
try {
  for (let i = 0; i < 300; i++) await oneRun();
  const lines: string[] = [];
  for (let round = 0, measured = 0; measured < 3 && round < 20; round++) {
    gc();
    await settle();
    gc();
    await settle();
    const c0 = collections;
    const h0 = process.memoryUsage().heapUsed;
    for (let i = 0; i < runs; i++) await oneRun();
    const h1 = process.memoryUsage().heapUsed;
    await settle();
    if (collections !== c0) continue;
    gc();
    await settle();
    const h2 = process.memoryUsage().heapUsed;
    measured++;
    lines.push(
      `${steps}-step run: ${((h1 - h0) / runs / 1024).toFixed(2)} KB allocated, ${((h2 - h0) / runs).toFixed(0)} B kept`,
    );
  }
  console.log(
    lines.length > 0
      ? lines.join("\n")
      : "heap-per-run: a collection ran in every round: raise the semi-space",
  );
} finally {
  await engine.close();
}
