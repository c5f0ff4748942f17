// What the workers' sweep of children of canceled runs costs when there is nothing to find
// (engine/children-of-canceled.ts): one Store.listChildrenOfCanceled query, taken at worker
// start and every 10th lease renewal. Usage:
//   npx tsx bench/children-of-canceled-sweep.ts <sqlite|postgres> <canceled> <waitingChildren>
// (postgres: $CAIRN_TEST_POSTGRES_URL). Rows are copied by SQL from one run of each kind:
// `canceled` canceled runs with no child, and `waitingChildren` waiting runs, each the
// child of a waiting parent of its own.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import pg from "pg";
import { type Store, sqliteStore } from "../src/index.js";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";

const [backend = "sqlite", canceledText = "100000", childrenText = "10000"] = process.argv.slice(2);
const canceled = Number(canceledText);
const children = Number(childrenText);
const pgUrl = process.env.CAIRN_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const schema = `bench_sweep_${process.pid}`;
const dir = mkdtempSync(join(tmpdir(), "cairn-sweep-"));
const path = join(dir, "cairn.db");

const makeStore = (): Store =>
  backend === "sqlite" ? sqliteStore(path) : postgresStore(pgUrl, { schema });

/** Copies run `from` `n` times as id `<prefix><i>`, parent `<parentPrefix><i>` (or none). */
function copySql(cols: string[], table: string, from: string, prefix: string, parent?: string) {
  const pick = cols.map((c) =>
    c === "id"
      ? `'${prefix}' || g.i`
      : c === "parent_id"
        ? parent
          ? `'${parent}' || g.i`
          : "NULL"
        : c === "create_token"
          ? "NULL"
          : `r.${c}`,
  );
  return `INSERT INTO ${table} (${cols.join(", ")}) SELECT ${pick.join(", ")} FROM ${table} r, g WHERE r.id = '${from}'`;
}

async function seed(): Promise<void> {
  const store = makeStore();
  await store.open({ clock: realClock });
  const run = { workflow: "w", version: "1", input: "null", budgetLimit: {} };
  await store.createRun({ ...run, id: "c" });
  await store.requestCancel("c", "stop");
  await store.createRun({ ...run, id: "w" });
  await store.createRun({ ...run, id: "w/k", parentId: "w" });
  // The parent, then its child: each claimed and released waiting.
  for (let i = 0; i < 2; i++) {
    const [claim] = await store.claimRuns({
      workerId: "seed",
      workflows: ["w@1"],
      limit: 1,
      leaseMs: 60_000,
    });
    await store.releaseRun({
      runId: claim!.run.id,
      epoch: claim!.run.epoch,
      status: "waiting",
      readyAt: null,
      waitingFor: ["never"],
    });
  }
  await store.close();
  if (backend === "sqlite") {
    const db = new Database(path);
    const cols = (db.prepare("PRAGMA table_info(runs)").all() as Array<{ name: string }>).map(
      (c) => c.name,
    );
    const g = (n: number) =>
      `WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ${n}) `;
    db.exec(g(canceled) + copySql(cols, "runs", "c", "c"));
    db.exec(g(children) + copySql(cols, "runs", "w", "w"));
    db.exec(g(children) + copySql(cols, "runs", "w/k", "w/k", "w"));
    db.close();
    return;
  }
  const c = new pg.Client({ connectionString: pgUrl });
  await c.connect();
  const r = await c.query(
    "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'runs'",
    [schema],
  );
  const cols = r.rows.map((x: { column_name: string }) => x.column_name);
  const t = `"${schema}".runs`;
  const g = (n: number) => `WITH g(i) AS (SELECT generate_series(1, ${n})) `;
  await c.query(g(canceled) + copySql(cols, t, "c", "c"));
  await c.query(g(children) + copySql(cols, t, "w", "w"));
  await c.query(g(children) + copySql(cols, t, "w/k", "w/k", "w"));
  await c.query(`ANALYZE ${t}`);
  await c.end();
}

async function main(): Promise<void> {
  await seed();
  const store = makeStore();
  await store.open({ clock: realClock });
  const found = await store.listChildrenOfCanceled!({ limit: 100 });
  const rounds = 20;
  const t0 = performance.now();
  for (let i = 0; i < rounds; i++) await store.listChildrenOfCanceled!({ limit: 100 });
  const ms = (performance.now() - t0) / rounds;
  await store.close();
  console.log(
    JSON.stringify({ backend, canceled, waitingChildren: children, found: found.length, ms }),
  );
}

try {
  await main();
} finally {
  rmSync(dir, { recursive: true, force: true });
  if (backend === "postgres") {
    const c = new pg.Client({ connectionString: pgUrl });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await c.end();
  }
}
