// The workload a CPU profile of resume looks at: runs of 1,000 recorded steps waiting for an
// event, each resumed by sendEvent and replayed to its end, one after another. Two
// processes, so that the profile holds the resumes only:
//   npx tsx bench/profile-resume.ts prepare /tmp/resume.db [runs]
//   node --cpu-prof --import tsx bench/profile-resume.ts resume /tmp/resume.db
// The second prints the median time from sendEvent to result() and the median CPU time
// of the process over it (process.cpuUsage: on a machine other work loads, wall time swings
// with the scheduler, CPU time far less); it consumes the runs: prepare again before the next. bench/profile-summary.ts with runs x 1,000 as the step
// count gives the cost per replayed call.

import { cairn } from "./cairn.js";
import { expectedSum, loop } from "./workflows.js";

const { createEngine, sqliteStore } = cairn;

const [mode, path, count] = process.argv.slice(2);
if ((mode !== "prepare" && mode !== "resume") || path === undefined) {
  throw new Error("usage: profile-resume.ts prepare|resume <db path> [runs]");
}
const steps = 1_000;
const engine = createEngine({ store: sqliteStore(path), workflows: [loop], concurrency: 16 });
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
    const cpu = () => {
      const u = process.cpuUsage();
      return (u.user + u.system) / 1000;
    };
    for (const id of ids) {
      const t0 = performance.now();
      const c0 = cpu();
      await engine.sendEvent(id, "go", 1);
      const out = await engine.handle(id).result();
      cpuMs.push(cpu() - c0);
      ms.push(performance.now() - t0);
      if (out !== expectedSum(steps, 1)) throw new Error(`profile: a run returned ${String(out)}`);
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]?.toFixed(2);
    console.log(
      `${ids.length} resumes of ${steps} steps; sendEvent -> result() median ${median(ms)} ms, ` +
        `CPU ${median(cpuMs)} ms`,
    );
  }
} finally {
  await engine.close();
}
