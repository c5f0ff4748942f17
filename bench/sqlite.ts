// The SQLite section: cairn on a temp-dir file with the store's default pragmas (WAL,
// synchronous=FULL), each figure beside a raw better-sqlite3 floor measured in the same
// process on the same disk. The raw floor writes the very rows cairn wrote (read back
// from cairn's file) into a separate file whose steps table is created from cairn's own
// DDL, with the same pragmas, one BEGIN IMMEDIATE transaction per row.

import { join } from "node:path";
import Database from "better-sqlite3";
import { cairn } from "./cairn.js";
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
  describeTimings,
  fmt,
  median,
  now,
  type Section,
  type SectionReport,
  StoreTimings,
  tempDir,
  timedStore,
} from "./lib.js";
import { loop } from "./workflows.js";

const { createEngine, sqliteStore } = cairn;

/** Measured rounds per figure; each figure is the median round. The concurrent case has
 *  fewer: its raw floor (6,400 fsync'd transactions a round) dominates the section's time. */
const ROUNDS = 5;
const CONCURRENT_ROUNDS = 3;
/** How long the same code runs on an in-memory store before the first figure is taken. */
const WARM_UP_MS = 2_000;

type SqliteStore = ReturnType<typeof sqliteStore>;
type StepRow = Record<string, unknown>;

export function sqliteSection(): Section {
  const title = "SQLite (temp-dir file, WAL, synchronous=FULL)";
  return { title, run: () => runSection(title) };
}

async function runSection(title: string): Promise<SectionReport> {
  const tmp = tempDir();
  const report: SectionReport = { title, rows: [], notes: [`files in ${tmp.dir}`] };
  try {
    await agentRuns(tmp.dir, report);
    await singleRun(tmp.dir, report);
    await concurrentRuns(tmp.dir, report);
    await resume(tmp.dir, report);
    await perStep(tmp.dir, report);
  } finally {
    tmp.cleanup();
  }
  return report;
}

// ---- engines and the raw floor ----

/** Runs agent-sized runs on an in-memory store of the same code for about `ms`: the figures
 *  are those of a worker that has been up for a while, not of V8's first few hundred calls
 *  (the first rounds of a cold process run 20-40% slower). */
async function warmUpInMemory(ms: number): Promise<number> {
  const b = openEngine(":memory:", 32);
  try {
    return await warmUp(b, ms);
  } finally {
    await b.close();
  }
}

function openEngine(path: string, concurrency: number): BenchEngine & { store: SqliteStore } {
  const timings = new StoreTimings();
  const store = timedStore(sqliteStore(path), timings);
  const engine = createEngine({ store, workflows: [loop], concurrency, pollIntervalMs: 250 });
  return { engine, timings, store, close: () => engine.close() };
}

/** A separate file with a copy of cairn's steps table (same DDL and indexes, same pragmas). */
class RawSteps {
  private readonly db: Database.Database;

  constructor(path: string, ddl: readonly string[]) {
    this.db = new Database(path);
    this.db.pragma("journal_mode = WAL");
    this.db.pragma("synchronous = FULL");
    for (const sql of ddl) this.db.exec(sql);
  }

  /** Inserts `rows` in order, `perTransaction` rows per BEGIN IMMEDIATE; returns ms. */
  insert(rows: readonly StepRow[], perTransaction = 1): number {
    if (rows.length === 0) return 0;
    const columns = Object.keys(rows[0]!);
    const stmt = this.db.prepare(
      `INSERT INTO steps (${columns.join(", ")}) VALUES (${columns.map(() => "?").join(", ")})`,
    );
    const values = rows.map((r) => columns.map((c) => r[c]));
    const tx = this.db.transaction((chunk: unknown[][]) => {
      for (const v of chunk) stmt.run(v);
    });
    const t0 = now();
    for (let i = 0; i < values.length; i += perTransaction) {
      tx.immediate(values.slice(i, i + perTransaction));
    }
    return now() - t0;
  }

  pragmas(): string {
    return describePragmas((name) => this.db.pragma(name, { simple: true }));
  }

  close(): void {
    this.db.close();
  }
}

function describePragmas(read: (name: "synchronous" | "journal_mode") => unknown): string {
  const sync = ["OFF", "NORMAL", "FULL", "EXTRA"][Number(read("synchronous"))];
  return `journal_mode=${String(read("journal_mode"))} synchronous=${sync}`;
}

/** Reads from cairn's file on a read-only connection (WAL lets it run beside the engine). */
function readCairnFile<T>(path: string, fn: (db: Database.Database) => T): T {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  try {
    return fn(db);
  } finally {
    db.close();
  }
}

/** The DDL of cairn's steps table and its explicit indexes, as stored in the file. */
function stepsDdl(path: string): string[] {
  return readCairnFile(path, (db) =>
    (
      db
        .prepare(
          "SELECT sql FROM sqlite_master WHERE tbl_name = 'steps' AND sql IS NOT NULL ORDER BY type DESC",
        )
        .all() as Array<{ sql: string }>
    ).map((r) => r.sql),
  );
}

/** cairn's step rows of these runs, in the order cairn inserted them. */
function cairnSteps(path: string, runIds: readonly string[]): StepRow[] {
  return readCairnFile(
    path,
    (db) =>
      db
        .prepare(
          "SELECT * FROM steps WHERE run_id IN (SELECT value FROM json_each(?)) ORDER BY rowid",
        )
        .all(JSON.stringify(runIds)) as StepRow[],
  );
}

/** The median of cairn[i] / raw[i]: each round's pair was measured back to back. */
function medianRatio(cairn: readonly number[], raw: readonly number[]): number {
  return median(cairn.map((c, i) => c / raw[i]!));
}

function perSecond(count: number, ms: number): number {
  return (count / ms) * 1000;
}

function storeShare(res: RunsResult): string {
  const blocking = res.store.reduce((sum, [, t]) => sum + t.blockingMs, 0);
  return (
    `store calls blocked the event loop ${fmt((blocking / res.ms) * 100)}% of the ` +
    `${fmt(res.ms)} ms: ${describeTimings(res.store)}`
  );
}

// ---- 0. agent-sized runs through the public API (10-50 steps, as agents make) ----

async function agentRuns(dir: string, report: SectionReport): Promise<void> {
  const steps = 20;
  const sequentialRuns = 10;
  const concurrent = 32;
  const path = join(dir, "agent.db");
  const b = openEngine(path, concurrent);
  let raw: RawSteps | undefined;
  try {
    const warmRuns = await warmUpInMemory(WARM_UP_MS);
    const warm = await measureAgentRuns(b, { runs: concurrent, steps });
    await measureSequentialRuns(b, { runs: 3, steps });
    raw = new RawSteps(join(dir, "agent-raw.db"), stepsDdl(path));
    raw.insert(cairnSteps(path, warm.runIds));
    const seq = { cairn: [] as number[], floor: [] as number[] };
    const conc = { cairn: [] as number[], floor: [] as number[] };
    const empty = { cairn: [] as number[], floor: [] as number[] };
    let emptyCalls: ReturnType<StoreTimings["since"]> = [];
    for (let r = 0; r < ROUNDS; r++) {
      const s = await measureSequentialRuns(b, { runs: sequentialRuns, steps });
      const sRows = cairnSteps(path, s.runIds);
      const sRawMs = raw.insert(sRows);
      seq.cairn.push(perSecond(s.steps, s.ms));
      seq.floor.push(perSecond(sRows.length, sRawMs));
      // A run with no step: what a run costs beyond its steps, in raw commits.
      const s0 = b.timings.snapshot();
      const e = await measureSequentialRuns(b, { runs: sequentialRuns, steps: 0 });
      if (r === 0) emptyCalls = b.timings.since(s0);
      empty.cairn.push(median(e.perRunMs));
      empty.floor.push(sRawMs / sRows.length);
      if (r < CONCURRENT_ROUNDS) {
        const c = await measureAgentRuns(b, { runs: concurrent, steps });
        const cRows = cairnSteps(path, c.runIds);
        if (cRows.length !== c.steps) throw new Error(`bench: expected ${c.steps} rows`);
        conc.cairn.push(perSecond(c.steps, c.ms));
        conc.floor.push(perSecond(cRows.length, raw.insert(cRows)));
      }
    }
    report.rows.push(
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
        goal: { atLeast: 3 },
      },
      {
        name: "0-step run (start -> result), in raw commits",
        unit: "ms",
        cairn: median(empty.cairn),
        raw: median(empty.floor),
        better: "lower",
        ratio: medianRatio(empty.cairn, empty.floor),
        goal: { atMost: 2 },
      },
    );
    report.notes.push(
      `agent runs: measured after a warm-up of ${fmt(warmRuns)} runs (${fmt(WARM_UP_MS / 1000)} s) on an in-memory store; ` +
        `raw floor = the same step rows, one transaction each, one after another; ` +
        `rounds (steps/s) sequential cairn ${seq.cairn.map(fmt).join(", ")}, raw ` +
        `${seq.floor.map(fmt).join(", ")}; ${concurrent} at once cairn ${conc.cairn.map(fmt).join(", ")}, ` +
        `raw ${conc.floor.map(fmt).join(", ")}; 0-step run ms ${empty.cairn.map(fmt).join(", ")} ` +
        `vs raw commit ms ${empty.floor.map(fmt).join(", ")}`,
      `0-step run, store calls per run (first round; the engine's own claim rounds and ` +
        `heartbeats included): ${emptyCalls
          .map(([verb, t]) => `${verb} ${fmt(t.calls / sequentialRuns)}`)
          .join(", ")}`,
    );
  } finally {
    raw?.close();
    await b.close();
  }
}

// ---- 1. one run, 2,000 steps ----

async function singleRun(dir: string, report: SectionReport): Promise<void> {
  const steps = 2_000;
  const path = join(dir, "single.db");
  const b = openEngine(path, 16);
  let raw: RawSteps | undefined;
  try {
    const warm = await measureRuns(b, { runs: 1, steps: 500 });
    raw = new RawSteps(join(dir, "single-raw.db"), stepsDdl(path));
    raw.insert(cairnSteps(path, warm.runIds));
    const cairn: number[] = [];
    const floor: number[] = [];
    let last: RunsResult | undefined;
    for (let r = 0; r < ROUNDS; r++) {
      last = await measureRuns(b, { runs: 1, steps, stamps: true });
      cairn.push(perSecond(steps, last.ms));
      const rows = cairnSteps(path, last.runIds);
      if (rows.length !== steps)
        throw new Error(`bench: expected ${steps} rows, read ${rows.length}`);
      floor.push(perSecond(rows.length, raw.insert(rows)));
    }
    report.rows.push({
      name: "1 run x 2,000 steps",
      unit: "steps/s",
      cairn: median(cairn),
      raw: median(floor),
      better: "higher",
      ratio: medianRatio(cairn, floor),
    });
    report.notes.push(
      `pragmas: cairn store ${describePragmas((name) => b.store.pragma(name))}; raw file ${raw.pragmas()}`,
      `1x2000 rounds (steps/s): cairn ${cairn.map(fmt).join(", ")}; raw ${floor.map(fmt).join(", ")}`,
    );
    if (last) {
      // Step i's cost is the gap between the starts of step i and i+1 (the first gap
      // includes the barrier, so it is skipped). Medians: a loaded disk has spikes.
      const gaps = last.stamps.slice(2).map((t, i) => t - last.stamps[i + 1]!);
      const tenth = Math.floor(gaps.length / 10);
      report.notes.push(
        `1x2000 within the last run, median gap: steps 2-${tenth + 1} ` +
          `${fmt(median(gaps.slice(0, tenth)))} ms/step, last ${tenth} steps ` +
          `${fmt(median(gaps.slice(-tenth)))} ms/step; ${storeShare(last)}`,
      );
    }
  } finally {
    raw?.close();
    await b.close();
  }
}

// ---- 2. 64 concurrent runs, 100 steps each ----

async function concurrentRuns(dir: string, report: SectionReport): Promise<void> {
  const runs = 64;
  const steps = 100;
  const path = join(dir, "concurrent.db");
  const b = openEngine(path, runs);
  let raw: RawSteps | undefined;
  let batched: RawSteps | undefined;
  try {
    const warm = await measureRuns(b, { runs, steps: 5 });
    const ddl = stepsDdl(path);
    raw = new RawSteps(join(dir, "concurrent-raw.db"), ddl);
    batched = new RawSteps(join(dir, "concurrent-raw-batched.db"), ddl);
    const warmRows = cairnSteps(path, warm.runIds);
    raw.insert(warmRows);
    batched.insert(warmRows, runs);
    const cairn: number[] = [];
    const floor: number[] = [];
    const batchedFloor: number[] = [];
    const results: RunsResult[] = [];
    for (let r = 0; r < CONCURRENT_ROUNDS; r++) {
      const res = await measureRuns(b, { runs, steps });
      results.push(res);
      cairn.push(perSecond(res.steps, res.ms));
      const rows = cairnSteps(path, res.runIds);
      if (rows.length !== res.steps) {
        throw new Error(`bench: expected ${res.steps} rows, read ${rows.length}`);
      }
      floor.push(perSecond(rows.length, raw.insert(rows)));
      batchedFloor.push(perSecond(rows.length, batched.insert(rows, runs)));
    }
    report.rows.push({
      name: "64 runs x 100 steps (concurrency 64)",
      unit: "steps/s",
      cairn: median(cairn),
      raw: median(floor),
      better: "higher",
      ratio: medianRatio(cairn, floor),
    });
    const mid = results[cairn.indexOf(median(cairn))] ?? results[0]!;
    report.notes.push(
      `64x100 rounds (steps/s): cairn ${cairn.map(fmt).join(", ")}; raw ${floor.map(fmt).join(", ")}`,
      `64x100 commit stats (engine.metrics(), median round): commitWrites ${mid.commitWrites} in ` +
        `commitBatches ${mid.commitBatches} = ${fmt(mid.commitWrites / mid.commitBatches)} writes/commit; ` +
        `all rounds: ${results.map((x) => `${x.commitWrites}/${x.commitBatches}`).join(", ")}`,
      `64x100 ${storeShare(mid)}`,
      `64x100 group-commit ceiling: raw with ${runs} rows per transaction ` +
        `${fmt(median(batchedFloor))} steps/s (cairn reaches ${fmt(median(cairn) / median(batchedFloor))}x of it)`,
    );
  } finally {
    raw?.close();
    batched?.close();
    await b.close();
  }
}

// ---- 3. resuming a run with 1,000 recorded steps ----

async function resume(dir: string, report: SectionReport): Promise<void> {
  const steps = 1_000;
  const path = join(dir, "resume.db");
  // The floor: one SELECT of the run's 1,000 step rows from cairn's file on a connection of
  // its own, right after that run's replay (twice; the faster counts: the first may pay
  // for opening the connection's page cache). Rows come back as objects, better-sqlite3's
  // default; the same read as arrays (raw mode, as cairn's loadJournal reads them) is
  // timed beside it and shown in the notes.
  const arraysMs: number[] = [];
  const res = await measureResume(({ concurrency }) => openEngine(path, concurrency), {
    steps,
    pairs: 5,
    floor: (runId) =>
      readCairnFile(path, (db) => {
        const stmt = db.prepare("SELECT * FROM steps WHERE run_id = ? AND seq < ? ORDER BY seq");
        const fastest = (raw: boolean) => {
          stmt.raw(raw);
          const times: number[] = [];
          for (let i = 0; i < 2; i++) {
            const t0 = now();
            const rows = stmt.all(runId, steps);
            times.push(now() - t0);
            if (rows.length !== steps)
              throw new Error(`bench: "${runId}" has ${rows.length} steps`);
          }
          return Math.min(...times);
        };
        const objects = fastest(false);
        arraysMs.push(fastest(true));
        return objects;
      }),
  });
  // The floor also ran for the warm-up run(s) before the measured pairs: keep the pairs'.
  const arrays = arraysMs.slice(-res.floorMs.length);
  report.rows.push({
    name: "resume: replay 1,000 recorded steps",
    unit: "ms",
    cairn: median(res.replayMs),
    raw: median(res.floorMs),
    better: "lower",
    ratio: medianRatio(res.replayMs, res.floorMs),
    goal: { atMost: 2 },
  });
  report.notes.push(
    `resume: replay = from the execution's loadJournal call to the workflow passing its last ` +
      `recorded step: ${res.replayMs.map(fmt).join(", ")} ms (control run with no steps: ` +
      `${res.controlReplayMs.map(fmt).join(", ")} ms); of which loadJournal ` +
      `${res.loadJournalMs.map(fmt).join(", ")} ms; raw SELECT ${res.floorMs.map(fmt).join(", ")} ms ` +
      `(rows as arrays: ${arrays.map(fmt).join(", ")} ms, replay/that ` +
      `${fmt(medianRatio(res.replayMs, arrays))}x)`,
    `resume: sendEvent -> result() ${res.fullMs.map(fmt).join(", ")} ms with 1,000 recorded ` +
      `steps vs ${res.controlFullMs.map(fmt).join(", ")} ms for the control (claim, wait ` +
      `record and release are fsync'd transactions, so these swing with the disk)`,
  );
}

// ---- 4. per-step cost of a short and a long run ----

async function perStep(dir: string, report: SectionReport): Promise<void> {
  const path = join(dir, "per-step.db");
  const b = openEngine(path, 16);
  let raw: RawSteps | undefined;
  const sizes = [
    { steps: 20, runsPerRound: 5 },
    { steps: 1_000, runsPerRound: 1 },
  ] as const;
  try {
    const warm: string[] = [];
    for (let i = 0; i < 5; i++) warm.push(...(await measureRuns(b, { runs: 1, steps: 20 })).runIds);
    raw = new RawSteps(join(dir, "per-step-raw.db"), stepsDdl(path));
    raw.insert(cairnSteps(path, warm));
    // Short and long runs alternate within each round, so load changes hit both alike.
    const cairn = sizes.map(() => [] as number[]);
    const floor = sizes.map(() => [] as number[]);
    for (let r = 0; r < ROUNDS; r++) {
      for (const [k, size] of sizes.entries()) {
        const perStepMs: number[] = [];
        const ids: string[] = [];
        for (let i = 0; i < size.runsPerRound; i++) {
          const res = await measureRuns(b, { runs: 1, steps: size.steps });
          perStepMs.push(res.ms / size.steps);
          ids.push(...res.runIds);
        }
        const rows = cairnSteps(path, ids);
        cairn[k]!.push(median(perStepMs));
        floor[k]!.push(raw.insert(rows) / rows.length);
      }
    }
    for (const [k, size] of sizes.entries()) {
      report.rows.push({
        name: `${size.steps.toLocaleString("en-US")}-step run, per step`,
        unit: "ms/step",
        cairn: median(cairn[k]!),
        raw: median(floor[k]!),
        better: "lower",
        ratio: medianRatio(cairn[k]!, floor[k]!),
      });
    }
    report.rows.push({
      name: "per-step cost, 1,000-step run / 20-step run",
      unit: "x",
      cairn: medianRatio(cairn[1]!, cairn[0]!),
      better: "lower",
      goal: { atMost: 1.2 },
    });
    report.notes.push(
      `per step (start -> result, including the run's release; ${ROUNDS} rounds, each with ` +
        `${sizes[0].runsPerRound} 20-step runs and ${sizes[1].runsPerRound} 1,000-step run): ` +
        `a 1,000-step run costs ${fmt(medianRatio(cairn[1]!, cairn[0]!))}x per step what a ` +
        `20-step run does; rounds 20: ${cairn[0]!.map(fmt).join(", ")}, ` +
        `1,000: ${cairn[1]!.map(fmt).join(", ")} ms/step`,
    );
  } finally {
    raw?.close();
    await b.close();
  }
}
