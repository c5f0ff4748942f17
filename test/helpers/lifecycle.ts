// Scenarios and probes the worker-lifecycle findings tests share (runs held for a step body
// that runs on, hand-backs, crash charges): a run whose worker crashed in its step, a slow
// call beside a fast one, a store error at a step's record, how a run ended, and the
// lifecycle lines of hand-backs.

import { afterEach } from "vitest";
import {
  type AnyWorkflow,
  createEngine,
  type Engine,
  type Store,
  workflow,
} from "../../src/index.js";
import type { RunWrite } from "../../src/store/store.js";
import { crashableStore } from "../../src/testing/crashable-store.js";
import { createVirtualClock, type VirtualClock, writesStep } from "../../src/testing/index.js";
import type { RetryPolicy } from "../../src/workflow/retry.js";
import { advanceUntil } from "./engines.js";
import { until } from "./sqlite.js";
import { around, gate } from "./store-verbs.js";

export type Cleanups = Array<() => Promise<void> | void>;

/** What a test leaves to undo (engines to close, gates to open, storage to remove), undone
 *  after each test, last first. */
export function cleanupsAfterEach(): Cleanups {
  const cleanups: Cleanups = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });
  return cleanups;
}

/** Closes `engine`, whose store crashed (a dead process), after the test without waiting
 *  for it: its close() waits out each of its bounds on a store that never answers again
 *  (seconds per engine, testing nothing), and ends by itself meanwhile. */
export function closeDeadEngine(engine: Engine, cleanups: Cleanups): void {
  cleanups.push(() => {
    void engine.close().catch(() => {});
  });
}

/** A run "r" of workflow "crashy" (one step "s") whose worker crashed in the step's body,
 *  that body left hanging; the clock is past its lease unless `pastLease` is false.
 *  `bodies()`: how often the body ran. */
export async function crashedRun(
  makeStore: () => Store,
  cleanups: Cleanups,
  { retry, pastLease = true }: { retry?: Partial<RetryPolicy>; pastLease?: boolean } = {},
) {
  const clock = createVirtualClock();
  let bodies = 0;
  const hang = gate();
  const wf = workflow({ name: "crashy", version: "1", ...(retry && { retry }) }, async (ctx) =>
    ctx.step("s", async () => {
      bodies++;
      if (bodies === 1) {
        crashing.crash();
        await hang.opened;
      }
      return "ran";
    }),
  );
  const crashing = crashableStore(makeStore());
  const a = createEngine({
    store: crashing,
    workflows: [wf],
    clock,
    pollIntervalMs: 10,
    closeGraceMs: 0,
    log: () => {},
  });
  // The dead engine's step body is let go before its close, which is not waited for.
  closeDeadEngine(a, cleanups);
  cleanups.push(hang.open);
  await a.start(wf, undefined, { id: "r" });
  await until(() => crashing.crashed, "the worker crashed in the step");
  await crashing.settled();
  if (pastLease) await clock.advance(60_000);
  return { clock, wf, bodies: () => bodies };
}

/** How run `runId` ended under `engine` (its output, or its error's name), the clock
 *  advanced meanwhile. */
export function outcomeOf(engine: Engine, clock: VirtualClock, runId = "r"): Promise<unknown> {
  const result = engine
    .handle(runId)
    .result()
    .then(
      (v) => v,
      (e: Error) => e.name,
    );
  return advanceUntil(clock, result, 1_000, 200);
}

/** A workflow whose call "slow" (a step, or an effect's perform) waits for `latch` in its
 *  body, beside a step "fast" that ends once "slow" has begun; `seen` counts the bodies of
 *  "slow" begun and how many ran at once. */
export function slowBeside(kind: "step" | "effect", cleanups: Cleanups) {
  const latch = gate();
  const began = gate();
  const seen = { begun: 0, running: 0, most: 0 };
  const slowBody = async () => {
    seen.begun++;
    began.open();
    seen.running++;
    seen.most = Math.max(seen.most, seen.running);
    try {
      await latch.opened;
    } finally {
      seen.running--;
    }
    return "slow";
  };
  const wf = workflow({ name: `slow-${kind}`, version: "1" }, async (ctx) =>
    Promise.all([
      kind === "step"
        ? ctx.step("slow", slowBody)
        : ctx.effect("slow", { perform: slowBody, reconcile: () => undefined }),
      // Ends once "slow" has begun (an effect's perform begins after its intent's write).
      ctx.step("fast", async () => {
        await began.opened;
        return "fast";
      }),
    ]),
  );
  cleanups.push(latch.open);
  return { wf, latch, seen };
}

/** `inner`, whose first write recording step `key` fails (a store error), counting its
 *  claim rounds: `state.failed` once it has, `state.claims` so far. */
export function failingAtStep(inner: Store, key: string) {
  const state = { failed: false, claims: 0 };
  const store = around(inner, {
    appendRecords: async (call, ...args) => {
      if (!state.failed && writesStep(args[0] as RunWrite[], key)) {
        state.failed = true;
        throw new Error("connection reset (injected)");
      }
      return call(...args);
    },
    claimRuns: async (call, ...args) => {
      state.claims++;
      return call(...args);
    },
  });
  return { store, state };
}

/** Advances the clock past a lease `times` times, each followed by claim rounds. */
export async function roundsPastLease(
  clock: VirtualClock,
  claims: () => number,
  times = 3,
  stop: () => boolean = () => false,
): Promise<void> {
  for (let i = 0; i < times && !stop(); i++) {
    await clock.advance(40_000);
    const now = claims();
    await until(() => claims() > now + 2 || stop(), "claim rounds");
  }
}

/** A logger that keeps the worker's lifecycle lines; `endings()`: the lines that say a run
 *  was let go (released, or canceled). */
export function lifecycleLines() {
  const events: Array<{ event: string; status?: string; runId?: string }> = [];
  const logger = {
    debug: () => {},
    info: (f: object) => events.push(f as { event: string; status?: string }),
    warn: () => {},
    error: () => {},
  };
  const endings = () => events.filter((e) => e.event === "canceled" || e.event === "released");
  return { logger, events, endings };
}

/** Whether a write (appendRecords' writes) charges a crash: a lost attempt (WORKER_LOST). */
export function chargesACrash(writes: unknown): boolean {
  return (writes as RunWrite[]).some((w) =>
    w.attempts?.some((a) => a.error?.code === "WORKER_LOST"),
  );
}

/** How run "r" ends (see outcomeOf) under a worker of `wf` started afresh on the storage,
 *  which resumes it first when `resume`. */
export async function outcomeUnderNewWorker(
  makeStore: () => Store,
  wf: AnyWorkflow,
  clock: VirtualClock,
  cleanups: Cleanups,
  { resume = false }: { resume?: boolean } = {},
): Promise<unknown> {
  const engine = createEngine({ store: makeStore(), workflows: [wf], clock, pollIntervalMs: 10 });
  cleanups.push(() => engine.close());
  if (resume) await engine.resume("r");
  return outcomeOf(engine, clock);
}
