// Issue 13, step 1: a standalone experiment, not wired into the store. Would a SQLite writer
// on a worker thread (its own better-sqlite3 connection) let JavaScript overlap the fsync?
// P producers each spend X us of JavaScript per record, then await the durability of that
// record. Records are group-committed as the engine's Committer does (what arrives in one
// turn goes in one transaction; one batch in flight; the next gathers meanwhile), by
//   (a) "main":   a BEGIN IMMEDIATE transaction on the main thread (the store today), or
//   (b) "thread": the same transaction on a worker thread, answered by a message; the main
//                 thread keeps running producers while the thread inserts and fsyncs.
// Same pragmas as the store (WAL, synchronous=FULL); each transaction checks each record's
// run epoch first, as appendRecords' fence does. Rounds interleave (a), (b) and the raw floor
// (one row per transaction, back to back, no JavaScript) so a loaded machine hits all alike.
//
// Besides steps/s it prints CPU per step, of the main thread (its critical path once the fsync
// overlaps) and of the process: on a loaded machine wall time flatters the thread (below).
//
// Found (2026-12-07, 2 cores at load 16-26, raw commits 200-400/s): thread/main steps/s per
// round 0.70-1.80 at X=130 us (17 rounds, median 1.09) and 0.68-1.92 at X=30 us (22 rounds,
// median 1.15): short of the 20% that would justify a writer thread. Main-thread CPU per step
// fell ~10% at X=130 (169-217 -> 153-202 us) and ~30% at X=30 (37-58 -> 25-34 us), process
// CPU per step stayed about the same: the thread moves the commit's CPU, the hop adds its
// own. With one producer a thread only adds a hop (~20-30 us of CPU per step with the fsync
// off), yet won on wall time (2-5x, even beyond the raw floor): a thread that sleeps on each
// hop is given the CPU first when it wakes, which a loaded machine rewards and an idle one
// would not.
//
//   [WT_SYNC=OFF] npx tsx bench/writer-thread-experiment.ts [producers=32] [records=200] [jsUs=130] [rounds=5]

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";
import Database from "better-sqlite3";
import { fmt, median, now, tempDir } from "./lib.js";

/** The store's FULL by default; WT_SYNC=OFF takes the fsync away, leaving what the thread's
 *  hop itself costs (the sequential shape's question). */
const SYNCHRONOUS = process.env.WT_SYNC === "OFF" ? "OFF" : "FULL";

type Row = [runId: string, seq: number, name: string, output: string, createdAt: number];

const DDL = [
  "CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, epoch INTEGER NOT NULL)",
  `CREATE TABLE IF NOT EXISTS steps (run_id TEXT NOT NULL, seq INTEGER NOT NULL, name TEXT NOT NULL,
     output TEXT, created_at INTEGER NOT NULL, PRIMARY KEY (run_id, seq))`,
];

/** The writer's transaction, as source text: the thread and the main thread run the same code. */
const WRITER_SOURCE = `
function openWriter(Database, path, ddl, synchronous) {
  const db = new Database(path, { timeout: 5000 });
  db.pragma("busy_timeout = 5000");
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = " + synchronous);
  for (const sql of ddl) db.exec(sql);
  const epoch = db.prepare("SELECT epoch FROM runs WHERE id = ?");
  const insert = db.prepare("INSERT INTO steps VALUES (?, ?, ?, ?, ?)");
  const tx = db.transaction((rows) => rows.map((r) => {
    const run = epoch.get(r[0]);
    if (!run || run.epoch !== 1) return false;
    insert.run(r);
    return true;
  }));
  return { db, commit: (rows) => tx.immediate(rows) };
}`;

/** The same source the worker runs, compiled here for the main thread. */
const openWriter = new Function(`${WRITER_SOURCE}\nreturn openWriter;`)() as (
  D: typeof Database,
  path: string,
  ddl: string[],
  synchronous: string,
) => { db: Database.Database; commit: (rows: Row[]) => boolean[] };

const THREAD_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const Database = require(workerData.driver);
${WRITER_SOURCE}
const w = openWriter(Database, workerData.path, workerData.ddl, workerData.synchronous);
parentPort.on("message", (m) => {
  if (m === "close") { w.db.close(); parentPort.close(); return; }
  try { parentPort.postMessage({ id: m.id, ok: w.commit(m.rows) }); }
  catch (e) { parentPort.postMessage({ id: m.id, error: String(e) }); }
});`;

type Commit = (rows: Row[]) => Promise<boolean[]>;

/** The engine's Committer, reduced: one batch in flight, the next gathers meanwhile. */
class Committer {
  private queue: Array<{ row: Row; resolve: () => void; reject: (e: Error) => void }> = [];
  private flushing = false;
  private scheduled = false;
  batches = 0;

  constructor(private readonly commit: Commit) {}

  write(row: Row): Promise<void> {
    return new Promise((resolve, reject) => {
      this.queue.push({ row, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.flushing) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    if (this.flushing || this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    this.flushing = true;
    this.batches++;
    try {
      const ok = await this.commit(batch.map((p) => p.row));
      for (const [i, p] of batch.entries()) {
        if (ok[i]) p.resolve();
        else p.reject(new Error("lease-lost"));
      }
    } catch (err) {
      for (const p of batch) p.reject(err as Error);
    } finally {
      this.flushing = false;
      if (this.queue.length > 0) this.schedule();
    }
  }
}

/** CPU ms this thread has used (Linux: /proc/thread-self/stat, in clock ticks of 10 ms; a
 *  round's seconds make that coarse grain small). Wall time on a loaded machine favours the
 *  thread: a thread that sleeps on every hop is handed the CPU first when it wakes. */
function threadCpuMs(): number {
  const fields = readFileSync("/proc/thread-self/stat", "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** Time the main thread spent inside a synchronous commit (mode "main"). */
let blockedMs = 0;

function mainCommitter(path: string): { commit: Commit; close: () => Promise<void> } {
  const w = openWriter(Database, path, DDL, SYNCHRONOUS);
  return {
    commit: (rows) => {
      const t0 = now();
      try {
        return Promise.resolve(w.commit(rows));
      } catch (err) {
        return Promise.reject(err);
      } finally {
        blockedMs += now() - t0;
      }
    },
    close: async () => {
      w.db.close();
    },
  };
}

function threadCommitter(path: string): { commit: Commit; close: () => Promise<void> } {
  const worker = new Worker(THREAD_SOURCE, {
    eval: true,
    workerData: {
      path,
      ddl: DDL,
      synchronous: SYNCHRONOUS,
      driver: createRequire(import.meta.url).resolve("better-sqlite3"),
    },
  });
  const waiting = new Map<
    number,
    { resolve: (ok: boolean[]) => void; reject: (e: Error) => void }
  >();
  let nextId = 0;
  worker.on("message", (m: { id: number; ok?: boolean[]; error?: string }) => {
    const w = waiting.get(m.id)!;
    waiting.delete(m.id);
    if (m.ok) w.resolve(m.ok);
    else w.reject(new Error(m.error));
  });
  return {
    commit: (rows) =>
      new Promise((resolve, reject) => {
        const id = nextId++;
        waiting.set(id, { resolve, reject });
        worker.postMessage({ id, rows });
      }),
    close: () =>
      new Promise((resolve) => {
        worker.once("exit", () => resolve());
        worker.postMessage("close");
      }),
  };
}

/** X us of JavaScript, as a fixed count of iterations (calibrated once, below): a spin on
 *  the clock would count the time another process held the CPU as work done. */
function work(iterations: number, runId: string, seq: number): Row {
  let output = "";
  for (let i = 0; i < iterations; i++) output = JSON.stringify({ i, runId, seq, items: [1, 2, 3] });
  return [runId, seq, `step-${seq}`, output, Date.now()];
}

/** Iterations of work() taking `us` microseconds: the fastest of many tries (the least
 *  disturbed by other processes on a loaded machine). */
function calibrate(us: number): number {
  const probe = 2_000;
  let best = Number.POSITIVE_INFINITY;
  for (let t = 0; t < 50; t++) {
    const t0 = now();
    work(probe, "run-x", t);
    best = Math.min(best, now() - t0);
  }
  return Math.max(1, Math.round((probe * us) / 1000 / best));
}

let roundNo = 0;

async function measure(
  kind: "main" | "thread",
  dir: string,
  producers: number,
  records: number,
  iterations: number,
): Promise<{ perS: number; batches: number; blocked: number; mainCpuUs: number; cpuUs: number }> {
  const path = `${dir}/${kind}-${roundNo++}.db`;
  const setup = new Database(path);
  setup.pragma("journal_mode = WAL");
  for (const sql of DDL) setup.exec(sql);
  const ids = Array.from({ length: producers }, (_, p) => `run-${p}`);
  const seed = setup.prepare("INSERT INTO runs VALUES (?, 1)");
  setup.transaction(() => {
    for (const id of ids) seed.run(id);
  })();
  setup.close();
  const writer = kind === "main" ? mainCommitter(path) : threadCommitter(path);
  const committer = new Committer(writer.commit);
  // Warm the path (statements, the thread's first message) before the clock starts.
  await committer.write(["run-0", -1, "warm", "", 0]);
  committer.batches = 0;
  blockedMs = 0;
  const c0 = process.cpuUsage();
  const m0 = threadCpuMs();
  const t0 = now();
  await Promise.all(
    ids.map(async (id) => {
      for (let s = 0; s < records; s++) await committer.write(work(iterations, id, s));
    }),
  );
  const ms = now() - t0;
  const mainCpuMs = threadCpuMs() - m0;
  const c = process.cpuUsage(c0);
  await writer.close();
  const check = new Database(path, { readonly: true });
  const rows = (
    check.prepare("SELECT count(*) AS n FROM steps WHERE seq >= 0").get() as { n: number }
  ).n;
  check.close();
  if (rows !== producers * records)
    throw new Error(`expected ${producers * records} rows, found ${rows}`);
  const n = producers * records;
  return {
    perS: (n * 1000) / ms,
    batches: committer.batches,
    blocked: blockedMs / ms,
    mainCpuUs: (mainCpuMs * 1000) / n,
    cpuUs: (c.user + c.system) / n,
  };
}

/** The raw floor: one row per BEGIN IMMEDIATE, back to back, no JavaScript between. */
function floor(dir: string, count: number): number {
  const w = openWriter(Database, `${dir}/floor-${roundNo++}.db`, DDL, SYNCHRONOUS);
  w.db.prepare("INSERT INTO runs VALUES ('run-0', 1)").run();
  const t0 = now();
  for (let s = 0; s < count; s++) w.commit([["run-0", s, `step-${s}`, "x".repeat(60), 0]]);
  const ms = now() - t0;
  w.db.close();
  return (count * 1000) / ms;
}

async function main(): Promise<void> {
  const [producers = 32, records = 200, jsUs = 130, rounds = 5] = process.argv.slice(2).map(Number);
  const iterations = calibrate(jsUs);
  const tmp = tempDir("cairn-writer-thread-");
  try {
    const res = { main: [] as number[], thread: [] as number[], floor: [] as number[] };
    const batches = { main: [] as number[], thread: [] as number[] };
    const blocked: number[] = [];
    const cpu = { main: [] as string[], thread: [] as string[] };
    for (let r = 0; r < rounds; r++) {
      // Alternate which goes first so a drift in load favours neither.
      const order: Array<"main" | "thread"> = r % 2 === 0 ? ["main", "thread"] : ["thread", "main"];
      for (const kind of order) {
        const m = await measure(kind, tmp.dir, producers, records, iterations);
        res[kind].push(m.perS);
        batches[kind].push((producers * records) / m.batches);
        if (kind === "main") blocked.push(m.blocked * 100);
        cpu[kind].push(`${fmt(m.mainCpuUs)}/${fmt(m.cpuUs)}`);
      }
      res.floor.push(floor(tmp.dir, Math.min(2000, producers * records)));
    }
    const ratio = res.thread.map((t, i) => t / res.main[i]!);
    console.log(
      `synchronous=${SYNCHRONOUS} producers=${producers} records=${records} jsUs=${jsUs} (${iterations} iterations) rounds=${rounds}\n` +
        `  main   CPU us/step (main thread/process) ${cpu.main.join(", ")}\n` +
        `  thread CPU us/step (main thread/process) ${cpu.thread.join(", ")}\n` +
        `  main   steps/s ${res.main.map(fmt).join(", ")} (median ${fmt(median(res.main))}; records/batch ${batches.main.map(fmt).join(", ")}; % of time blocked in commit ${blocked.map(fmt).join(", ")})\n` +
        `  thread steps/s ${res.thread.map(fmt).join(", ")} (median ${fmt(median(res.thread))}; records/batch ${batches.thread.map(fmt).join(", ")})\n` +
        `  thread/main per round ${ratio.map((x) => x.toFixed(2)).join(", ")} (median ${median(ratio).toFixed(2)})\n` +
        `  raw floor steps/s ${res.floor.map(fmt).join(", ")} (median ${fmt(median(res.floor))}); ` +
        `main/floor ${(median(res.main) / median(res.floor)).toFixed(2)}, thread/floor ${(median(res.thread) / median(res.floor)).toFixed(2)}`,
    );
  } finally {
    tmp.cleanup();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
