// The workload a CPU profile of resume looks at: runs of 1,000 recorded steps waiting for an
// event, each resumed by sendEvent and replayed to its end, one after another. Two
// processes, so that the profile holds the resumes only:
//   npx tsx bench/profile-resume.ts prepare /tmp/resume.db [runs]
//   PROFILE=/tmp/resume.cpuprofile npx tsx bench/profile-resume.ts resume /tmp/resume.db
// (PROFILE: a CPU profile of the resumes after the first 5, sampled every 100 us.)
// The store is SQLite at that path, or PostgreSQL when it is a postgres:// URL (the runs in
// schema CAIRN_PG_SCHEMA, default cairn_profile_resume; prepare drops it first).
// The second prints the median time from sendEvent to result() and the median CPU time
// of the process over it (process.cpuUsage: on a machine other work loads, wall time swings
// with the scheduler, CPU time far less), and of loadJournal alone (its wall time, and the
// process's CPU from its call to its answer: the driver's parse of the journal and the
// store's records); it consumes the runs: prepare again before the next.
// bench/profile-summary.ts with the profiled resumes x 1,000 as the step count gives the
// cost per replayed call.

import { writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import pg from "pg";
import type { Store } from "../src/index.js";
import { cairn, cairnPostgres } from "./cairn.js";
import { expectedSum, loop } from "./workflows.js";

const { createEngine, sqliteStore } = cairn;

const [mode, path, count] = process.argv.slice(2);
if ((mode !== "prepare" && mode !== "resume") || path === undefined) {
  throw new Error("usage: profile-resume.ts prepare|resume <db path | postgres url> [runs]");
}
const steps = 1_000;
const cpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
const postgres = path.startsWith("postgres://") || path.startsWith("postgresql://");
const schema = process.env.CAIRN_PG_SCHEMA || "cairn_profile_resume";
if (postgres && mode === "prepare") {
  const admin = new pg.Client({ connectionString: path });
  await admin.connect();
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
}
const loads: Array<{ ms: number; cpuMs: number }> = [];
const inner: Store = postgres ? cairnPostgres.postgresStore(path, { schema }) : sqliteStore(path);
const store = new Proxy(inner, {
  get(target, prop) {
    const value = Reflect.get(target, prop, target);
    if (typeof value !== "function") return value;
    // Called on the store itself: its methods read its private fields.
    if (prop !== "loadJournal") return value.bind(target);
    return async (...args: unknown[]) => {
      const t0 = performance.now();
      const c0 = cpu();
      const out = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
      loads.push({ ms: performance.now() - t0, cpuMs: cpu() - c0 });
      return out;
    };
  },
});
const engine = createEngine({ store, workflows: [loop], concurrency: 16 });
try {
  if (mode === "prepare") {
    const runs = Number(count ?? 40);
    const ids: string[] = [];
    for (let i = 0; i < runs; i++) ids.push((await engine.start(loop, { steps, wait: true })).id);
    for (const id of ids) {
      while ((await engine.getRun(id))?.status !== "waiting") {
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    console.log(`${runs} runs of ${steps} steps wait in ${path}`);
  } else {
    const ids = (await engine.listRuns({ status: "waiting", limit: 10_000 })).map((r) => r.id);
    const ms: number[] = [];
    const cpuMs: number[] = [];
    // PROFILE=OUT.cpuprofile: a CPU profile of the resumes after the first 5 (the inspector's
    // profiler started in process, so module loading and V8's first calls stay out of it).
    const profile = process.env.PROFILE;
    const session = profile ? new Session() : undefined;
    let profiled = 0;
    for (const [n, id] of ids.entries()) {
      if (session && n === 5) {
        session.connect();
        await session.post("Profiler.enable");
        await session.post("Profiler.setSamplingInterval", { interval: 100 });
        await session.post("Profiler.start");
      }
      if (n >= 5) profiled++;
      const t0 = performance.now();
      const c0 = cpu();
      await engine.sendEvent(id, "go", 1);
      const out = await engine.handle(id).result();
      cpuMs.push(cpu() - c0);
      ms.push(performance.now() - t0);
      if (out !== expectedSum(steps, 1)) throw new Error(`profile: a run returned ${String(out)}`);
    }
    if (session && profile) {
      const { profile: p } = await session.post("Profiler.stop");
      writeFileSync(profile, JSON.stringify(p));
      console.log(
        `profile of ${profiled} resumes (${profiled * steps} replayed steps) in ${profile}`,
      );
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]?.toFixed(2);
    console.log(
      `${ids.length} resumes of ${steps} steps; sendEvent -> result() median ${median(ms)} ms, ` +
        `CPU ${median(cpuMs)} ms; loadJournal median ${median(loads.map((l) => l.ms))} ms, ` +
        `CPU ${median(loads.map((l) => l.cpuMs))} ms`,
    );
  }
} finally {
  await engine.close();
}
