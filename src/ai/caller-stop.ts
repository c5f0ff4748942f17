// Where the caller's abort stopped an SDK loop, told again on a replay. The SDK reads the
// caller's signal itself: before each model call of a tool loop after the first it throws
// the signal's reason without calling the model, so no cairn code runs and nothing is
// recorded there. A replay, whose signal has not fired (a timer's timeout, a stop that came
// from a tool it does not run again), went on past that point and made the next call,
// paid, and the run ended with another output than its first execution had.
//
// So the abort is recorded as the outcome of the call it landed in: a tool call that ends
// with the SDK's signal aborted records the caller's abort (tools.ts). When that outcome
// comes back (the first execution or a replay), the signal the tool was given is marked
// stopped for this execution; a model call the SDK then makes with that same signal (a
// replay only: in the first execution the SDK stopped) ends with the same abort, recorded
// as its own outcome (model-attempt.ts). Marked by the signal object itself, so a tool
// whose own timeout fired (the SDK hands it a signal of its own) stops nothing: the SDK's
// loop went on then.

import type { WorkflowContext } from "../index.js";

const stops = new WeakMap<WorkflowContext, WeakMap<AbortSignal, Error>>();

/** Whether `err` is a call's caller abort, as made by callerAborted() or rebuilt from its
 *  record: a FatalError named as the abort's error. */
export function isCallerAbort(err: unknown): err is Error {
  const e = err as { code?: unknown; name?: unknown } | null | undefined;
  return (
    err instanceof Error &&
    e?.code === "FATAL" &&
    (e.name === "AbortError" || e.name === "TimeoutError")
  );
}

/** Marks `signal` as stopped by `abort` in this execution of the run. */
export function markStopped(ctx: WorkflowContext, signal: AbortSignal, abort: Error): void {
  let mine = stops.get(ctx);
  if (!mine) {
    mine = new WeakMap();
    stops.set(ctx, mine);
  }
  if (!mine.has(signal)) mine.set(signal, abort);
}

/** The abort that stopped `signal` in this execution, if any. */
export function stopOf(ctx: WorkflowContext, signal: AbortSignal | undefined): Error | undefined {
  return signal ? stops.get(ctx)?.get(signal) : undefined;
}
