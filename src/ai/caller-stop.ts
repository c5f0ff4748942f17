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
//
// A tool with a timeout of its own (the SDK's `timeout.toolMs`) is handed
// `AbortSignal.any([loop's signal, its timer])`, not the signal of the loop's model calls:
// a stop marked on it alone let the replay's next model call be made. So each tool call is
// linked to the signal of the model call whose answer holds it (noteLoopSignal), and a stop
// of that loop is marked on it too: when the loop's signal fired (in this execution), or,
// for a replayed record, when the stop is an AbortError (a tool's own timeout is always a
// TimeoutError; a loop stopped by a timeout of its own, a TimeoutError too, is not told
// apart from the tool's and goes on as before).

import type { WorkflowContext } from "../index.js";
import { toolKey } from "./tool-order.js";

const stops = new WeakMap<WorkflowContext, WeakMap<AbortSignal, Error>>();

/** Whether `err` is a call's caller abort, as made by callerAborted() or rebuilt from its
 *  record: a FatalError named as the abort's error, or, for a reason of the caller's own
 *  name, one whose code is CALLER_ABORTED. */
export function isCallerAbort(err: unknown): err is Error {
  const e = err as { code?: unknown; name?: unknown } | null | undefined;
  return (
    err instanceof Error &&
    (e?.code === "CALLER_ABORTED" ||
      (e?.code === "FATAL" && (e.name === "AbortError" || e.name === "TimeoutError")))
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

/** The signal of the model call whose answer holds each tool call not yet made, by toolKey. */
const loops = new WeakMap<WorkflowContext, Map<string, AbortSignal>>();

/** Notes the tool calls of a model call's answer (`parts`: its content or stream parts),
 *  made with `signal`. */
export function noteLoopSignal(
  ctx: WorkflowContext,
  parts: ReadonlyArray<{ type: string }> | undefined,
  signal: AbortSignal | undefined,
): void {
  if (!signal) return;
  let mine = loops.get(ctx);
  if (!mine) {
    mine = new Map();
    loops.set(ctx, mine);
  }
  // A loop stopped since makes none of its tool calls left: its links are dropped.
  for (const [key, linked] of mine) {
    if (linked.aborted || stopOf(ctx, linked)) mine.delete(key);
  }
  for (const p of parts ?? []) {
    if (p.type !== "tool-call") continue;
    const c = p as { toolName?: unknown; toolCallId?: unknown; providerExecuted?: unknown };
    if (c.providerExecuted === true) continue;
    // The newest answer's: a link left by a tool call the SDK never made (its input failed
    // the tool's schema, so the SDK answered the model with a tool error itself) is older,
    // and a later loop's answer reuses its id (providers number calls per answer: call_0).
    // Linked to none when two signals held it, a caller's stop in that later loop's tool
    // with a signal of its own (timeout.toolMs) did not stop the replay's loop. (Two loops
    // in flight at once answering the same tool and id cannot be told apart either way.)
    mine.set(toolKey(String(c.toolName), String(c.toolCallId)), signal);
  }
}

/** The signal of the loop a tool call comes from (see noteLoopSignal), taken: the next
 *  answer with this tool and id is another turn's. */
export function takeLoopSignal(
  ctx: WorkflowContext,
  toolName: string,
  toolCallId: string,
): AbortSignal | undefined {
  const mine = loops.get(ctx);
  const key = toolKey(toolName, toolCallId);
  const signal = mine?.get(key);
  mine?.delete(key);
  return signal;
}

/** Whether a tool call's caller abort `abort`, handed the tool through `toolSignal`, also
 *  stopped `loop`, the signal of its model calls (see the header). */
export function stopsLoop(
  loop: AbortSignal | undefined,
  toolSignal: AbortSignal,
  abort: Error,
  replayed: boolean,
): loop is AbortSignal {
  if (!loop || loop === toolSignal) return false;
  const callersOwn =
    abort.name === "AbortError" || (abort as { code?: unknown }).code === "CALLER_ABORTED";
  return loop.aborted || (replayed && callersOwn);
}
