// The scaffold of the replay swap findings (replay-journal-end-*, replay-intent-*,
// replay-output-swap, replay-hold-untracked-wait): a run whose worker dies right after a
// record (or a perform) of its first execution, then a replay on a new engine once the
// lease has run out, in which the workflow's own work is slower. The workflow reads
// `c.firstRun` to behave as the first execution or as the replay, and calls `c.crash()`
// where its worker dies (from then on that engine's store never answers).

import { readFile } from "node:fs/promises";
import { expect } from "vitest";
import { type AnyWorkflow, type Engine, type WorkflowContext, workflow } from "../../src/index.js";
import { crashableEngine } from "./crash.js";
import type { Harness } from "./engines.js";
import { until } from "./sqlite.js";

export const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const never = () => new Promise<never>(() => {});

/** Which execution the workflow is in, and the crash of the first one. */
export interface CrashReplay {
  /** True in the first execution, false in the replay. */
  firstRun: boolean;
  /** The first execution's worker has died (crash() was called). */
  crashed: boolean;
  /** The first execution's worker dies now: it writes nothing more. */
  crash(): void;
}

/** Work of the workflow's own (no call): none in the first execution; in the replay a file
 *  read then `replayMs` of timer, so that a call after it comes late. */
export function ownWork(c: CrashReplay, replayMs: number): Promise<unknown> {
  return c.firstRun ? delay(0) : readThenDelay(replayMs);
}

/** A file read, then `ms` of timer. */
export function readThenDelay(ms: number): Promise<unknown> {
  return readFile(new URL(import.meta.url), "utf8").then(() => delay(ms));
}

/** Branch B's race: step "q" against a timer of its own. The first execution's q never
 *  ends (nothing of B after it is recorded); in the replay the timer (100 ms) wins, so B's
 *  next call comes early. */
export function raceOwnTimer(ctx: WorkflowContext, c: CrashReplay): Promise<unknown> {
  const timer = c.firstRun ? never() : delay(100);
  const q = ctx.step("q", () => (c.firstRun ? never() : delay(400).then(() => "q")));
  return Promise.race([q, timer]);
}

/** Effect "x" for `id`, through a provider that applies each idempotency key once and tells
 *  what it did under it (`provider`: key to id): the first execution's worker dies while its
 *  perform runs (the intent is written, the record never), a replay reconciles with the
 *  provider. `performs` notes each perform's id. */
export function effectX(
  ctx: WorkflowContext,
  c: CrashReplay,
  id: string,
  provider: Map<string, string>,
  performs: string[] = [],
): Promise<unknown> {
  return ctx.effect("x", {
    perform: (key) => {
      performs.push(id);
      provider.set(key, id);
      if (c.firstRun) {
        // The perform happened: the worker dies before its record.
        c.crash();
        return never();
      }
      return id;
    },
    reconcile: (key) => provider.get(key),
  });
}

/** An effect "send" performed with `v`, noted in `performed` as "b sent <v>". */
export function sendWith(ctx: WorkflowContext, v: unknown, performed: string[]): Promise<unknown> {
  return ctx.effect("send", {
    perform: () => {
      performed.push(`b sent ${v}`);
      return v;
    },
    reconcile: () => undefined,
  });
}

/** The hand-overs "id=value" in `got` where a call was handed another call's value. */
export function swaps(got: string[]): string[] {
  return got.filter((g) => g.split("=")[0] !== g.split("=")[1]);
}

/** A run's result on `e`, or the name of the error it ended with. */
export function outcome(e: Engine, runId: string): Promise<unknown> {
  return e
    .handle(runId)
    .result()
    .catch((err: Error) => err.name);
}

export interface Replayed {
  wf: AnyWorkflow;
  runId: string;
  /** The engine that replays the run (started after the lease ran out). */
  replay: Engine;
}

/** Starts the workflow `build` makes on an engine that dies where it calls `c.crash()`,
 *  waits for that crash (`crashed` says what it is), calls `beforeReplay` (what the first
 *  execution left), then lets the lease run out and starts the engine that replays it. */
export async function crashAfterRecordThenReplay(
  h: Harness,
  build: (c: CrashReplay) => AnyWorkflow,
  opts: { crashed: string; beforeReplay?: (runId: string) => unknown },
): Promise<Replayed> {
  let kill = () => {};
  const c: CrashReplay = {
    firstRun: true,
    crashed: false,
    crash() {
      kill();
      c.crashed = true;
    },
  };
  const wf = build(c);
  const first = crashableEngine(h, [wf]);
  kill = first.crash;
  const run = await first.engine.start(wf, undefined);
  await until(() => c.crashed, opts.crashed);
  await opts.beforeReplay?.(run.id);
  c.firstRun = false;
  await h.clock.advance(60_000);
  return { wf, runId: run.id, replay: h.engine([wf]) };
}

/** What the replay of a journal-end swap did (journalEndSwap). */
export interface SwapVerdict {
  /** Calls of x handed the other call's value ("b=a"). */
  swaps: string[];
  /** Effects performed with what x handed ("b sent a"). */
  performed: string[];
  /** The effect's records ("send=a"). */
  sent: string[];
  /** The run's result, or the name of the error it ended with. */
  outcome: unknown;
}

/** The replay refused the run before anything of x was handed to the wrong call. */
export const REFUSED_UNSWAPPED: SwapVerdict = {
  swaps: [],
  performed: [],
  sent: [],
  outcome: "NonDeterminismError",
};

/** A swap at the end of a journal (replay-journal-end-swap-findings and the files that swap
 *  its own work). Branch A, the owner, joins step "m" with work of its own, then calls x
 *  ("a"); the first execution's worker dies right after that record (before q, or B's x,
 *  has one). Branch B races step "q" against a timer of its own (raceOwnTimer), then calls x
 *  ("b") and performs an effect with what x handed it (sendWith). The first execution has no
 *  own work (A's x is made in m's cascade); the replay waits for `replayWork()`, so A's call
 *  comes late, while B's timer wins and B's call comes first: the name's first call, which
 *  takes A's record. Resolves to what the replay did. */
export async function journalEndSwap(
  h: Harness,
  name: string,
  replayWork: () => Promise<unknown>,
): Promise<SwapVerdict> {
  const got: string[] = [];
  const performed: string[] = [];
  const { runId, replay } = await crashAfterRecordThenReplay(
    h,
    (c) =>
      workflow({ name, version: "1" }, async (ctx: WorkflowContext) => {
        const x = async (id: string) => {
          const v = await ctx.step("x", () => delay(5).then(() => id));
          got.push(`${id}=${v}`);
          return v;
        };
        await Promise.all([
          (async () => {
            await Promise.all([
              ctx.step("m", () => delay(50).then(() => "m")),
              c.firstRun ? undefined : replayWork(),
            ]);
            await x("a");
            // A's record is durable: the worker dies here, before q or B's x has a record.
            if (c.firstRun) c.crash();
          })(),
          (async () => {
            await raceOwnTimer(ctx, c);
            await sendWith(ctx, await x("b"), performed);
          })(),
        ]);
        return "done";
      }),
    {
      crashed: "A's x is recorded and the worker dies",
      beforeReplay: () => {
        expect(got).toEqual(["a=a"]);
        got.length = 0;
      },
    },
  );
  const out = await outcome(replay, runId);
  const steps = await replay.getSteps(runId);
  return {
    swaps: swaps(got),
    performed,
    sent: steps.filter((s) => s.key.startsWith("send")).map((s) => `${s.key}=${s.result}`),
    outcome: out,
  };
}
