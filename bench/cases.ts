// The cairn side of each benchmark, independent of the store: a section hands in a factory
// for engines on its store and measures its own raw floor beside these figures.

import type { Engine, EngineMetrics } from "../src/index.js";
import { Barrier, now, type StoreTimings, until, type VerbTiming, within } from "./lib.js";
import { addProbe, expectedSum, loop } from "./workflows.js";

export interface BenchEngine {
  engine: Engine;
  timings: StoreTimings;
  close(): Promise<void>;
}

/** A new engine on the section's store; every call opens the SAME database. */
export type MakeEngine = (options: { concurrency: number }) => BenchEngine;

export interface RunsResult {
  /** From releasing the first steps to the last result: every step and every release. */
  ms: number;
  steps: number;
  runIds: string[];
  commitBatches: number;
  commitWrites: number;
  /** Store verbs called inside the measured window. */
  store: Array<[string, VerbTiming]>;
  /** Start time of each executed step, when asked for (one run only). */
  stamps: number[];
}

/** `runs` runs of `steps` steps each, all executing at once (runs <= the engine's
 *  concurrency). Starting and claiming them happens before the clock starts: every run
 *  waits in its first step until all have arrived. */
export async function measureRuns(
  b: BenchEngine,
  p: { runs: number; steps: number; stamps?: boolean },
): Promise<RunsResult> {
  const barrier = new Barrier(p.runs);
  const stamps: number[] = [];
  const probe = addProbe(p.stamps ? { barrier, stamps } : { barrier });
  try {
    const handles = await Promise.all(
      Array.from({ length: p.runs }, () =>
        b.engine.start(loop, { steps: p.steps, probe: probe.name }),
      ),
    );
    await within(barrier.all, 30_000, `${p.runs} runs reaching their first step`);
    const m0: EngineMetrics = b.engine.metrics();
    const s0 = b.timings.snapshot();
    const t0 = now();
    barrier.open();
    const outputs = await within(
      Promise.all(handles.map((h) => h.result())),
      120_000,
      `${p.runs} runs of ${p.steps} steps completing`,
    );
    const ms = now() - t0;
    const m1 = b.engine.metrics();
    for (const out of outputs) {
      if (out !== expectedSum(p.steps)) throw new Error(`bench: a run returned ${String(out)}`);
    }
    return {
      ms,
      steps: p.runs * p.steps,
      runIds: handles.map((h) => h.id),
      commitBatches: m1.commitBatches - m0.commitBatches,
      commitWrites: m1.commitWrites - m0.commitWrites,
      store: b.timings.since(s0),
      stamps,
    };
  } finally {
    probe.dispose();
  }
}

export interface ResumeResult {
  /** The replay of each run with `steps` recorded steps: from the start of the execution's
   *  loadJournal to the workflow getting past its last recorded step. */
  replayMs: number[];
  /** The same for a control run with no recorded step. */
  controlReplayMs: number[];
  /** sendEvent -> result() of each run with `steps` recorded steps (claim, replay, the wait's
   *  record, release), and of each control run. */
  fullMs: number[];
  controlFullMs: number[];
  /** The loadJournal call inside each full replay. */
  loadJournalMs: number[];
  /** What `floor` returned right after each full replay. */
  floorMs: number[];
  runIds: string[];
}

/** Records `pairs` runs of `steps` steps that then wait for an event (plus as many control
 *  runs that only wait), closes that engine, opens a new one and times event -> result.
 *  `floor(runId)` measures the raw read of that run's records right after its replay. */
export async function measureResume(
  make: MakeEngine,
  p: { steps: number; pairs: number; floor: (runId: string) => number | Promise<number> },
): Promise<ResumeResult> {
  type Planned = { id: string; steps: number; loopEnds: number[]; dispose: () => void };
  const plan = { warm: [] as Planned[], full: [] as Planned[], control: [] as Planned[] };
  const first = make({ concurrency: 16 });
  try {
    const e = first.engine;
    const startRun = async (steps: number): Promise<Planned> => {
      const loopEnds: number[] = [];
      const probe = addProbe({ loopEnds });
      const run = await e.start(loop, { steps, wait: true, probe: probe.name });
      return { id: run.id, steps, loopEnds, dispose: probe.dispose };
    };
    for (let i = 0; i < 2; i++) plan.warm.push(await startRun(i === 0 ? p.steps : 0));
    for (let i = 0; i < p.pairs; i++) {
      plan.full.push(await startRun(p.steps));
      plan.control.push(await startRun(0));
    }
    const all = [...plan.warm, ...plan.full, ...plan.control];
    await until(
      async () => (await Promise.all(all.map((r) => e.getRun(r.id)))).every(waiting),
      "runs to record their steps and suspend",
      60_000,
    );
  } finally {
    await first.close();
  }

  const second = make({ concurrency: 16 });
  const out: ResumeResult = {
    replayMs: [],
    controlReplayMs: [],
    fullMs: [],
    controlFullMs: [],
    loadJournalMs: [],
    floorMs: [],
    runIds: plan.full.map((r) => r.id),
  };
  try {
    const e = second.engine;
    const resume = async (run: Planned) => {
      const s0 = second.timings.snapshot();
      const t0 = now();
      await e.sendEvent(run.id, "go", 1);
      const value = await within(e.handle(run.id).result(), 30_000, `run "${run.id}" resuming`);
      const fullMs = now() - t0;
      if (value !== expectedSum(run.steps, 1)) {
        throw new Error(`bench: run "${run.id}" returned ${String(value)}`);
      }
      const loads = second.timings.since(s0).find(([verb]) => verb === "loadJournal")?.[1];
      const loadStart = second.timings.lastStart("loadJournal");
      const loopEnd = run.loopEnds.at(-1);
      if (loads?.calls !== 1 || loadStart === undefined || loopEnd === undefined) {
        throw new Error(`bench: run "${run.id}" did not resume with one journal read`);
      }
      return { fullMs, replayMs: loopEnd - loadStart, loadMs: loads.ms };
    };
    for (const run of plan.warm) {
      await resume(run);
      if (run.steps === p.steps) await p.floor(run.id);
    }
    for (let i = 0; i < p.pairs; i++) {
      const control = await resume(plan.control[i]!);
      const full = await resume(plan.full[i]!);
      out.controlFullMs.push(control.fullMs);
      out.controlReplayMs.push(control.replayMs);
      out.fullMs.push(full.fullMs);
      out.replayMs.push(full.replayMs);
      out.loadJournalMs.push(full.loadMs);
      out.floorMs.push(await p.floor(plan.full[i]!.id));
    }
  } finally {
    await second.close();
    for (const run of [...plan.warm, ...plan.full, ...plan.control]) run.dispose();
  }
  return out;
}

function waiting(run: { status: string } | undefined): boolean {
  return run?.status === "waiting";
}

export interface AgentRunsResult {
  /** From the first start() call to the last result(): creating, claiming, every step,
   *  the release and reading the result back, as an application sees it. */
  ms: number;
  steps: number;
  runIds: string[];
}

/** `runs` runs of `steps` steps, each started and awaited through the public API
 *  (`engine.start(...).result()`), all at once. Nothing is kept out of the window. */
export async function measureAgentRuns(
  b: BenchEngine,
  p: { runs: number; steps: number },
): Promise<AgentRunsResult> {
  const t0 = now();
  const ids = await within(
    Promise.all(
      Array.from({ length: p.runs }, async () => {
        const run = await b.engine.start(loop, { steps: p.steps });
        const out = await run.result();
        if (out !== expectedSum(p.steps)) throw new Error(`bench: a run returned ${String(out)}`);
        return run.id;
      }),
    ),
    120_000,
    `${p.runs} runs of ${p.steps} steps (start -> result)`,
  );
  return { ms: now() - t0, steps: p.runs * p.steps, runIds: ids };
}

/** `runs` runs of `steps` steps, each started and awaited before the next starts. */
export async function measureSequentialRuns(
  b: BenchEngine,
  p: { runs: number; steps: number },
): Promise<AgentRunsResult & { perRunMs: number[] }> {
  const perRunMs: number[] = [];
  const runIds: string[] = [];
  const t0 = now();
  for (let i = 0; i < p.runs; i++) {
    const res = await measureAgentRuns(b, { runs: 1, steps: p.steps });
    perRunMs.push(res.ms);
    runIds.push(...res.runIds);
  }
  return { ms: now() - t0, steps: p.runs * p.steps, runIds, perRunMs };
}

/** Brings V8's optimizing compilers to the engine's hot paths before anything is measured,
 *  as they are in a worker that has been running for a while: sequential and concurrent
 *  agent-sized runs, 0-step runs, and runs that wait for an event and are replayed when it
 *  comes, for about `ms` milliseconds. Returns the runs made. */
export async function warmUp(b: BenchEngine, ms: number): Promise<number> {
  const t0 = now();
  let runs = 0;
  while (now() - t0 < ms) {
    await measureSequentialRuns(b, { runs: 20, steps: 20 });
    await measureSequentialRuns(b, { runs: 20, steps: 0 });
    await measureAgentRuns(b, { runs: 32, steps: 20 });
    const waiting = await Promise.all(
      Array.from({ length: 8 }, () => b.engine.start(loop, { steps: 200, wait: true })),
    );
    await until(
      async () =>
        (await Promise.all(waiting.map((r) => b.engine.getRun(r.id)))).every(
          (r) => r?.status === "waiting",
        ),
      "warm-up runs to suspend",
      30_000,
    );
    for (const run of waiting) {
      await b.engine.sendEvent(run.id, "go", 1);
      if ((await run.result()) !== expectedSum(200, 1)) throw new Error("bench: warm-up resume");
    }
    runs += 80;
  }
  return runs;
}
