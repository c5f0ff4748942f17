// `tsx bench/pg-journal-read.ts <postgres url> [reps]`: the client CPU of loadJournal on a
// run of 1,000 recorded steps against that of the resume bench's raw floor (`SELECT *` of
// its step rows, as objects), taken alternately `reps` times (200 by default) after 20 of
// each to warm up; printed: the medians and means of process.cpuUsage per read, their
// ratio, and the wall-time medians. CPU time holds on a loaded machine far better than wall
// time (issue 13: resume within 2x reading the rows raw). The runs are those
// bench/profile-resume.ts prepares (schema CAIRN_PG_SCHEMA, default cairn_profile_resume):
//   npx tsx bench/profile-resume.ts prepare postgres://... 5
//   npx tsx bench/pg-journal-read.ts postgres://...

import pg from "pg";
import { cairn, cairnPostgres } from "./cairn.js";

const [url, repsArg] = process.argv.slice(2);
if (url === undefined) throw new Error("usage: pg-journal-read.ts <postgres url> [reps]");
const reps = Number(repsArg ?? 200);
const schema = process.env.CAIRN_PG_SCHEMA || "cairn_profile_resume";
const store = cairnPostgres.postgresStore(url, { schema });
await store.open({ clock: cairn.realClock });
const raw = new pg.Client({ connectionString: url });
await raw.connect();
try {
  const found = await raw.query<{ run_id: string }>(
    `SELECT run_id FROM "${schema}".steps GROUP BY run_id HAVING count(*) >= 1000 LIMIT 1`,
  );
  const id = found.rows[0]?.run_id;
  if (id === undefined) {
    throw new Error(`no run of 1,000 steps in schema "${schema}": run profile-resume.ts prepare`);
  }
  const sql = `SELECT * FROM "${schema}".steps WHERE run_id = $1 AND seq < $2 ORDER BY seq`;
  const cpu = () => {
    const u = process.cpuUsage();
    return u.user + u.system;
  };
  const load = { cpu: [] as number[], ms: [] as number[] };
  const floor = { cpu: [] as number[], ms: [] as number[] };
  for (let i = 0; i < reps + 20; i++) {
    let c0 = cpu();
    let t0 = performance.now();
    const journal = await store.loadJournal(id);
    const loadCpu = cpu() - c0;
    const loadMs = performance.now() - t0;
    if (journal.steps.length < 1000) throw new Error(`"${id}" has ${journal.steps.length} steps`);
    c0 = cpu();
    t0 = performance.now();
    const rows = await raw.query(sql, [id, 1000]);
    const rawCpu = cpu() - c0;
    const rawMs = performance.now() - t0;
    if (rows.rowCount !== 1000) throw new Error(`"${id}" has ${rows.rowCount} rows`);
    if (i < 20) continue;
    load.cpu.push(loadCpu);
    load.ms.push(loadMs);
    floor.cpu.push(rawCpu);
    floor.ms.push(rawMs);
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  console.log(
    `${reps} reads of 1,000 steps: loadJournal CPU median ${median(load.cpu)} us (mean ` +
      `${mean(load.cpu).toFixed(0)}), raw SELECT ${median(floor.cpu)} us (mean ` +
      `${mean(floor.cpu).toFixed(0)}): ${(median(load.cpu) / median(floor.cpu)).toFixed(2)}x; ` +
      `wall medians ${median(load.ms).toFixed(2)} vs ${median(floor.ms).toFixed(2)} ms`,
  );
} finally {
  await raw.end();
  await store.close();
}
