// `tsx bench/profile-window.ts OUT.cpuprofile [runs] [--steps=N]`: a CPU profile of sequential
// runs on an in-memory SQLite store (as profile-agent.ts --memory), taken only after a warm-up
// (the inspector's Profiler started in process), so module loading and JIT warm-up stay out
// of the per-step figures. Summarize with bench/profile-summary.ts OUT runs*steps (or runs
// for 0-step runs).

import { writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { cairn } from "./cairn.js";
import { expectedSum, loop } from "./workflows.js";

const { createEngine, sqliteStore } = cairn;
const args = process.argv.slice(2);
const out = args[0];
if (out === undefined || out.startsWith("--"))
  throw new Error("usage: profile-window.ts OUT [runs] [--steps=N]");
const runs = Number(args.slice(1).find((a) => !a.startsWith("--")) ?? 2000);
const steps = Number(args.find((a) => a.startsWith("--steps="))?.slice(8) ?? 20);
const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [loop], concurrency: 10 });
const oneRun = async () => {
  const r = await (await engine.start(loop, { steps })).result();
  if (r !== expectedSum(steps)) throw new Error(`profile-window: a run returned ${String(r)}`);
};
const session = new Session();
session.connect();
try {
  for (let i = 0; i < Math.max(200, runs / 5); i++) await oneRun();
  await session.post("Profiler.enable");
  await session.post("Profiler.setSamplingInterval", { interval: 100 });
  await session.post("Profiler.start");
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  for (let i = 0; i < runs; i++) await oneRun();
  const c = process.cpuUsage(c0);
  const wall = performance.now() - t0;
  const { profile } = await session.post("Profiler.stop");
  writeFileSync(out, JSON.stringify(profile));
  console.log(
    `${runs} runs x ${steps} steps: ${((c.user + c.system) / runs).toFixed(0)} us CPU/run, ${((wall * 1000) / runs).toFixed(0)} us wall/run`,
  );
} finally {
  session.disconnect();
  await engine.close();
}
