// `tsx bench/sqlite-create-cost.ts [ops]`: the store's own share of a 0-step run, beside a
// raw commit. Alternates, in rounds, (a) a raw better-sqlite3 commit of one steps row (the
// floor the bench compares with), (b) store.createReleasedRun of a completed run (the one
// transaction a 0-step run makes), (c) store.createRun claimed, then (d) its releaseRun
// (the run-level commits of a run with steps). Files in a temp dir, WAL, synchronous=FULL.
// Prints per op the median wall and CPU time (process.cpuUsage, user+system) and WAL frames
// (the -wal file's growth, a reader holding a snapshot so the WAL is never restarted).
// Frames are counts; the times are only comparable within one run of this script.

import { statSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { cairn } from "./cairn.js";
import { median, tempDir } from "./lib.js";

const { sqliteStore } = cairn;
const ops = Number(process.argv[2] ?? 200);
const ROUNDS = 15;

const tmp = tempDir();
const storePath = join(tmp.dir, "store.db");
const rawPath = join(tmp.dir, "raw.db");
const store = sqliteStore(storePath);
const clock = { now: () => Date.now() };
await store.open({ clock } as Parameters<typeof store.open>[0]);

const raw = new Database(rawPath);
raw.pragma("journal_mode = WAL");
raw.pragma("synchronous = FULL");
const ddl = new Database(storePath, { readonly: true })
  .prepare(
    "SELECT sql FROM sqlite_master WHERE tbl_name = 'steps' AND sql IS NOT NULL ORDER BY type DESC",
  )
  .all() as Array<{ sql: string }>;
for (const { sql } of ddl) raw.exec(sql);
const insertStep = raw.prepare(
  `INSERT INTO steps (run_id, key, generation, seq, name, kind, outcome, result, error, spend,
     attempt, started_at, completed_at, delivery, issued_after, issued_late)
   VALUES (?, ?, 0, ?, 's', 'step', 'ok', '[{"i":1},1]', NULL, '{}', 1, ?, ?, ?, ?, 0)`,
);
const rawTx = raw.transaction((i: number) => {
  const t = Date.now();
  insertStep.run(`run-${Math.floor(i / 20)}`, `s#${i % 20}`, i % 20, t, t, i % 20, i % 20);
});

// Readers holding snapshots: the WAL files only grow, so their growth counts frames.
const holdWal = (path: string) => {
  const r = new Database(path, { readonly: true });
  r.exec("BEGIN");
  r.prepare("SELECT count(*) FROM sqlite_master").get();
  return r;
};
// The store's schema in a file of its own, written by raw better-sqlite3: the run insert's
// cost without cairn's layers (the store's facade, its group, its row mapping).
const schemaPath = join(tmp.dir, "schema.db");
const schema = new Database(schemaPath);
schema.pragma("journal_mode = WAL");
schema.pragma("synchronous = FULL");
for (const { sql } of new Database(storePath, { readonly: true })
  .prepare(
    "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY type DESC",
  )
  .all() as Array<{ sql: string }>) {
  schema.exec(sql);
}
schema.exec("INSERT INTO epoch_floor (epoch) VALUES (0)");
const insertRunRaw = schema.prepare(
  `INSERT INTO runs (id, workflow, version, status, reason, paused_for, input, output, error,
     budget_limit, budget_spent, parent_id, ready_at, wake_at, waiting_for, lease_owner,
     lease_until, epoch, generation, cancel_requested, created_at, updated_at, failed_calls,
     trace_context, handed_input_digest, crash_unjudged, held_by, held_until)
   VALUES (?, 'bench-loop', '1', 'completed', NULL, NULL, '[{"steps":1},0]', '[0]', NULL, '{}',
     '{}', NULL, NULL, NULL, '[]', NULL, NULL, (SELECT epoch FROM epoch_floor) + 1, 0, 0, ?, ?,
     '[]', NULL, NULL, 0, NULL, NULL)`,
);
const schemaTx = schema.transaction((id: string) => {
  const t = Date.now();
  insertRunRaw.run(id, t, t);
});
const readers = [holdWal(storePath), holdWal(rawPath), holdWal(schemaPath)];
const walBytes = (path: string) => statSync(`${path}-wal`).size;
const FRAME = 4096 + 24;

let seq = 0;
/** Ids in creation order, as the engine's are (time-ordered). */
let idCount = 0;
const ulidish = () => `${Date.now().toString(36)}-${(idCount++).toString(36).padStart(8, "0")}`;
const run = (id: string) => ({
  id,
  workflow: "bench-loop",
  version: "1",
  input: '[{"steps":1},0]',
  budgetLimit: {},
});
const completed = { status: "completed" as const, output: "[0]", readyAt: null };

type Op = { name: string; path: string; each: (i: number) => Promise<unknown> | unknown };
const claimed: Array<{ id: string; epoch: number }> = [];
const opsList: Op[] = [
  {
    name: "raw commit (one steps row)",
    path: rawPath,
    each: (i) => rawTx.immediate(seq * ops + i),
  },
  {
    name: "raw INSERT of a completed run (store's schema)",
    path: schemaPath,
    each: () => schemaTx.immediate(ulidish()),
  },
  {
    name: "createReleasedRun (0-step run)",
    path: storePath,
    each: () =>
      store.createReleasedRun!(
        { ...run(ulidish()), claimBy: { workerId: "w", leaseMs: 30_000 } },
        () => completed,
      ),
  },
  {
    name: "createRun claimed",
    path: storePath,
    each: async () => {
      const r = await store.createRun({
        ...run(ulidish()),
        claimBy: { workerId: "w", leaseMs: 30_000 },
      });
      claimed.push({ id: r.run.id, epoch: r.run.epoch });
    },
  },
  {
    name: "releaseRun completed (of a claimed run)",
    path: storePath,
    each: async () => {
      const c = claimed.shift()!;
      await store.releaseRun({ runId: c.id, epoch: c.epoch, ...completed });
    },
  },
];

const wall = opsList.map(() => [] as number[]);
const cpu = opsList.map(() => [] as number[]);
const frames = opsList.map(() => 0);
try {
  for (let r = 0; r < ROUNDS; r++) {
    seq = r;
    for (const [j, op] of opsList.entries()) {
      const w0 = walBytes(op.path);
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      for (let i = 0; i < ops; i++) await op.each(i);
      const t = performance.now() - t0;
      const c = process.cpuUsage(c0);
      wall[j]!.push((t * 1000) / ops);
      cpu[j]!.push((c.user + c.system) / ops);
      if (r > 0) frames[j]! += (walBytes(op.path) - w0) / FRAME;
    }
  }
  const floor = median(wall[0]!);
  for (const [j, op] of opsList.entries()) {
    console.log(
      `${op.name}: wall ${median(wall[j]!).toFixed(0)} us (${(median(wall[j]!) / floor).toFixed(2)} raw commits), ` +
        `CPU ${median(cpu[j]!).toFixed(0)} us, WAL ${(frames[j]! / ((ROUNDS - 1) * ops)).toFixed(2)} frames`,
    );
  }
} finally {
  for (const r of readers) r.close();
  raw.close();
  schema.close();
  await store.close();
  tmp.cleanup();
}
