// `tsx bench/heap-profile-window.ts [runs] [--steps=N]`: where a run's allocations come from:
// the inspector's sampling heap profiler (every 256 bytes, collected objects kept) over
// sequential runs on an in-memory SQLite store after a warm-up, summarized as bytes per run
// by allocating function (self), top 25 (TOP=N for more).

import { Session } from "node:inspector/promises";
import { cairn } from "./cairn.js";
import { expectedSum, loop } from "./workflows.js";

interface HeapNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: HeapNode[];
}

const { createEngine, sqliteStore } = cairn;
const args = process.argv.slice(2);
const runs = Number(args.find((a) => !a.startsWith("--")) ?? 2000);
const steps = Number(args.find((a) => a.startsWith("--steps="))?.slice(8) ?? 20);
const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [loop], concurrency: 10 });
const oneRun = async () => {
  const r = await (await engine.start(loop, { steps })).result();
  if (r !== expectedSum(steps)) throw new Error(`heap-profile-window: a run returned ${String(r)}`);
};
const session = new Session();
session.connect();
try {
  for (let i = 0; i < Math.max(200, runs / 5); i++) await oneRun();
  await session.post("HeapProfiler.enable");
  await session.post("HeapProfiler.startSampling", {
    samplingInterval: 256,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  for (let i = 0; i < runs; i++) await oneRun();
  const { profile } = await session.post("HeapProfiler.stopSampling");
  const self = new Map<string, number>();
  let total = 0;
  const walk = (n: HeapNode) => {
    const f = n.callFrame;
    const where = f.url
      ? `${f.url.replace(/^.*\/(src|dist|bench|node_modules)\//, "$1/")}:${f.lineNumber + 1}`
      : "";
    const name = `${f.functionName || "(anonymous)"} ${where}`.trim();
    self.set(name, (self.get(name) ?? 0) + n.selfSize);
    total += n.selfSize;
    for (const c of n.children) walk(c);
  };
  walk(profile.head as unknown as HeapNode);
  console.log(`${runs} runs x ${steps} steps: ${(total / runs / 1024).toFixed(2)} KB/run sampled`);
  for (const [name, b] of [...self]
    .sort((a, b) => b[1] - a[1])
    .slice(0, Number(process.env.TOP ?? 25))) {
    console.log(`${(b / runs).toFixed(0).padStart(8)} B/run  ${name}`);
  }
} finally {
  session.disconnect();
  await engine.close();
}
