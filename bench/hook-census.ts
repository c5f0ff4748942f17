// `tsx bench/hook-census.ts [steps] [--stacks=none|call|root|body]`: the asynchronous
// resources one run makes (20 steps by default, started and awaited one after another on
// an in-memory SQLite store, after a warm-up), by type and by the call-scope.ts scope they
// are made in: "none" (cairn's own work), "root"/"call" (the workflow code's: late-work.ts
// is told of each), "body" (a step body). Each costs the async hook (call-scope.ts) once.
// --stacks=SCOPE prints where the resources of that scope are made, most frequent first.
// Counts, not times: they hold on a loaded machine.

import { createHook } from "node:async_hooks";
import { cairn } from "./cairn.js";
import { expectedSum, loop } from "./workflows.js";

const { createEngine, sqliteStore } = cairn;
const callScope: typeof import("../src/workflow/call-scope.js") = await import(
  `${process.env.CAIRN_BENCH_SOURCE === "1" ? "../src" : "../dist"}/workflow/call-scope.js`
);
const args = process.argv.slice(2);
const steps = Number(args.find((a) => !a.startsWith("--")) ?? 20);
const stacksOf = args.find((a) => a.startsWith("--stacks="))?.slice(9);
const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [loop], concurrency: 10 });
const counts = new Map<string, number>();
const stacks = new Map<string, number>();
let on = false;
const hook = createHook({
  init(_id, type) {
    if (!on) return;
    const s = callScope.captureScope() as object | undefined;
    const where = s === undefined ? "none" : "bodyOf" in s ? "body" : "root" in s ? "root" : "call";
    const k = `${type}/${where}`;
    counts.set(k, (counts.get(k) ?? 0) + 1);
    if (stacksOf === where) {
      const at = (new Error().stack ?? "")
        .split("\n")
        .slice(2, 7)
        .map((l) => l.trim());
      const key = at.join(" < ");
      stacks.set(key, (stacks.get(key) ?? 0) + 1);
    }
  },
});
const runs = 200;
try {
  hook.enable();
  for (let i = 0; i < 50; i++) await (await engine.start(loop, { steps })).result();
  on = true;
  for (let i = 0; i < runs; i++) {
    const r = await (await engine.start(loop, { steps })).result();
    if (r !== expectedSum(steps)) throw new Error(`hook-census: a run returned ${String(r)}`);
  }
  on = false;
  console.log(`resources per run of ${steps} steps, by type/scope:`);
  for (const [k, v] of [...counts].sort((a, b) => b[1] - a[1])) {
    console.log(`${(v / runs).toFixed(2).padStart(8)}  ${k}`);
  }
  for (const [k, v] of [...stacks].sort((a, b) => b[1] - a[1]).slice(0, 25)) {
    console.log(`${(v / runs).toFixed(2).padStart(8)}  ${k}`);
  }
} finally {
  hook.disable();
  await engine.close();
}
