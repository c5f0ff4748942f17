// `node --cpu-prof --import tsx bench/profile-agent.ts [runs] [--memory] [--steps=N] [--at-once=K]`:
// the workload a CPU profile of the per-step cost looks at: 20-step runs on SQLite, one after
// another through engine.start(...).result() (--at-once=K: K runs in flight at a time, as the
// bench's "32 runs at once"). --memory uses an in-memory database, so the profile shows the
// JavaScript around each commit instead of the fsync. Summarize the profile with
// bench/profile-summary.ts.

import { cairn } from "./cairn.js";
import { tempDir } from "./lib.js";
import { expectedSum, loop } from "./workflows.js";

const { createEngine, sqliteStore } = cairn;

const args = process.argv.slice(2);
const runs = Number(args.find((a) => !a.startsWith("--")) ?? 300);
const memory = args.includes("--memory");
const steps = Number(args.find((a) => a.startsWith("--steps="))?.slice(8) ?? 20);
const atOnce = Number(args.find((a) => a.startsWith("--at-once="))?.slice(10) ?? 1);
const tmp = tempDir();
const store = sqliteStore(memory ? ":memory:" : `${tmp.dir}/profile.db`);
const engine = createEngine({ store, workflows: [loop], concurrency: Math.max(atOnce, 10) });
const oneRun = async () => {
  const out = await (await engine.start(loop, { steps })).result();
  if (out !== expectedSum(steps)) throw new Error(`profile: a run returned ${String(out)}`);
};
try {
  for (let i = 0; i < runs; i += atOnce) {
    await Promise.all(Array.from({ length: Math.min(atOnce, runs - i) }, oneRun));
  }
  console.log(`${runs} runs x ${steps} steps = ${runs * steps} steps, ${atOnce} at a time`);
} finally {
  await engine.close();
  tmp.cleanup();
}
