// `tsx bench/pg-fence-cost.ts [statements] [url]`: what the fence of a lone step costs on
// PostgreSQL (single-step.ts), one statement at a time on one connection, as a sequential
// run writes its steps. Four INSERTs of the same step row, prepared, each its own commit:
// - lock:   cairn's, INSERT ... SELECT FROM the run's row WHERE its epoch is the writer's,
//           FOR NO KEY UPDATE (the text of single-step.ts);
// - adv:    the same without the row lock, with a shared advisory lock on the run instead
//           (NOT a correct fence, see single-step.ts: the lower bound of a fence that writes
//           no WAL);
// - nolock: the same without any lock (the read of the epoch alone; not a fence either);
// - values: INSERT ... VALUES into a table of the steps' shape (the raw floor's statement).
// For each, the server's CPU per statement (its backend's on-CPU time, Linux's
// /proc/<pid>/schedstat, from the send to the answer: a local server only) and the wall
// time, the variants interleaved statement by statement so that a loaded machine weighs on
// each alike; then, if pg_walinspect is installed in the database, the WAL records and
// bytes per statement of each (its own pass, the records of its transactions).
// The schema is one of its own, dropped at the end.

import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import pg from "pg";
import { cairn, cairnPostgres } from "./cairn.js";

const statements = Number(process.argv[2] ?? 2000);
const url =
  process.argv[3] ??
  process.env.CAIRN_TEST_POSTGRES_URL ??
  "postgres://postgres@127.0.0.1:5432/test";
const schema = `cairn_fence_${randomBytes(4).toString("hex")}`;
const t = `"${schema}"`;

const COLUMNS = `(run_id, key, generation, seq, name, kind, outcome, result, error, attempt,
    started_at, completed_at, delivery, issued_after, issued_late, reconciled)`;
const FROM_RUN = `SELECT r.id, $3::text, $4::integer, $5::integer, $6::text, $7::text, $8::text,
    $9::text, $10::text, $11::integer, $12::bigint, $13::bigint, $14::integer, $15::integer,
    $16::boolean, $17::boolean
  FROM ${t}.runs r WHERE r.id = $1::text AND r.epoch = $2::bigint`;
const VARIANTS: Record<string, { sql: string; table: string; epoch: boolean }> = {
  lock: {
    sql: `INSERT INTO ${t}.steps ${COLUMNS} ${FROM_RUN} FOR NO KEY UPDATE`,
    table: "steps",
    epoch: true,
  },
  adv: {
    sql: `INSERT INTO ${t}.steps ${COLUMNS} ${FROM_RUN}
      AND pg_advisory_xact_lock_shared(hashtextextended(r.id, 0)) IS NOT NULL`,
    table: "steps",
    epoch: true,
  },
  nolock: { sql: `INSERT INTO ${t}.steps ${COLUMNS} ${FROM_RUN}`, table: "steps", epoch: true },
  values: {
    sql: `INSERT INTO ${t}.raw_steps ${COLUMNS} VALUES ($1::text, $2::text, $3::integer,
      $4::integer, $5::text, $6::text, $7::text, $8::text, $9::text, $10::integer, $11::bigint,
      $12::bigint, $13::integer, $14::integer, $15::boolean, $16::boolean)`,
    table: "raw_steps",
    epoch: false,
  },
};
const NAMES = Object.keys(VARIANTS);

const c = new pg.Client({ connectionString: url });
let seq = 0;

/** One step row inserted by `name`: its server CPU and wall time in us. */
async function insertOne(name: string): Promise<{ cpu: number; wall: number }> {
  const v = VARIANTS[name]!;
  const n = ++seq;
  const now = Date.now();
  const values: unknown[] = ["r1", 1, `s#${n}`, 0, n, "s", "step", "ok", `[{"i":1},${n}]`];
  values.push(null, 1, now, now, null, null, false, null);
  if (!v.epoch) values.splice(1, 1);
  const ns0 = backendNs();
  const t0 = performance.now();
  const r = await c.query({ name: `fence_${name}`, text: v.sql, values });
  const wall = (performance.now() - t0) * 1000;
  const cpu = (backendNs() - ns0) / 1000;
  if (r.rowCount !== 1) throw new Error(`pg-fence-cost: ${name} inserted ${r.rowCount} rows`);
  return { cpu, wall };
}

function backendNs(): number {
  return Number(
    readFileSync(
      `/proc/${(c as unknown as { processID: number }).processID}/schedstat`,
      "utf8",
    ).split(" ")[0],
  );
}

function describe(xs: number[]): string {
  const s = xs.slice().sort((a, b) => a - b);
  const at = (f: number) => s[Math.floor(s.length * f)]!.toFixed(1);
  const mean = s.reduce((a, b) => a + b, 0) / s.length;
  return `p25 ${at(0.25)} median ${at(0.5)} p75 ${at(0.75)} mean ${mean.toFixed(1)}`;
}

/** WAL records and bytes per statement of `name`, from its own pass of `n` statements. */
async function walOf(name: string, n: number): Promise<string> {
  const table = `${t}.${VARIANTS[name]!.table}`;
  const lsn0 = (await c.query("SELECT pg_current_wal_insert_lsn() AS l")).rows[0].l;
  for (let i = 0; i < n; i++) await insertOne(name);
  const lsn1 = (await c.query("SELECT pg_current_wal_flush_lsn() AS l")).rows[0].l;
  const r = await c.query(
    `WITH w AS (SELECT * FROM pg_get_wal_records_info($1, $2)),
      mine AS (SELECT DISTINCT xid FROM w
        WHERE xid <> 0 AND block_ref LIKE '%/' || (SELECT pg_relation_filenode($3::regclass)) || ' %')
    SELECT count(*)::int AS n, sum(record_length)::int AS bytes,
        string_agg(DISTINCT resource_manager || '/' || record_type, ', ') AS kinds
      FROM w WHERE xid IN (SELECT xid FROM mine)`,
    [lsn0, lsn1, table],
  );
  const row = r.rows[0];
  return `${(row.n / n).toFixed(2)} records, ${(row.bytes / n).toFixed(0)} bytes (${row.kinds})`;
}

try {
  await c.connect();
  const store = cairnPostgres.postgresStore(url, { schema });
  await store.open({ clock: cairn.realClock });
  await store.close();
  await c.query(`CREATE TABLE ${t}.raw_steps (LIKE ${t}.steps INCLUDING ALL)`);
  await c.query(
    `INSERT INTO ${t}.runs (id, workflow, version, status, input, epoch, created_at, updated_at)
      VALUES ('r1', 'w', '1', 'running', 'null', 1, 0, 0)`,
  );
  for (let i = 0; i < 200; i++) for (const name of NAMES) await insertOne(name);
  const cpu = new Map<string, number[]>(NAMES.map((n) => [n, []]));
  const wall = new Map<string, number[]>(NAMES.map((n) => [n, []]));
  for (let i = 0; i < statements; i++) {
    for (const name of i % 2 === 0 ? NAMES : NAMES.slice().reverse()) {
      const m = await insertOne(name);
      cpu.get(name)!.push(m.cpu);
      wall.get(name)!.push(m.wall);
    }
  }
  console.log(`${statements} statements of each, interleaved; us per statement`);
  for (const name of NAMES) {
    console.log(`${name.padEnd(6)} server CPU ${describe(cpu.get(name)!)}`);
    console.log(`${"".padEnd(6)} wall       ${describe(wall.get(name)!)}`);
  }
  const walinspect = await c.query("SELECT 1 FROM pg_extension WHERE extname = 'pg_walinspect'");
  if (walinspect.rowCount === 0) {
    console.log(
      "WAL: pg_walinspect is not installed in this database (CREATE EXTENSION pg_walinspect)",
    );
  } else {
    for (const name of NAMES) console.log(`WAL ${name.padEnd(6)} ${await walOf(name, 300)}`);
  }
} finally {
  await c
    .query(`DROP SCHEMA IF EXISTS ${t} CASCADE`)
    .catch((err) => console.error(`pg-fence-cost: schema ${schema} left behind: ${String(err)}`));
  await c.end().catch(() => {});
}
