// Runs generated programs and judges them, for test/replay-generative.test.ts.
//
// A case runs twice on fresh storage under the same run id: once undisturbed (the
// reference: in process, SQLite, virtual clock) and once with its worker crashed at the
// case's kill points and taken over by a new worker until the run ends. Crashes are either
// in-process (a crashable store: the engine goes dead at once, a new engine on the same
// storage takes over after the lease, on a virtual clock) or real SIGKILLs of worker
// processes (test/fixtures/gen-worker.ts). A run that fails on a broken step is "fixed"
// (the ledger lets the step succeed) and resumed, in both runs.
//
// What happened is collected for gen-judge.ts: the runs and journals of the store, the ledger,
// and at every kill which step bodies were in flight (read once the writes the dead worker
// had on the wire have landed: the next worker finds them, and so must the judge).

import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { createEngine, type RunStatus, realClock, type Store } from "../../src/index.js";
import { idempotencyKey } from "../../src/lib/ids.js";
import { settlesWithin } from "../../src/lib/timers.js";
import type { Journal, RunRecord } from "../../src/store/store.js";
import { createVirtualClock, type VirtualClock } from "../../src/testing/index.js";
import { type Profile, type Trigger, triggerFor } from "./gen-crash-points.js";
import type { KillSpec, NondetKill } from "./gen-grammar.js";
import { interpreterWorkflow, type RunInput, type V } from "./gen-interpreter.js";
import { Ledger } from "./gen-ledger.js";
import type { Program } from "./gen-program.js";
import {
  type Backend,
  InProcessHost,
  ProcessHost,
  storage,
  type WorkerHost,
} from "./gen-workers.js";
import { tempDir } from "./sqlite.js";

export { type Backend, closeWorkerPool } from "./gen-workers.js";

/** A temp dir in memory where there is one (/dev/shm): thousands of small SQLite files are
 *  created, synced and removed, and a disk makes that the cost of the whole test. */
function fastTempDir(): { dir: string; cleanup: () => void } {
  if (!existsSync("/dev/shm")) return tempDir("cairn-gen-");
  const dir = mkdtempSync(join("/dev/shm", "cairn-gen-"));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

export type CrashMode = "none" | "inproc" | "sigkill";

/** A run whose journal and ledger did not change for this much real time is stuck. */
const STUCK_MS = 30_000;
const TERMINAL = new Set<RunStatus>(["completed", "failed", "canceled"]);

export interface KillSnapshot {
  /** Step-body executions begun and not recorded (per idempotency key), at this kill. */
  unrecorded: Map<string, number>;
  /** Keys a recovering execution may rightly count a crashed attempt for. */
  inFlight: Set<string>;
  /** Per run: outcomes handed over (recorded) by this kill. cairn charges a crash to the
   *  calls made again before the recovering execution hands over a new outcome (made after
   *  at most this many): the ones in flight, or, for a kill between a record and the next
   *  call's start, that next call (docs/API.md). */
  deliveredAt: Map<string, number>;
  /** Calls (idempotency keys) with an outcome recorded by this kill. */
  recorded: Set<string>;
  incarnation: number;
}

export interface RunResult {
  mode: CrashMode;
  backend: Backend;
  status: RunStatus | "stuck";
  output?: V;
  error?: { code?: string; name: string; message: string };
  runs: RunRecord[];
  journals: Map<string, Journal>;
  ledger: Ledger;
  kills: KillSnapshot[];
  profile: Profile;
  fixes: number;
  incarnations: number;
  logs: string[];
  cleanup: () => Promise<void>;
}

export interface CrashOptions {
  mode: CrashMode;
  backend: Backend;
  kills: KillSpec[];
  /** Crash right after the non-deterministic call's record is written (nondet programs). */
  killAfterNondet: boolean;
  /** With killAfterNondet: crash as soon as that call has begun durably (Case.nondetKill). */
  nondetKill?: NondetKill;
  profile?: Profile;
  pgUrl?: string;
}

// ---- running a program ----

export async function runProgram(
  prog: Program,
  runId: string,
  o: CrashOptions,
): Promise<RunResult> {
  watchLag();
  const tmp = fastTempDir();
  const st = storage(o.backend, tmp.dir, o.pgUrl);
  const ledger = new Ledger(join(tmp.dir, "ledger.db"));
  const logs: string[] = [];
  const log = (m: string, err?: unknown) =>
    logs.push(`${m}${err ? `: ${(err as Error)?.message ?? String(err)}` : ""}`);
  const clock: VirtualClock | undefined = o.mode === "sigkill" ? undefined : createVirtualClock();
  // One connection for the test's own reads and for the client engine (opens are counted).
  const inspect = st.mk();
  const client = createEngine({
    store: inspect,
    worker: false,
    ...(clock ? { clock } : {}),
    pollIntervalMs: 10,
    log,
  });
  const kills: KillSnapshot[] = [];
  let fixes = 0;
  let incarnations = 0;
  const started = Date.now();
  let storeCallsFirst = 0;
  const result: Partial<RunResult> = {};
  const cleanup = async () => {
    await client.close().catch(() => {});
    await inspect.close().catch(() => {});
    ledger.close();
    await st.drop().catch(() => {});
    tmp.cleanup();
  };
  try {
    await st.prepare();
    await inspect.open({ clock: clock ?? realClock });
    const input: RunInput = {
      body: prog.body,
      v: { h: "root", t: [] },
      root: runId,
      uniqueNames: prog.uniqueNames,
    };
    const stub = interpreterWorkflow({
      ledger: ledger.view({ no: -1, dead: true }),
      inc: { no: -1, dead: true },
    });
    await client.start(stub, input, { id: runId });
    for (const ev of prog.events) await client.sendEvent(runId, ev.name, ev.payload);

    const profile = o.profile ?? { ledgerWrites: 1, storeCalls: 1, durationMs: 50 };
    const triggerAt = (k: number): Trigger | undefined => {
      if (o.mode === "none") return undefined;
      if (o.killAfterNondet)
        return k === 0 ? { kind: "nondet", begun: o.nondetKill === "begun" } : undefined;
      return triggerFor(o.kills[k], profile);
    };

    const host: WorkerHost =
      o.mode === "sigkill"
        ? new ProcessHost(st, ledger)
        : new InProcessHost(st, ledger, clock!, log);
    let cur = await host.start(incarnations++, triggerAt(0));
    let status: RunStatus | "stuck" = "pending";
    let ticks = 0;
    let maxTick = 0;
    let progressMark = "";
    let progressAt = Date.now();
    for (;;) {
      const run = await bounded(inspect.getRun(runId), "reading the run");
      if (run && TERMINAL.has(run.status)) {
        const broken = run.status === "failed" && run.error?.message.startsWith("broken ");
        if (broken && fixes <= prog.broken) {
          ledger.fix(runId);
          fixes++;
          await client.resume(runId);
          continue;
        }
        status = run.status;
        if (run.output !== null) result.output = (await client.getRun(runId))?.output as V;
        if (run.error)
          result.error = { code: run.error.code, name: run.error.name, message: run.error.message };
        break;
      }
      if (cur.killed) {
        progressAt = Date.now();
        if (kills.length === 0) storeCallsFirst = cur.storeCalls();
        // What the dead worker had on the wire lands first: an outcome recorded by then is
        // one the recovery builds on (it charges the calls made after it, not before).
        if (!(await settlesWithin(cur.settled(), STUCK_MS))) {
          logs.push(`worker ${cur.no}: its store calls in flight at its kill did not settle`);
        }
        kills.push(await bounded(snapshot(inspect, ledger, cur.no), "a kill's snapshot"));
        await bounded(host.afterKill(), "the host after a kill");
        cur = await bounded(
          host.start(incarnations++, triggerAt(kills.length)),
          "starting a worker",
        );
        continue;
      }
      const mark = `${run?.updatedAt}/${ledger.total()}`;
      if (mark !== progressMark) {
        progressMark = mark;
        progressAt = Date.now();
      }
      if (Date.now() - progressAt > STUCK_MS) {
        status = "stuck";
        logs.push(
          `stuck (max tick ${maxTick} ms, loop lag ${maxLag()} ms, timers ${clock?.pendingTimers()}): run is ${run?.status} (${run?.reason ?? ""}), waiting for [${run?.waitingFor}], ready in ${run?.readyAt == null ? "never" : `${run.readyAt - (clock?.now() ?? Date.now())} ms`}, lease ${run?.leaseUntil == null ? "none" : `${run.leaseUntil - (clock?.now() ?? Date.now())} ms`}, epoch ${run?.epoch}; worker ${cur.no}: ${cur.describe()}`,
        );
        break;
      }
      if (++ticks % 10 === 0 && !cur.killed) {
        const parked = await bounded(
          parkedForever(inspect, clock?.now() ?? Date.now()),
          "listing the runs",
        );
        if (parked) {
          status = "stuck";
          logs.push(`stuck: ${parked}`);
          break;
        }
      }
      const t0 = Date.now();
      await bounded(host.tick(run), "a tick of the worker host");
      maxTick = Math.max(maxTick, Date.now() - t0);
    }
    if (kills.length === 0) storeCallsFirst = cur.storeCalls();
    const durationMs = Date.now() - started;
    // Children still executing when the top-level run ended (it failed) finish first.
    for (let i = 0; i < 50; i++) {
      const busy = (await bounded(inspect.listRuns({ limit: 1000 }), "listing the runs")).some(
        (r) => r.status === "running" || r.status === "pending",
      );
      if (!busy || cur.killed) break;
      await bounded(host.tick(), "a tick of the worker host after the run ended");
    }
    await bounded(
      cur.stop(),
      `stopping worker ${cur.no} after the run ended ${status} (${cur.describe()})`,
    );
    await bounded(host.close(), "closing the worker host");
    const runs = await inspect.listRuns({ limit: 1000 });
    const journals = new Map<string, Journal>();
    for (const r of runs) journals.set(r.id, await inspect.loadJournal(r.id));
    return {
      mode: o.mode,
      backend: o.backend,
      status,
      ...result,
      runs,
      journals,
      ledger,
      kills,
      profile: { ledgerWrites: ledger.total(), storeCalls: storeCallsFirst, durationMs },
      fixes,
      incarnations,
      logs,
      cleanup,
    };
  } catch (err) {
    // A harness phase that hung (bounded) may leave what it waited on hanging too.
    await settlesWithin(cleanup(), STUCK_MS);
    throw err;
  }

  /** A phase of the harness that does not return within STUCK_MS fails the case (with its
   *  seed) instead of hanging the whole page until the test's timeout, which reports none
   *  of the page's failures (ip-pg:900364 once hung after its run completed). */
  async function bounded<T>(p: Promise<T>, what: string): Promise<T> {
    if (await settlesWithin(p, STUCK_MS)) return p;
    throw new Error(
      `harness: ${what} did not return within ${STUCK_MS} ms (logs: ${logs.slice(-3).join(" | ")})`,
    );
  }
}

let lag = 0;
let lagTimer: NodeJS.Timeout | undefined;
/** The longest the event loop was blocked since the last call (diagnostics). */
function maxLag(): number {
  const l = lag;
  lag = 0;
  return l;
}
function watchLag(): void {
  if (lagTimer) return;
  let last = Date.now();
  lagTimer = setInterval(() => {
    const now = Date.now();
    lag = Math.max(lag, now - last - 100);
    last = now;
  }, 100);
  lagTimer.unref();
}

/** Every run finished, or waiting with nothing that will wake it for an hour: a run that
 *  will never finish (the longest timer of a program is a minute, except 20-day sleeps and
 *  never-answered waits of race losers, which a finished workflow leaves behind). */
async function parkedForever(inspect: Store, now: number): Promise<string | undefined> {
  const runs = await inspect.listRuns({ limit: 1000 });
  const open = runs.filter((r) => !TERMINAL.has(r.status));
  if (open.length === 0) return undefined;
  const parked = open.every(
    (r) => r.status === "waiting" && (r.readyAt === null || r.readyAt - now > 3_600_000),
  );
  if (!parked) return undefined;
  return open
    .map(
      (r) =>
        `run "${r.id}" is waiting ${r.wakeAt === null ? "with no timer" : `until +${Math.round((r.wakeAt - now) / 86_400_000)} days`} for [${r.waitingFor.join(", ")}]`,
    )
    .join("; ");
}

/**
 * The key of every execution the journal shows as finished (one entry per execution): each
 * attempt that failed (not one the worker's crash cut short) and each recorded outcome. A
 * final failure is both an attempt row and an error outcome of the same generation and
 * attempt number: one execution, counted once.
 */
export function finishedExecutions(j: Journal): string[] {
  const failed = new Set<string>();
  const keys: string[] = [];
  for (const a of j.attempts) {
    if (a.error.code === "WORKER_LOST") continue;
    failed.add(`${a.key}\u0000${a.generation}\u0000${a.attempt}`);
    keys.push(a.key);
  }
  for (const s of j.steps) {
    const same = `${s.key}\u0000${s.generation}\u0000${s.attempt}`;
    if (s.outcome === "error" && failed.has(same)) continue;
    keys.push(s.key);
  }
  return keys;
}

/** At a kill: which step bodies were executing (begun, outcome not recorded) and which
 *  calls a recovering execution may count a crashed attempt for. */
async function snapshot(
  inspect: Store,
  ledger: Ledger,
  incarnation: number,
): Promise<KillSnapshot> {
  const outcomes = new Map<string, number>();
  const openEffects = new Set<string>();
  const deliveredAt = new Map<string, number>();
  const recorded = new Set<string>();
  for (const run of await inspect.listRuns({ limit: 1000 })) {
    const j = await inspect.loadJournal(run.id);
    deliveredAt.set(
      run.id,
      j.steps.reduce((n, s) => (s.delivery === null ? n : Math.max(n, s.delivery + 1)), 0),
    );
    const done = new Set(j.steps.map((s) => s.key));
    for (const key of done) recorded.add(idempotencyKey(run.id, key));
    const add = (key: string) => {
      const idem = idempotencyKey(run.id, key);
      outcomes.set(idem, (outcomes.get(idem) ?? 0) + 1);
    };
    for (const key of finishedExecutions(j)) add(key);
    for (const i of j.intents) {
      // An effect's intent (or any step-like call's, should the engine record one before a
      // body starts) without a completion: its attempt may have been running.
      if ((i.kind === "effect" || i.kind === "step") && !done.has(i.key)) {
        openEffects.add(idempotencyKey(run.id, i.key));
      }
    }
  }
  const starts = new Map<string, number>();
  for (const e of ledger.execRows()) {
    if (e.phase === "start") starts.set(e.idem, (starts.get(e.idem) ?? 0) + 1);
  }
  const unrecorded = new Map<string, number>();
  for (const [idem, n] of starts) {
    const open = n - (outcomes.get(idem) ?? 0);
    if (open > 0) unrecorded.set(idem, open);
  }
  const inFlight = new Set([...unrecorded.keys(), ...openEffects]);
  return { unrecorded, inFlight, deliveredAt, recorded, incarnation };
}
