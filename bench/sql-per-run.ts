// `tsx bench/sql-per-run.ts [runs] [--steps=N]`: the SQLite statements one run executes (count
// per run and microseconds each, mean and median, performance.now(), by statement text), on an in-memory store, sequential runs
// after a warm-up: better-sqlite3's Statement methods wrapped to count and time them.

import { createRequire } from "node:module";
import { cairn } from "./cairn.js";
import { expectedSum, loop } from "./workflows.js";

const require = createRequire(import.meta.url);
const Database = require("better-sqlite3");
const stats = new Map<string, { n: number; us: number; all: number[] }>();
let on = false;
const proto = Database.prototype;
const origPrepare = proto.prepare;
proto.prepare = function (this: unknown, sql: string) {
  const st = origPrepare.call(this, sql);
  const text = sql.replace(/\s+/g, " ").slice(0, 90);
  for (const m of ["run", "get", "all", "iterate"] as const) {
    const f = st[m];
    st[m] = function (this: unknown, ...a: unknown[]) {
      if (!on) return f.apply(this, a);
      const t0 = performance.now();
      try {
        return f.apply(this, a);
      } finally {
        const us = (performance.now() - t0) * 1000;
        const k = `${m} ${text}`;
        const s = stats.get(k) ?? { n: 0, us: 0, all: [] };
        s.n++;
        s.us += us;
        s.all.push(us);
        stats.set(k, s);
      }
    };
  }
  return st;
};

const { createEngine, sqliteStore } = cairn;
const args = process.argv.slice(2);
const runs = Number(args.find((a) => !a.startsWith("--")) ?? 2000);
const steps = Number(args.find((a) => a.startsWith("--steps="))?.slice(8) ?? 20);
const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [loop], concurrency: 10 });
const oneRun = async () => {
  const r = await (await engine.start(loop, { steps })).result();
  if (r !== expectedSum(steps)) throw new Error(`sql-per-run: a run returned ${String(r)}`);
};
try {
  for (let i = 0; i < 300; i++) await oneRun();
  on = true;
  for (let i = 0; i < runs; i++) await oneRun();
  on = false;
  for (const [k, s] of [...stats].sort((a, b) => b[1].us - a[1].us)) {
    const med = s.all.sort((a, b) => a - b)[s.all.length >> 1] ?? 0;
    console.log(
      `${(s.n / runs).toFixed(2).padStart(6)}/run mean ${(s.us / s.n).toFixed(1).padStart(6)} us, median ${med.toFixed(1).padStart(5)} us  ${k}`,
    );
  }
} finally {
  await engine.close();
}
