// The PostgreSQL section: cairn on a schema of its own in the test database, each figure
// beside a raw `pg` floor measured in the same run against the same server:
// - steps/s, 1 run on 1 worker: beside single-row INSERTs of the very rows cairn wrote
//   (read back from its steps table) into a table of the same shape, on 1 connection;
// - steps/s, 32 runs on 1 worker, and 32 runs on each of 4 worker processes: beside the
//   same rows inserted by 32 concurrent streams (one per run, in order) per process, over
//   a pool as big as the store's;
// - latency of an idle worker picking up a new run, and of a waiting run's next step after
//   sendEvent (both ride LISTEN/NOTIFY; the worker polls only once a minute): beside the
//   least a durable hand-off needs, an INSERT + pg_notify commit, the listener hearing it
//   and committing an UPDATE that claims the row.
// - resume of a run with 1,000 recorded steps (replay: from loadJournal to the workflow
//   passing its last recorded step): beside one SELECT of those rows on a connection of its
//   own, right after the replay.
// The 4-process case runs this file as child processes (`--bench-child`), each with an
// engine whose runs only it executes (a version of its own), coordinated over stdin/stdout.

import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import pg from "pg";
import type { Engine } from "../src/index.js";
import { cairn, cairnPostgres } from "./cairn.js";
import {
  type BenchEngine,
  measureAgentRuns,
  measureResume,
  measureRuns,
  measureSequentialRuns,
  type RunsResult,
  warmUp,
} from "./cases.js";
import {
  Barrier,
  describeTimings,
  fmt,
  median,
  now,
  type Section,
  type SectionReport,
  StoreTimings,
  timedStore,
  until,
  within,
} from "./lib.js";
import { addProbe, expectedSum, type LoopInput, loop } from "./workflows.js";

const { createEngine, workflow } = cairn;
const { postgresStore } = cairnPostgres;

const DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/test";
const ROUNDS = 5;
/** How long agent-sized runs execute on the store before the first figure is taken: the
 *  figures are those of a worker that has been up for a while, not of V8's first calls. */
const WARM_UP_MS = 3_000;
const LATENCY_SAMPLES = 15;
/** The store's default pool size; the raw floors use pools of the same size. */
const POOL_SIZE = 10;
const PROCESSES = 4;
const RUNS_PER_WORKER = 32;
const STEPS_PER_RUN = 100;

type StepRow = Record<string, unknown>;

export function postgresSection(): Section {
  const title = "PostgreSQL (local server, schema of its own)";
  return { title, run: () => runSection(title) };
}

function benchUrl(): string {
  return process.env.CAIRN_BENCH_POSTGRES_URL || process.env.CAIRN_TEST_POSTGRES_URL || DEFAULT_URL;
}

async function runSection(title: string): Promise<SectionReport> {
  const url = benchUrl();
  const where = url.replace(/\/\/[^@/]*@/, "//");
  const admin = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  admin.on("error", () => {});
  try {
    await admin.connect();
  } catch (err) {
    await admin.end().catch(() => {});
    return {
      title,
      rows: [],
      notes: [
        `skipped: cannot connect to ${where} (${(err as Error).message}); set ` +
          "CAIRN_BENCH_POSTGRES_URL or start PostgreSQL to run this section",
      ],
    };
  }
  const schema = `cairn_bench_${randomBytes(5).toString("hex")}`;
  const report: SectionReport = { title, rows: [], notes: [] };
  try {
    const settings = await admin.query<{ v: string; sc: string; fsync: string }>(
      "SELECT current_setting('server_version') AS v, current_setting('synchronous_commit') AS sc, current_setting('fsync') AS fsync",
    );
    const s = settings.rows[0];
    report.notes.push(
      `${where}, schema ${schema}; PostgreSQL ${s?.v}, synchronous_commit=${s?.sc}, ` +
        `fsync=${s?.fsync}; store and raw pools of ${POOL_SIZE} connections`,
    );
    const ctx: Ctx = { url, schema, admin, report };
    // CAIRN_BENCH_PG_CASES=agent,resume runs the named cases only (an A/B of one figure
    // need not wait for the others): agent, single, one-worker, processes, latency, resume.
    const only = process.env.CAIRN_BENCH_PG_CASES?.split(",").map((c) => c.trim());
    const cases: Array<[string, (ctx: Ctx) => Promise<void>]> = [
      ["agent", agentRuns],
      ["single", singleRun],
      ["one-worker", oneWorker],
      ["processes", processes],
      ["latency", latencies],
      ["resume", resume],
    ];
    for (const name of only ?? []) {
      if (!cases.some(([n]) => n === name)) {
        throw new Error(
          `bench: no PostgreSQL case "${name}" in CAIRN_BENCH_PG_CASES; cases: ${cases.map(([n]) => n).join(", ")}`,
        );
      }
    }
    for (const [name, run] of cases) {
      if (!only || only.includes(name)) await run(ctx);
    }
    report.notes.push(
      "raw tables are CREATE TABLE ... (LIKE steps INCLUDING ALL): the same columns, " +
        "indexes and defaults (steps have no foreign key to runs since migration 27); " +
        "cairn's INSERT reads and locks its run's row besides (the fence)",
    );
  } finally {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {});
    await admin.end().catch(() => {});
  }
  return report;
}

interface Ctx {
  url: string;
  schema: string;
  admin: pg.Client;
  report: SectionReport;
}

// ---- engines, rows and the raw floor ----

function openEngine(ctx: Ctx, concurrency: number, extra: Partial<EngineConfig> = {}): BenchEngine {
  const timings = new StoreTimings();
  const store = timedStore(postgresStore(ctx.url, { schema: ctx.schema }), timings);
  const engine = createEngine({
    store,
    workflows: [loop, afterEvent],
    concurrency,
    pollIntervalMs: 250,
    ...extra,
  });
  return { engine, timings, close: () => engine.close() };
}

type EngineConfig = { pollIntervalMs: number; worker: boolean };

/** cairn's step rows of these runs, grouped by run, each run's in call order. */
async function cairnSteps(
  c: pg.ClientBase,
  schema: string,
  runIds: string[],
): Promise<StepRow[][]> {
  const r = await c.query<StepRow>(
    `SELECT * FROM "${schema}".steps WHERE run_id = ANY($1::text[]) ORDER BY run_id, seq`,
    [runIds],
  );
  const byRun = new Map<string, StepRow[]>();
  for (const row of r.rows) {
    const id = String(row.run_id);
    let list = byRun.get(id);
    if (!list) {
      list = [];
      byRun.set(id, list);
    }
    list.push(row);
  }
  return [...byRun.values()];
}

async function createRawTable(c: pg.ClientBase, schema: string): Promise<void> {
  await c.query(
    `CREATE TABLE IF NOT EXISTS "${schema}".raw_steps (LIKE "${schema}".steps INCLUDING ALL)`,
  );
}

const COLUMNS = [
  "run_id",
  "key",
  "seq",
  "name",
  "kind",
  "outcome",
  "result",
  "error",
  "spend",
  "attempt",
  "started_at",
  "completed_at",
] as const;

function insertSql(schema: string): string {
  return `INSERT INTO "${schema}".raw_steps (${COLUMNS.join(", ")})
    VALUES (${COLUMNS.map((_, i) => `$${i + 1}`).join(", ")})`;
}

function values(row: StepRow): unknown[] {
  return COLUMNS.map((c) => {
    const v = row[c];
    return c === "error" || c === "spend" ? (v === null ? null : JSON.stringify(v)) : v;
  });
}

/** One single-row INSERT (its own transaction) after another, per stream; the streams
 *  run at once over `pool`. Returns ms. */
async function rawInsert(
  pool: pg.Pool | pg.Client,
  schema: string,
  streams: StepRow[][],
): Promise<number> {
  const sql = insertSql(schema);
  const t0 = now();
  await Promise.all(
    streams.map(async (rows) => {
      for (const row of rows) await pool.query(sql, values(row));
    }),
  );
  return now() - t0;
}

function perSecond(count: number, ms: number): number {
  return (count / ms) * 1000;
}

function medianRatio(cairn: readonly number[], raw: readonly number[]): number {
  return median(cairn.map((c, i) => c / raw[i]!));
}

function storeShare(res: RunsResult): string {
  return `store verbs in the window: ${describeTimings(res.store)}`;
}

// ---- 0. agent-sized runs through the public API (10-50 steps, as agents make) ----

async function agentRuns(ctx: Ctx): Promise<void> {
  const steps = 20;
  const sequentialRuns = 10;
  const concurrent = RUNS_PER_WORKER;
  const b = openEngine(ctx, concurrent);
  const raw = new pg.Client({ connectionString: ctx.url });
  raw.on("error", () => {});
  await raw.connect();
  const pool = rawPool(ctx.url);
  try {
    const warmRuns = await warmUp(b, WARM_UP_MS);
    const warm = await measureAgentRuns(b, { runs: concurrent, steps });
    await measureSequentialRuns(b, { runs: 3, steps });
    await createRawTable(ctx.admin, ctx.schema);
    await rawInsert(pool, ctx.schema, await cairnSteps(ctx.admin, ctx.schema, warm.runIds));
    const seq = { cairn: [] as number[], floor: [] as number[] };
    const conc = { cairn: [] as number[], floor: [] as number[] };
    for (let r = 0; r < ROUNDS; r++) {
      const s = await measureSequentialRuns(b, { runs: sequentialRuns, steps });
      const sRows = await cairnSteps(ctx.admin, ctx.schema, s.runIds);
      seq.cairn.push(perSecond(s.steps, s.ms));
      // One connection, one INSERT after another: the same rows, in run order.
      seq.floor.push(perSecond(s.steps, await rawInsert(raw, ctx.schema, [sRows.flat()])));
      const c = await measureAgentRuns(b, { runs: concurrent, steps });
      const cRows = await cairnSteps(ctx.admin, ctx.schema, c.runIds);
      if (cRows.flat().length !== c.steps) throw new Error("bench: step rows missing");
      conc.cairn.push(perSecond(c.steps, c.ms));
      conc.floor.push(perSecond(c.steps, await rawInsert(pool, ctx.schema, cRows)));
    }
    ctx.report.rows.push(
      {
        name: `${steps}-step runs one after another (start -> result)`,
        unit: "steps/s",
        cairn: median(seq.cairn),
        raw: median(seq.floor),
        better: "higher",
        ratio: medianRatio(seq.cairn, seq.floor),
        goal: { atLeast: 0.8 },
      },
      {
        name: `${concurrent} runs x ${steps} steps at once (start -> result)`,
        unit: "steps/s",
        cairn: median(conc.cairn),
        raw: median(conc.floor),
        better: "higher",
        ratio: medianRatio(conc.cairn, conc.floor),
        goal: { atLeast: 0.8 },
      },
    );
    ctx.report.notes.push(
      `agent runs, measured after a warm-up of ${fmt(warmRuns)} runs (${fmt(WARM_UP_MS / 1000)} s) ` +
        `on the same store; rounds (steps/s): sequential cairn ${seq.cairn.map(fmt).join(", ")}, raw ` +
        `(1 connection) ${seq.floor.map(fmt).join(", ")}; ${concurrent} at once cairn ` +
        `${conc.cairn.map(fmt).join(", ")}, raw (${concurrent} streams over ${POOL_SIZE} ` +
        `connections) ${conc.floor.map(fmt).join(", ")}`,
    );
  } finally {
    await raw.end().catch(() => {});
    await pool.end().catch(() => {});
    await b.close();
  }
}

// ---- 1. one run of 1,000 steps, one connection's worth of work ----

async function singleRun(ctx: Ctx): Promise<void> {
  const steps = 1_000;
  const b = openEngine(ctx, 16);
  const raw = new pg.Client({ connectionString: ctx.url });
  raw.on("error", () => {});
  await raw.connect();
  try {
    const warm = await measureRuns(b, { runs: 1, steps: 100 });
    await createRawTable(ctx.admin, ctx.schema);
    await rawInsert(raw, ctx.schema, await cairnSteps(ctx.admin, ctx.schema, warm.runIds));
    const cairn: number[] = [];
    const floor: number[] = [];
    let last: RunsResult | undefined;
    for (let r = 0; r < ROUNDS; r++) {
      last = await measureRuns(b, { runs: 1, steps });
      cairn.push(perSecond(steps, last.ms));
      const rows = await cairnSteps(ctx.admin, ctx.schema, last.runIds);
      if (rows.flat().length !== steps) throw new Error(`bench: expected ${steps} step rows`);
      floor.push(perSecond(steps, await rawInsert(raw, ctx.schema, rows)));
    }
    ctx.report.rows.push({
      name: "1 run x 1,000 steps (1 worker)",
      unit: "steps/s",
      cairn: median(cairn),
      raw: median(floor),
      better: "higher",
      ratio: medianRatio(cairn, floor),
    });
    ctx.report.notes.push(
      `1x1000 rounds (steps/s): cairn ${cairn.map(fmt).join(", ")}; raw (1 connection, one ` +
        `INSERT after another) ${floor.map(fmt).join(", ")}`,
    );
    if (last) ctx.report.notes.push(`1x1000 ${storeShare(last)}`);
  } finally {
    await raw.end().catch(() => {});
    await b.close();
  }
}

// ---- resuming a run with 1,000 recorded steps ----

async function resume(ctx: Ctx): Promise<void> {
  const steps = 1_000;
  const raw = new pg.Client({ connectionString: ctx.url });
  raw.on("error", () => {});
  await raw.connect();
  try {
    // The floor: the run's step rows as the driver hands them over (objects), twice, the
    // faster counting (the first may pay for the server's page cache).
    const sql = `SELECT * FROM "${ctx.schema}".steps WHERE run_id = $1 AND seq < $2 ORDER BY seq`;
    const res = await measureResume(({ concurrency }) => openEngine(ctx, concurrency), {
      steps,
      pairs: 5,
      floor: async (runId) => {
        const times: number[] = [];
        for (let i = 0; i < 2; i++) {
          const t0 = now();
          const rows = await raw.query(sql, [runId, steps]);
          times.push(now() - t0);
          if (rows.rowCount !== steps) throw new Error(`bench: "${runId}" has ${rows.rowCount}`);
        }
        return Math.min(...times);
      },
    });
    ctx.report.rows.push({
      name: "resume: replay 1,000 recorded steps",
      unit: "ms",
      cairn: median(res.replayMs),
      raw: median(res.floorMs),
      better: "lower",
      ratio: medianRatio(res.replayMs, res.floorMs),
      goal: { atMost: 2 },
    });
    ctx.report.notes.push(
      `resume: replay ${res.replayMs.map(fmt).join(", ")} ms (control run with no steps: ` +
        `${res.controlReplayMs.map(fmt).join(", ")} ms); of which loadJournal ` +
        `${res.loadJournalMs.map(fmt).join(", ")} ms; raw SELECT ${res.floorMs.map(fmt).join(", ")} ms`,
    );
  } finally {
    await raw.end().catch(() => {});
  }
}

// ---- 2. 32 concurrent runs on one worker ----

async function oneWorker(ctx: Ctx): Promise<void> {
  const runs = RUNS_PER_WORKER;
  const steps = STEPS_PER_RUN;
  const b = openEngine(ctx, runs);
  const pool = rawPool(ctx.url);
  try {
    const warm = await measureRuns(b, { runs, steps: 5 });
    await rawInsert(pool, ctx.schema, await cairnSteps(ctx.admin, ctx.schema, warm.runIds));
    const cairn: number[] = [];
    const floor: number[] = [];
    const results: RunsResult[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      const res = await measureRuns(b, { runs, steps });
      results.push(res);
      cairn.push(perSecond(res.steps, res.ms));
      const rows = await cairnSteps(ctx.admin, ctx.schema, res.runIds);
      if (rows.flat().length !== res.steps) throw new Error("bench: step rows missing");
      floor.push(perSecond(res.steps, await rawInsert(pool, ctx.schema, rows)));
    }
    ctx.report.rows.push({
      name: `${runs} runs x ${steps} steps (1 worker)`,
      unit: "steps/s",
      cairn: median(cairn),
      raw: median(floor),
      better: "higher",
      ratio: medianRatio(cairn, floor),
    });
    const mid = results[cairn.indexOf(median(cairn))] ?? results[0]!;
    ctx.report.notes.push(
      `${runs}x${steps} on 1 worker, rounds (steps/s): cairn ${cairn.map(fmt).join(", ")}; raw ` +
        `(${runs} streams over ${POOL_SIZE} connections) ${floor.map(fmt).join(", ")}`,
      `${runs}x${steps} commit stats (median round): ${mid.commitWrites} writes in ` +
        `${mid.commitBatches} commits = ${fmt(mid.commitWrites / mid.commitBatches)} writes/commit; ` +
        storeShare(mid),
    );
  } finally {
    await pool.end().catch(() => {});
    await b.close();
  }
}

function rawPool(url: string): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max: POOL_SIZE });
  pool.on("error", () => {});
  return pool;
}

// ---- 3. 32 runs on each of 4 worker processes ----

/** A child process speaking one JSON object per line. */
class ChildLink {
  private readonly lines: string[] = [];
  private waiting: { resolve: (line: string) => void; reject: (err: Error) => void } | undefined;
  private exited: string | undefined;

  constructor(readonly child: ChildProcess) {
    const rl = createInterface({ input: child.stdout! });
    rl.on("line", (line) => {
      const w = this.waiting;
      this.waiting = undefined;
      if (w) w.resolve(line);
      else this.lines.push(line);
    });
    child.on("exit", (code, signal) => {
      this.exited = `exited (${code ?? signal})`;
      const w = this.waiting;
      this.waiting = undefined;
      w?.reject(new Error(`bench child ${this.exited}; see its output above`));
    });
  }

  send(msg: object): void {
    if (!this.exited) this.child.stdin!.write(`${JSON.stringify(msg)}\n`);
  }

  next<T>(what: string, ms = 120_000): Promise<T> {
    const queued = this.lines.shift();
    if (queued !== undefined) return Promise.resolve(JSON.parse(queued) as T);
    if (this.exited) return Promise.reject(new Error(`bench child ${this.exited}: ${what}`));
    return within(
      new Promise<T>((resolve, reject) => {
        this.waiting = { resolve: (line) => resolve(JSON.parse(line) as T), reject };
      }),
      ms,
      `bench child: ${what}`,
    );
  }
}

async function processes(ctx: Ctx): Promise<void> {
  const file = fileURLToPath(import.meta.url);
  const links = Array.from({ length: PROCESSES }, (_, i) => {
    const child = spawn(
      process.execPath,
      ["--import", "tsx", file, "--bench-child", ctx.url, ctx.schema, String(i)],
      { stdio: ["pipe", "pipe", "inherit"] },
    );
    return new ChildLink(child);
  });
  const all = <T>(what: string) => Promise.all(links.map((l) => l.next<T>(what)));
  try {
    await all("ready");
    // One measured window: every child's runs are started and parked on their first step
    // before the clock starts ("prepare"), then all are let go at once ("go").
    const cairnRound = async (steps: number) => {
      for (const l of links) l.send({ op: "prepare", runs: RUNS_PER_WORKER, steps });
      await all("runs parked at their first step");
      const t0 = now();
      for (const l of links) l.send({ op: "go" });
      const done = await all<{ ids: string[] }>("runs finished");
      return { ms: now() - t0, ids: done.map((d) => d.ids) };
    };
    const rawRound = async (ids: string[][]) => {
      links.forEach((l, i) => {
        l.send({ op: "raw-prepare", ids: ids[i] });
      });
      await all("rows loaded");
      const t0 = now();
      for (const l of links) l.send({ op: "raw-go" });
      await all("rows inserted");
      return now() - t0;
    };
    // All cairn rounds first, then the engines close and all raw rounds run: the server's
    // connection limit (100 by default) need not hold both at once.
    const warm = await cairnRound(5);
    const total = PROCESSES * RUNS_PER_WORKER * STEPS_PER_RUN;
    const cairn: number[] = [];
    const rounds: string[][][] = [];
    for (let r = 0; r < ROUNDS; r++) {
      const res = await cairnRound(STEPS_PER_RUN);
      const rows = await cairnSteps(ctx.admin, ctx.schema, res.ids.flat());
      if (rows.flat().length !== total) throw new Error("bench: step rows missing");
      cairn.push(perSecond(total, res.ms));
      rounds.push(res.ids);
    }
    for (const l of links) l.send({ op: "close-engine" });
    await all("engines closed");
    await rawRound(warm.ids);
    const floor: number[] = [];
    for (const ids of rounds) floor.push(perSecond(total, await rawRound(ids)));
    ctx.report.rows.push({
      name: `${PROCESSES} processes x ${RUNS_PER_WORKER} runs x ${STEPS_PER_RUN} steps`,
      unit: "steps/s",
      cairn: median(cairn),
      raw: median(floor),
      better: "higher",
      ratio: medianRatio(cairn, floor),
      goal: { atLeast: 0.9 },
    });
    ctx.report.notes.push(
      `${PROCESSES} processes, rounds (steps/s): cairn ${cairn.map(fmt).join(", ")}; raw ` +
        `(${PROCESSES} processes x ${RUNS_PER_WORKER} streams over ${POOL_SIZE} connections ` +
        `each, once the engines closed) ${floor.map(fmt).join(", ")}`,
    );
  } finally {
    for (const l of links) {
      if (l.child.exitCode === null) l.send({ op: "exit" });
    }
    await Promise.all(
      links.map((l) =>
        l.child.exitCode === null
          ? within(
              new Promise((r) => l.child.once("exit", r)),
              15_000,
              "bench child exiting",
            ).catch(() => l.child.kill("SIGKILL"))
          : undefined,
      ),
    );
  }
}

/** A bench child: one engine executing only the runs it starts (a version of its own). */
async function childMain(args: string[]): Promise<void> {
  const [url, schema, index] = args as [string, string, string];
  const mine = workflow({ name: loop.name, version: `child-${index}` }, loop.fn);
  const engine = createEngine({
    store: postgresStore(url, { schema }),
    workflows: [mine],
    concurrency: RUNS_PER_WORKER,
    pollIntervalMs: 250,
  });
  let pool: pg.Pool | undefined;
  const out = (msg: object) => process.stdout.write(`${JSON.stringify(msg)}\n`);
  await engine.listRuns({ limit: 1 });
  out({ ready: true });
  let parked: { barrier: Barrier; ids: string[]; steps: number; dispose: () => void } | undefined;
  let rows: StepRow[][] = [];
  const rl = createInterface({ input: process.stdin });
  for await (const line of rl) {
    const msg = JSON.parse(line) as { op: string; runs?: number; steps?: number; ids?: string[] };
    if (msg.op === "prepare") {
      const barrier = new Barrier(msg.runs ?? 0);
      const probe = addProbe({ barrier });
      const input: LoopInput = { steps: msg.steps ?? 0, probe: probe.name };
      const handles = await Promise.all(
        Array.from({ length: msg.runs ?? 0 }, () => engine.start(mine, input)),
      );
      await within(barrier.all, 60_000, "runs reaching their first step");
      parked = {
        barrier,
        ids: handles.map((h) => h.id),
        steps: input.steps,
        dispose: probe.dispose,
      };
      out({ parked: true });
    } else if (msg.op === "go" && parked) {
      const p = parked;
      p.barrier.open();
      const outputs = await Promise.all(p.ids.map((id) => engine.handle(id).result()));
      if (outputs.some((o) => o !== expectedSum(p.steps))) throw new Error("bench: wrong output");
      p.dispose();
      out({ ids: p.ids });
    } else if (msg.op === "close-engine") {
      await engine.close();
      out({ closed: true });
    } else if (msg.op === "raw-prepare") {
      pool ??= rawPool(url);
      const c = await pool.connect();
      try {
        rows = await cairnSteps(c, schema, msg.ids ?? []);
      } finally {
        c.release();
      }
      out({ loaded: rows.length });
    } else if (msg.op === "raw-go" && pool) {
      out({ ms: await rawInsert(pool, schema, rows) });
    } else if (msg.op === "exit") {
      break;
    }
  }
  await engine.close();
  await pool?.end().catch(() => {});
  process.exit(0);
}

// ---- 4. latency: pick-up of a new run, and the step after an event ----

const eventStamps = new Map<string, number[]>();

/** Waits for "go", then runs one step, stamping its start in the probe's list. */
const afterEvent = workflow(
  { name: "bench-pg-event", version: "1" },
  async (ctx, input: { probe: string }): Promise<number> => {
    const ev = await ctx.waitForEvent<number>("go");
    return ctx.step("next", () => {
      eventStamps.get(input.probe)?.push(now());
      return ev.timedOut ? -1 : ev.payload;
    });
  },
);

async function latencies(ctx: Ctx): Promise<void> {
  // The worker polls once a minute, so only a notification gets it going within a sample.
  const worker = openEngine(ctx, 16, { pollIntervalMs: 60_000 });
  // The client is another store instance (its own pool and LISTEN connection), as another
  // process would be.
  const client: Engine = createEngine({
    store: postgresStore(ctx.url, { schema: ctx.schema }),
    worker: false,
  });
  const floor = await notifyFloor(ctx);
  try {
    await worker.engine.listRuns({ limit: 1 });
    const status = async (id: string) => (await client.getRun(id))?.status;
    const pickup: number[] = [];
    const startCall: number[] = [];
    const event: number[] = [];
    for (let i = 0; i < LATENCY_SAMPLES + 2; i++) {
      const stamps: number[] = [];
      const probe = addProbe({ stamps });
      try {
        const t0 = now();
        const h = await client.start(loop, { steps: 1, probe: probe.name });
        const t1 = now();
        await until(() => stamps.length > 0, "an idle worker to pick up a new run", 10_000);
        await until(async () => (await status(h.id)) === "completed", "the run to finish");
        if (i >= 2) {
          pickup.push(stamps[0]! - t0);
          startCall.push(t1 - t0);
        }
      } finally {
        probe.dispose();
      }
    }
    for (let i = 0; i < LATENCY_SAMPLES + 2; i++) {
      const name = `event-${i}`;
      const stamps: number[] = [];
      eventStamps.set(name, stamps);
      try {
        const h = await client.start(afterEvent, { probe: name });
        await until(async () => (await status(h.id)) === "waiting", "the run to wait", 10_000);
        const t0 = now();
        await client.sendEvent(h.id, "go", 1);
        await until(() => stamps.length > 0, "the step after the event", 10_000);
        await until(async () => (await status(h.id)) === "completed", "the run to finish");
        if (i >= 2) event.push(stamps[0]! - t0);
      } finally {
        eventStamps.delete(name);
      }
    }
    ctx.report.rows.push(
      {
        name: "idle worker picks up a new run: start() -> first step",
        unit: "ms",
        cairn: median(pickup),
        raw: median(floor),
        better: "lower",
      },
      {
        name: "waiting run: sendEvent() -> next step",
        unit: "ms",
        cairn: median(event),
        raw: median(floor),
        better: "lower",
      },
    );
    ctx.report.notes.push(
      `pick-up samples (ms): ${pickup.map(fmt).join(", ")}; of which start() itself ` +
        `(createRun + NOTIFY commit) median ${fmt(median(startCall))} ms`,
      `event samples (ms): ${event.map(fmt).join(", ")}`,
      `latency floor: INSERT + pg_notify committed on one connection, heard on a LISTEN ` +
        `connection, which then commits an UPDATE claiming the row (ms): ` +
        `${floor.map(fmt).join(", ")}`,
    );
  } finally {
    await client.close();
    await worker.close();
  }
}

/** The least a durable hand-off costs: commit a row and its notification; the listener
 *  hears it and commits a claim of the row. */
async function notifyFloor(ctx: Ctx): Promise<number[]> {
  const t = `"${ctx.schema}".raw_handoff`;
  const channel = `bench_${randomBytes(4).toString("hex")}`;
  await ctx.admin.query(`CREATE TABLE ${t} (id text PRIMARY KEY, claimed boolean DEFAULT false)`);
  const listen = new pg.Client({ connectionString: ctx.url });
  const claim = new pg.Client({ connectionString: ctx.url });
  const send = new pg.Client({ connectionString: ctx.url });
  for (const c of [listen, claim, send]) {
    c.on("error", () => {});
    await c.connect();
  }
  try {
    await listen.query(`LISTEN ${channel}`);
    const heard = new Map<string, () => void>();
    listen.on("notification", (n) => {
      const id = n.payload ?? "";
      void claim
        .query(`UPDATE ${t} SET claimed = true WHERE id = $1 AND NOT claimed`, [id])
        .then(() => heard.get(id)?.());
    });
    const samples: number[] = [];
    for (let i = 0; i < LATENCY_SAMPLES + 2; i++) {
      const id = `h-${i}`;
      const claimed = new Promise<void>((r) => heard.set(id, r));
      const t0 = now();
      await send.query(
        `WITH ins AS (INSERT INTO ${t} (id) VALUES ($1) RETURNING id)
          SELECT pg_notify($2, id) FROM ins`,
        [id, channel],
      );
      await within(claimed, 10_000, "a notification");
      if (i >= 2) samples.push(now() - t0);
    }
    return samples;
  } finally {
    for (const c of [listen, claim, send]) await c.end().catch(() => {});
  }
}

if (process.argv[2] === "--bench-child") {
  childMain(process.argv.slice(3)).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
