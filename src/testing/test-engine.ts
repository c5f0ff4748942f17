// createTestEngine: an engine for a user's own tests, on a temporary SQLite file (or a store
// the test provides) with a virtual clock, fault scripts on chosen calls, an in-process
// crash with recovery after the lease, and a deploy of new versions mid-run. Closed by the
// test runner's cleanup (vitest's onTestFinished, when it runs inside a vitest test), by
// `await using`, or by `close()`.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createEngine, type Engine, type EngineOptions, type RunHandle } from "../engine/engine.js";
import { heartbeatInFlight } from "../engine/engine-heartbeat.js";
import type { RunView } from "../engine/views.js";
import { unknownOptionNames, unknownOptionsText } from "../lib/option-names.js";
import { sqliteStore } from "../store/sqlite/sqlite-store.js";
import type { Store } from "../store/store.js";
import { APPROVAL_EVENT_PREFIX } from "../workflow/approval-calls.js";
import type { AnyWorkflow } from "../workflow/define.js";
import { type CallFault, faultHook } from "./call-faults.js";
import {
  type CrashableStore,
  type CrashableStoreOptions,
  crashableStore,
} from "./crashable-store.js";
import { DEFAULT_MAX_IDLE_WAKES, driveUntil } from "./drive.js";
import { type CallInfo, instrumentWorkflows } from "./instrument.js";
import { createSideEffectCounter, runForEngine, type SideEffectCounter } from "./side-effects.js";
import { createVirtualClock, type VirtualClock } from "./virtual-clock.js";

const STATUSES: readonly RunView["status"][] = [
  "pending",
  "running",
  "waiting",
  "paused",
  "completed",
  "failed",
  "canceled",
];

export interface TestEngineOptions {
  workflows: AnyWorkflow[];
  /** Fault scripts applied to step and effect calls (call-faults.ts). */
  faults?: CallFault[];
  /** Counter for side effects your fakes report; paused while an engine is crashed. */
  sideEffects?: SideEffectCounter;
  /** A new connection to the test's storage on each call (every engine gets its own, as
   *  another process would). Default: a temporary SQLite file, removed on close. */
  store?: () => Store;
  /** Where the virtual clock starts. Default 2026-01-01T00:00:00Z. */
  clockStart?: number | Date;
  /** settle and the other clock drives give up once timers woke the runs this many times in
   *  a row with no step or effect function started in between: a run sleeping (or waiting
   *  out timeouts) in a loop that never ends. Default 200; raise it for a run meant to
   *  sleep more often than that with nothing else to do. */
  maxIdleWakes?: number;
  /** Other engine options (leaseMs defaults to 10 s here, pollIntervalMs to 10 ms). */
  engineOptions?: Omit<EngineOptions, "store" | "clock" | "workflows">;
}

export interface TestEngine {
  /** The engine now serving (a new one after `recover` or `deploy`). */
  readonly engine: Engine;
  readonly clock: VirtualClock;
  readonly sideEffects: SideEffectCounter;
  /** Starts a run on the current engine (engine.start). */
  start: Engine["start"];
  /** Advances the clock until the run finishes (completed, failed or canceled); resolves
   *  with its view. `events` are sent as soon as the run (or a child) waits for them; an
   *  entry with `approval` answers that approval as soon as the run asks it. */
  settle(
    run: RunHandle | string,
    options?: {
      events?: Array<EventScript | ApprovalScript>;
      /** Runs before each look at the run (harnesses: crash or recover here). */
      beforeTick?: () => Promise<void>;
    },
  ): Promise<RunView>;
  /** Advances the clock a tick at a time until `check` returns true. */
  advanceUntil(check: () => boolean | Promise<boolean>, what?: string): Promise<true>;
  /** Advances the clock until the run has a given status (e.g. "waiting"). */
  advanceUntilStatus(run: RunHandle | string, status: RunView["status"]): Promise<RunView>;
  /** Advances the clock until the run waits for the event `name`, then past that wait's
   *  timeout: the wait resolves `{ timedOut: true }`. */
  timeOutWait(run: RunHandle | string, name: string): Promise<void>;
  /** Kills the current engine in process, as SIGKILL would (crashable-store.ts). */
  crash(): void;
  /** True from `crash()` until `recover()` or `deploy()`. */
  readonly crashed: boolean;
  /** After `crash`: moves the clock past the lease and starts a new engine, which takes the
   *  dead one's runs over. `workflows` default to the current ones. */
  recover(options?: { workflows?: AnyWorkflow[] }): Promise<Engine>;
  /** A deploy: closes the current engine gracefully and starts one with `workflows` (keep
   *  the old versions registered so in-flight runs finish on the code they started with). */
  deploy(workflows: AnyWorkflow[]): Promise<Engine>;
  /** A new connection to the test's storage (its temporary SQLite file, or the `store`
   *  option's), not opened: for what takes a Store of its own and opens and closes it, as
   *  `checkReplay({ store: t.store(), workflows })` does. An `Error` once closed. */
  store(): Store;
  /** Closes the engine and removes the temporary store. Calling it twice is harmless. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** An event sent as soon as its run (default: the run being settled) waits for it. */
export interface EventScript {
  name: string;
  payload?: unknown;
  runId?: string;
}

/** An approval (`ctx.approval`) answered as soon as its run (default: the run being settled)
 *  asks it: `approval` is its name (the asking of that name that waits, as for
 *  `engine.approve`) or its key (`merge#2`). An entry of `events`, in order with them;
 *  answered once, as `engine.approve` (or `reject`) with `via: "engine"`. */
export interface ApprovalScript {
  approval: string;
  /** Default "approved". */
  decision?: "approved" | "rejected";
  by?: string;
  comment?: string;
  /** Structured answer data, checked by the approval's answer schema when the run reads it. */
  answer?: unknown;
  runId?: string;
}

/** An `events` entry: an event to send, or an approval to answer. */
export type ScriptEntry = EventScript | ApprovalScript;

/** Refuses an entry that is neither an event nor an approval (`TypeError` naming it). */
export function checkScript(entries: unknown, where: string): void {
  if (entries === undefined) return;
  if (!Array.isArray(entries)) throw new TypeError(`${where}: events must be an array`);
  for (const [i, e] of entries.entries()) {
    const entry = e as Partial<EventScript & ApprovalScript> | null;
    const what = `${where}: events[${i}]`;
    if (typeof entry !== "object" || entry === null) {
      throw new TypeError(`${what} must be { name, payload? } or { approval, decision? }`);
    }
    if (entry.approval !== undefined) {
      if (entry.name !== undefined) {
        throw new TypeError(
          `${what} has both name and approval; an entry sends an event or answers an approval`,
        );
      }
      if (typeof entry.approval !== "string" || entry.approval === "") {
        throw new TypeError(`${what}.approval must be the approval's name or key`);
      }
      if (
        entry.decision !== undefined &&
        entry.decision !== "approved" &&
        entry.decision !== "rejected"
      ) {
        throw new TypeError(`${what}.decision must be "approved" or "rejected"`);
      }
    } else if (typeof entry.name !== "string") {
      throw new TypeError(
        `${what} must have a name (an event) or an approval (an approval's name or key)`,
      );
    }
  }
}

/** Whether a run's `waitingFor` holds an approval (the event "cairn.approval:<key>"). */
const asksApproval = (waitingFor: string[] | undefined) =>
  waitingFor?.some((n) => n.startsWith(APPROVAL_EVENT_PREFIX)) === true;

interface DriveExtras {
  tickMs?: number;
  events?: ScriptEntry[];
  sent?: Set<number>;
  beforeTick?: () => Promise<void>;
}

const FINISHED = new Set(["completed", "failed", "canceled"]);

const TEST_ENGINE_OPTIONS = [
  "workflows",
  "faults",
  "sideEffects",
  "store",
  "clockStart",
  "maxIdleWakes",
  "engineOptions",
];

export async function createTestEngine(options: TestEngineOptions): Promise<TestEngine> {
  // A misspelt option (`fault: [...]`, `event`) was dropped: the test ran without what it
  // scripted, and passed, testing nothing.
  const unknown = unknownOptionNames(options, TEST_ENGINE_OPTIONS);
  if (unknown.length > 0) {
    throw new TypeError(`createTestEngine(): ${unknownOptionsText(unknown, TEST_ENGINE_OPTIONS)}`);
  }
  const t = openTestEngine(options, { checkFaults: true });
  await registerCleanup(() => t.close());
  return t;
}

/** For harnesses built on a test engine (crash-sweep.ts): crash points on the first
 *  engine's store, and a hook before every step function and effect perform. */
export interface TestEngineInternals {
  firstStore?: CrashableStoreOptions;
  beforeFunction?: (call: CallInfo) => void | Promise<void>;
  /** close() rejects when a fault script entry matched no call (createTestEngine's; a
   *  sweep's executions may each stop short of a fault by design). */
  checkFaults?: boolean;
}

export function openTestEngine(
  options: TestEngineOptions,
  internals: TestEngineInternals = {},
): TestEngine {
  if (!options || !Array.isArray(options.workflows)) {
    throw new TypeError(
      "createTestEngine({ workflows }): workflows must be an array of workflow()s",
    );
  }
  const clock = createVirtualClock(options.clockStart);
  const sideEffects = options.sideEffects ?? createSideEffectCounter();
  const storage = testStorage(options.store);
  const faults = faultHook(options.faults ?? []);
  const maxIdleWakes = options.maxIdleWakes ?? DEFAULT_MAX_IDLE_WAKES;
  if (!(Number.isInteger(maxIdleWakes) && maxIdleWakes >= 1)) {
    throw new TypeError(
      `createTestEngine: maxIdleWakes must be a whole number >= 1 (got ${JSON.stringify(options.maxIdleWakes)})`,
    );
  }
  // Step and effect functions started, by any engine of this test engine: the drives' sign
  // that timers woke the runs to some work (drive.ts).
  let work = 0;
  const hook = async (call: CallInfo) => {
    work++;
    await internals.beforeFunction?.(call);
    await faults(call);
  };
  const engineOptions: EngineOptions = {
    leaseMs: 10_000,
    pollIntervalMs: 10,
    closeGraceMs: 1_000,
    ...options.engineOptions,
  };
  // Workspaces given no `dir` go to a temporary directory of this test engine's (shared by
  // the engines it starts, as one machine's), not to .cairn/workspaces in the current
  // directory, where every test engine, sweep execution and test run would find what the
  // last one left under the same run id.
  const workspaceRoot =
    engineOptions.workspaceRoot === undefined
      ? mkdtempSync(join(tmpdir(), "cairn-test-workspaces-"))
      : undefined;
  if (workspaceRoot) engineOptions.workspaceRoot = workspaceRoot;
  const serving = servingEngines({
    newStore: storage.newStore,
    clock,
    engineOptions,
    hook,
    firstStore: internals.firstStore,
  });
  serving.open(options.workflows);
  let closed = false;

  // The harness reads and sends through a client engine of its own, so that it keeps
  // working while the serving engine is dead.
  const observer = createEngine({ store: storage.newStore(), clock, worker: false });
  const drive = driverFor(observer, clock, {
    work: () => work,
    maxIdleWakes,
    caughtUp: renewalsCaughtUp(serving),
  });

  const t: TestEngine = {
    get engine() {
      return serving.engine;
    },
    clock,
    sideEffects,
    start: ((wf: never, input: unknown, o?: never) => {
      // The dead engine's store never answers: say so rather than hang.
      if (serving.store.crashed) {
        return Promise.reject(
          new Error(
            "start: the engine crashed; call recover() (or deploy()) to start a new one, then start",
          ),
        );
      }
      return serving.engine.start(wf, input, o);
    }) as Engine["start"],
    ...runWaits(drive, observer, clock, () => serving.store.crashed),
    get crashed() {
      return serving.store.crashed;
    },
    ...crashAndDeploy(serving, clock, sideEffects, engineOptions.leaseMs ?? 10_000),
    store() {
      // After close the temporary file is gone: a new connection would make an empty one.
      if (closed) throw new Error("store(): this test engine is closed; its storage is gone");
      return storage.newStore();
    },
    async close() {
      if (closed) return;
      closed = true;
      if (!serving.store.crashed) await serving.engine.close().catch(() => {});
      await observer.close().catch(() => {});
      if (storage.dir) rmSync(storage.dir, { recursive: true, force: true });
      if (workspaceRoot) rmSync(workspaceRoot, { recursive: true, force: true });
      const unfired = internals.checkFaults ? faults.unfired() : undefined;
      if (unfired) throw new Error(unfired);
    },
    [Symbol.asyncDispose]() {
      return t.close();
    },
  };
  return t;
}

/** A new connection to the test's storage on each call: the test's own, or a temporary
 *  SQLite file in `dir` (removed on close). */
function testStorage(store: (() => Store) | undefined): { newStore: () => Store; dir?: string } {
  if (store) return { newStore: store };
  const dir = mkdtempSync(join(tmpdir(), "cairn-test-"));
  const path = join(dir, "cairn.db");
  return { newStore: () => sqliteStore(path, { synchronous: "normal" }), dir };
}

/** The engine serving the test, and its store: a new pair on each `open` (the first, and
 *  after a crash or a deploy). Only the first store carries the harness's crash points. */
function servingEngines(p: {
  newStore: () => Store;
  clock: VirtualClock;
  engineOptions: EngineOptions;
  /** Runs before every step function and effect perform. */
  hook: (call: CallInfo) => Promise<void>;
  firstStore: CrashableStoreOptions | undefined;
}) {
  const { newStore, clock, engineOptions, hook } = p;
  let storeHooks = p.firstStore;
  let workflows: AnyWorkflow[] = [];
  let store!: CrashableStore;
  let engine!: Engine;
  return {
    get engine() {
      return engine;
    },
    get store() {
      return store;
    },
    /** The workflows the serving engine was opened with. */
    get workflows() {
      return workflows;
    },
    open(wfs: AnyWorkflow[]): Engine {
      workflows = wfs;
      const own = crashableStore(newStore(), storeHooks);
      store = own;
      storeHooks = undefined;
      engine = createEngine({
        ...engineOptions,
        store,
        clock,
        workflows: instrumentWorkflows(wfs, {
          // A function of an engine that has crashed (before it, or in a fault script's
          // `run` right here) never starts: a killed worker runs nothing more.
          beforeFunction: async (call) => {
            if (!own.crashed) await hook(call);
            if (own.crashed) await new Promise<never>(() => {});
          },
          // What this engine's bodies record once it crashed is not counted.
          runBody: (fn) => runForEngine(() => own.crashed, fn),
        }),
      });
      return engine;
    },
  };
}

/** What a test does to the serving engine: kill it, take its runs over after the lease, or
 *  replace it gracefully with new code. */
function crashAndDeploy(
  serving: ReturnType<typeof servingEngines>,
  clock: VirtualClock,
  sideEffects: SideEffectCounter,
  leaseMs: number,
): Pick<TestEngine, "crash" | "recover" | "deploy"> {
  return {
    crash() {
      sideEffects.paused = true;
      serving.store.crash();
    },
    async recover(o = {}) {
      if (!serving.store.crashed) {
        throw new Error("recover(): the engine has not crashed; call crash() first, or deploy()");
      }
      await clock.advance(leaseMs + 1);
      sideEffects.paused = false;
      return serving.open(o.workflows ?? serving.workflows);
    },
    async deploy(wfs: AnyWorkflow[]) {
      if (!serving.store.crashed) await serving.engine.close();
      sideEffects.paused = false;
      return serving.open(wfs);
    },
  };
}

type Drive = <T>(what: string, done: () => Promise<T | undefined>, o?: DriveExtras) => Promise<T>;

/** Moves the clock until `done` returns a value, looking through the observer; scripted
 *  events are sent as soon as their run waits for them. */
function driverFor(
  observer: Engine,
  clock: VirtualClock,
  idle: { work: () => number; maxIdleWakes: number; caughtUp: () => Promise<void> },
): Drive {
  const sendDue = async (events: ScriptEntry[], sent: Set<number>) => {
    let any = false;
    for (const [i, ev] of events.entries()) {
      if (sent.has(i) || !ev.runId) continue;
      const v = await observer.getRun(ev.runId);
      if ("approval" in ev) {
        if (v?.status !== "waiting" || !asksApproval(v.waitingFor)) continue;
        const asked = (await observer.listApprovals(ev.runId)).find(
          (a) => a.status === "pending" && (a.key === ev.approval || a.name === ev.approval),
        );
        if (!asked) continue;
        sent.add(i);
        const answer = {
          ...(ev.by !== undefined && { by: ev.by }),
          ...(ev.comment !== undefined && { comment: ev.comment }),
          ...(ev.answer !== undefined && { answer: ev.answer }),
        };
        if (ev.decision === "rejected") await observer.reject(ev.runId, asked.key, answer);
        else await observer.approve(ev.runId, asked.key, answer);
        any = true;
      } else if (v?.status === "waiting" && v.waitingFor?.includes(ev.name)) {
        sent.add(i);
        await observer.sendEvent(ev.runId, ev.name, ev.payload);
        any = true;
      }
    }
    return any;
  };
  return (what, done, o = {}) =>
    driveUntil({
      engine: () => observer,
      clock,
      what,
      tickMs: o.tickMs,
      done: async () => {
        await o.beforeTick?.();
        return done();
      },
      onTick: () => sendDue(o.events ?? [], o.sent ?? new Set()),
      work: idle.work,
      maxIdleWakes: idle.maxIdleWakes,
      caughtUp: idle.caughtUp,
    });
}

/** How long a drive waits for one renewal round before it moves the clock on regardless. */
const RENEWAL_WAIT_MS = 5_000;
/** How often a drive waiting for a renewal round looks whether the engine crashed. */
const CRASH_LOOK_MS = 10;

/**
 * Waits, after the drive moved the clock, for the lease renewals the move set off in the
 * serving engine. Without it the clock ran a second per tick past renewals a slow store had
 * not answered (PostgreSQL under load): a worker whose last answered renewal is a lease
 * behind its clock takes its leases for lost, and an effect stops its execution rather
 * than perform, so the run was executed again from the top with nothing crashed. Not for a
 * crashed engine (its store never answers, also a round it had begun), nor one replaced
 * meanwhile; a round that hangs (a stalled store in a fault test) is waited for once,
 * within RENEWAL_WAIT_MS, then the clock moves on without it, as it must for that worker's
 * leases to run out.
 */
function renewalsCaughtUp(serving: ReturnType<typeof servingEngines>): () => Promise<void> {
  let givenUp: Promise<void> | undefined;
  return async () => {
    const engine = serving.engine;
    const round = heartbeatInFlight(engine);
    if (round === undefined || round === givenUp) return;
    let answered = false;
    void round.finally(() => {
      answered = true;
    });
    const deadline = Date.now() + RENEWAL_WAIT_MS;
    const moot = () => serving.store.crashed || serving.engine !== engine;
    while (!answered && !moot()) {
      if (Date.now() >= deadline) {
        givenUp = round;
        return;
      }
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        round.catch(() => {}),
        new Promise((r) => {
          timer = setTimeout(r, CRASH_LOOK_MS);
        }),
      ]);
      clearTimeout(timer);
    }
  };
}

/** The test engine's ways of waiting for a run: each drives the clock until it holds. */
function runWaits(
  drive: Drive,
  observer: Engine,
  clock: VirtualClock,
  crashed: () => boolean,
): Pick<TestEngine, "settle" | "advanceUntil" | "advanceUntilStatus" | "timeOutWait"> {
  return {
    settle(run, o = {}) {
      const id = idOf(run);
      try {
        checkScript(o.events, "settle");
      } catch (err) {
        return Promise.reject(err);
      }
      const events = (o.events ?? []).map((e) => ({ ...e, runId: e.runId ?? id }));
      const sent = new Set<number>();
      let checks = 0;
      let finishedAlready = false;
      return drive(
        `run "${id}" to finish`,
        async () => {
          if (crashed() && !o.beforeTick) {
            throw new Error(
              `settle: the engine crashed while run "${id}" was not finished; call recover() to start a new one, then settle`,
            );
          }
          const v = await observer.getRun(id);
          if (!v) throw new Error(`settle: no run "${id}" in this test engine's store`);
          checks++;
          if (checks === 1 && FINISHED.has(v.status)) finishedAlready = true;
          return FINISHED.has(v.status) ? v : undefined;
        },
        { events, sent, beforeTick: o.beforeTick },
      ).then((v) => {
        // An entry the run never waited for (a typo in its name, a wait this path does not
        // reach) was never sent, and the run finished some other way (a wait's timeout):
        // the test passed having tested another path than it meant.
        const unsent = events.flatMap((e, i) => (sent.has(i) ? [] : [unsentEntry(e, i, id)]));
        if (unsent.length > 0 && !finishedAlready) {
          throw new Error(
            `settle: run "${id}" finished (${v.status}) without using ${unsent.join(", ")}: no run waited for ${unsent.length === 1 ? "it" : "them"} (a name with a typo, or a wait this path of the run does not reach; an entry is sent only once its run waits for it). Fix the entry, or leave it out`,
          );
        }
        return v;
      });
    },
    advanceUntil(check, what = "the condition") {
      return drive(what, async () => ((await check()) ? true : undefined), { tickMs: 100 });
    },
    advanceUntilStatus(run, status) {
      const id = idOf(run);
      // A status no run has ("wating") was waited for until the drive gave up, saying only
      // that no run could progress.
      if (!STATUSES.includes(status)) {
        return Promise.reject(
          new TypeError(
            `advanceUntilStatus(run "${id}", ${JSON.stringify(status)}): no run has that status; a status is one of ${STATUSES.join(", ")}`,
          ),
        );
      }
      // Ticks only: jumping to the next timer could skip past the status wanted.
      return drive(
        `run "${id}" to be ${status}`,
        async () => {
          const v = await observer.getRun(id);
          return v?.status === status ? v : undefined;
        },
        { tickMs: 100 },
      );
    },
    async timeOutWait(run, name) {
      const id = idOf(run);
      let approval = false;
      const v = await drive(
        `run "${id}" to wait for "${name}"`,
        async () => {
          const r = await observer.getRun(id);
          if (r?.status !== "waiting" || !r.waitingFor) return undefined;
          if (r.waitingFor.includes(name)) return r;
          // An approval is a wait too: its name (the asking that waits: `merge`, or a later
          // `merge#2`) or its key. It was given up on as "no run can progress".
          approval = r.waitingFor.some(
            (w) =>
              w === `${APPROVAL_EVENT_PREFIX}${name}` ||
              w.startsWith(`${APPROVAL_EVENT_PREFIX}${name}#`),
          );
          return approval ? r : undefined;
        },
        { tickMs: 100 },
      );
      if (!v.wakeAt) {
        throw new Error(
          approval
            ? `timeOutWait: run "${id}" asks approval "${name}" without a timeout; give ctx.approval a timeout, or answer it`
            : `timeOutWait: run "${id}" waits for "${name}" without a timeout; give the wait a timeout, or send the event`,
        );
      }
      await clock.set(v.wakeAt.getTime() + 1);
    },
  };
}

/** `events` entry `i` in words: `event "go" (entry 1)`, `approval "merge" of run "c" (entry 2)`. */
function unsentEntry(e: ScriptEntry & { runId: string }, i: number, settled: string): string {
  const what =
    "approval" in e ? `approval ${JSON.stringify(e.approval)}` : `event ${JSON.stringify(e.name)}`;
  const of = e.runId === settled ? "" : ` of run ${JSON.stringify(e.runId)}`;
  return `${what}${of} (entry ${i + 1})`;
}

function idOf(run: RunHandle | string): string {
  return typeof run === "string" ? run : run.id;
}

/** Inside a vitest test, close after it (vitest is an optional peer: without it, or outside
 *  a test, the caller closes). */
async function registerCleanup(fn: () => Promise<void>): Promise<void> {
  try {
    const vitest = await import("vitest");
    vitest.onTestFinished(fn);
  } catch {
    // not in a vitest test
  }
}
