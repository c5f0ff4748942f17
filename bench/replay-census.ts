// `tsx bench/replay-census.ts [steps] [--stacks=none|call|root|body] [--pairs=N]`: what one
// REPLAYED step costs (issue 13: resume within 2x of reading the rows raw). Runs of `steps`
// recorded steps (1,000 by default) and of none wait for an event on an in-memory SQLite
// store; each is resumed by sendEvent and replayed to its end. Printed per replayed step (the
// 1,000-step resume less the 0-step one, over the steps): the asynchronous resources made, by
// type and call-scope.ts scope (each costs the async hook once), and the process's CPU time
// (process.cpuUsage), taken in alternating pairs and given as the median of the pairs. The
// counts hold on a loaded machine; the CPU time is a guide. --stacks=SCOPE prints where the
// resources of that scope are made, most frequent first.

import { createHook } from "node:async_hooks";
import { writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { cairn } from "./cairn.js";
import { expectedSum, loop } from "./workflows.js";

const { createEngine, sqliteStore } = cairn;
const callScope: typeof import("../src/workflow/call-scope.js") = await import(
  `${process.env.CAIRN_BENCH_SOURCE === "1" ? "../src" : "../dist"}/workflow/call-scope.js`
);
const args = process.argv.slice(2);
const steps = Number(args.find((a) => !a.startsWith("--")) ?? 1000);
const stacksOf = args.find((a) => a.startsWith("--stacks="))?.slice(9);
const pairs = Number(args.find((a) => a.startsWith("--pairs="))?.slice(8) ?? 20);
const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [loop], concurrency: 50 });
const counts = new Map<string, number>();
const stacks = new Map<string, number>();
let sign = 0;
const hook = createHook({
  init(_id, type) {
    if (sign === 0) return;
    const s = callScope.captureScope() as object | undefined;
    const where = s === undefined ? "none" : "bodyOf" in s ? "body" : "root" in s ? "root" : "call";
    const k = `${type}/${where}`;
    counts.set(k, (counts.get(k) ?? 0) + sign);
    if (stacksOf === where && sign > 0) {
      const at = (new Error().stack ?? "")
        .split("\n")
        .slice(2, 7)
        .map((l) => l.trim());
      const key = at.join(" < ");
      stacks.set(key, (stacks.get(key) ?? 0) + 1);
    }
  },
});
const cpu = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

async function waiting(n: number, count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) ids.push((await engine.start(loop, { steps: n, wait: true })).id);
  for (const id of ids) {
    while ((await engine.getRun(id))?.status !== "waiting") {
      await new Promise((r) => setTimeout(r, 5));
    }
  }
  return ids;
}

/** Resumes `id` (sign: +1 counted as the long run, -1 as the empty one); its CPU in us. */
async function resume(id: string, n: number, s: number): Promise<number> {
  sign = s;
  const c0 = cpu();
  await engine.sendEvent(id, "go", 1);
  const out = await engine.handle(id).result();
  const used = cpu() - c0;
  sign = 0;
  if (out !== expectedSum(n, 1)) throw new Error(`replay-census: a run returned ${String(out)}`);
  return used;
}

try {
  const warm = [...(await waiting(steps, 5)), ...(await waiting(0, 5))];
  for (const [i, id] of warm.entries()) await resume(id, i < 5 ? steps : 0, 0);
  // CPU first, without the census's own hook (which costs more than what it counts).
  const perStep: number[] = [];
  {
    const long = await waiting(steps, pairs);
    const empty = await waiting(0, pairs);
    // PROFILE=OUT.cpuprofile: a CPU profile of the long resumes (sampled every 50 us).
    const profile = process.env.PROFILE;
    const session = profile ? new Session() : undefined;
    if (session) {
      session.connect();
      await session.post("Profiler.enable");
      await session.post("Profiler.setSamplingInterval", { interval: 50 });
    }
    for (let i = 0; i < pairs; i++) {
      const a = await resume(long[i]!, steps, 0);
      const b = await resume(empty[i]!, 0, 0);
      perStep.push((a - b) / steps);
    }
    if (session && profile) {
      const runs = await waiting(steps, pairs);
      await session.post("Profiler.start");
      for (const id of runs) await resume(id, steps, 0);
      const { profile: p } = await session.post("Profiler.stop");
      writeFileSync(profile, JSON.stringify(p));
      console.log(`profile of ${pairs} resumes (${pairs * steps} replayed steps) in ${profile}`);
    }
  }
  const long = await waiting(steps, 3);
  const empty = await waiting(0, 3);
  hook.enable();
  for (let i = 0; i < 3; i++) {
    await resume(long[i]!, steps, 1);
    await resume(empty[i]!, 0, -1);
  }
  hook.disable();
  perStep.sort((x, y) => x - y);
  console.log(`per replayed step (resumes of ${steps} steps less resumes of 0):`);
  console.log(
    `  CPU median ${perStep[pairs >> 1]!.toFixed(2)} us of ${pairs} pairs (quartiles ${perStep[pairs >> 2]!.toFixed(2)}, ${perStep[(3 * pairs) >> 2]!.toFixed(2)})`,
  );
  for (const [k, v] of [...counts].sort((a, b) => b[1] - a[1])) {
    if (Math.abs(v) / 3 / steps >= 0.005) {
      console.log(`${(v / 3 / steps).toFixed(2).padStart(8)}  ${k}`);
    }
  }
  for (const [k, v] of [...stacks].sort((a, b) => b[1] - a[1]).slice(0, 25)) {
    console.log(`${(v / 3 / steps).toFixed(2).padStart(8)}  ${k}`);
  }
} finally {
  hook.disable();
  await engine.close();
}
