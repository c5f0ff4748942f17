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
// replay only: in the first execution the SDK stopped) fails with the same abort ahead of
// its step, recording nothing (model.ts; as a step it took the next number of the model's
// name, whose record is another call's). Marked by the signal object itself, so a tool whose own
// timeout fired (the SDK hands it a signal of its own) stops nothing: the SDK's loop went on
// then.
//
// Whether a record is such a stop: a tool call's record says so by its code,
// CALLER_ABORTED, given when the loop's own signal had fired as the call ended (tools.ts).
// Older records (and a tool's own error named AbortError) say FATAL under the abort's
// name: such a stop is marked "doubtful", and the model call it stops is made as a step as
// before, so a recorded answer (the first execution went on) is still handed over.
//
// A tool with a timeout of its own (the SDK's `timeout.toolMs`) is handed
// `AbortSignal.any([loop's signal, its timer])`, not the signal of the loop's model calls:
// a stop marked on it alone let the replay's next model call be made. So each tool call is
// linked to the signal of the model call whose answer holds it, and a stop of that loop is
// marked on it too: when the loop's signal fired (in this execution), or, for a replayed
// record, when it says CALLER_ABORTED or is an AbortError (a tool's own timeout is a
// TimeoutError). Two loops at once answering the same tool and id (a mock's "call-1") are
// told apart by the signals the tool's signal follows (takeLoopSignal).
//
// A stop marked on a signal also stops a signal that follows it (AbortSignal.any: a loop
// of the caller's signal and one of its own), and a stop on a loop's merged signal
// (`timeout.totalMs`) is marked on the caller's signal it follows too (stopEntry,
// withCallerSource): a loop whose stop landed between its steps, with no tool to record
// it, stops in its replay where the stop's record is handed over.

import type { WorkflowContext } from "../index.js";
import { toolKey } from "./tool-order.js";

interface Stop {
  abort: Error;
  /** False for a record that may be a tool's own error (see the header). */
  certain: boolean;
}

const stops = new WeakMap<WorkflowContext, WeakMap<AbortSignal, Stop>>();

/** Whether `err` is a call's caller abort, as made by callerAborted() or rebuilt from its
 *  record: a FatalError named as the abort's error, or one whose code is CALLER_ABORTED. */
export function isCallerAbort(err: unknown): err is Error {
  const e = err as { code?: unknown; name?: unknown } | null | undefined;
  return (
    err instanceof Error &&
    (e?.code === "CALLER_ABORTED" ||
      (e?.code === "FATAL" && (e.name === "AbortError" || e.name === "TimeoutError")))
  );
}

/** Whether a caller abort says it stopped its loop (tools.ts gives the code). */
export const isLoopStop = (err: Error): boolean =>
  (err as { code?: unknown }).code === "CALLER_ABORTED";

/** Marks `signal` as stopped by `abort` in this execution of the run; `certain` when the
 *  stop is known to have ended the loop (see the header). */
export function markStopped(
  ctx: WorkflowContext,
  signal: AbortSignal,
  abort: Error,
  certain: boolean,
): void {
  let mine = stops.get(ctx);
  if (!mine) {
    mine = new WeakMap();
    stops.set(ctx, mine);
  }
  for (const s of certain ? withCallerSource(signal, abort) : [signal]) {
    const had = mine.get(s);
    if (!had) mine.set(s, { abort, certain });
    else if (certain) had.certain = true;
  }
}

/** `signal`, and the caller's signal it follows when that alone can have fired with
 *  `abort`. A loop given `timeout.totalMs` makes its model calls and tools with
 *  `AbortSignal.any([caller's, its timer])`: a stop marked on that alone left another loop
 *  of the same caller's signal going on in its replay (its stop landed in onStepFinish),
 *  into the next call's record. A stop that is not a TimeoutError came from a signal that is
 *  not a timer's (AbortSignal.timeout); when only one such signal is followed, it fired. */
function withCallerSource(signal: AbortSignal, abort: Error): AbortSignal[] {
  if (abort.name === "TimeoutError") return [signal];
  const callers = [...(signalSources(signal) ?? [])].filter((s) => !isTimerSignal(s));
  return callers.length === 1 ? [signal, callers[0] as AbortSignal] : [signal];
}

/** Whether Node made `signal` with AbortSignal.timeout() (its internal `kTimeout`). */
function isTimerSignal(signal: AbortSignal): boolean {
  const own = signal as unknown as Record<symbol, unknown>;
  const key = Object.getOwnPropertySymbols(signal).find((k) => k.description === "kTimeout");
  return key !== undefined && own[key] === true;
}

/** The abort that stopped `signal` in this execution, if any. */
export function stopOf(ctx: WorkflowContext, signal: AbortSignal | undefined): Error | undefined {
  return stopEntry(ctx, signal, false)?.abort;
}

/** The abort that certainly stopped `signal` in this execution, if any. */
export function certainStopOf(
  ctx: WorkflowContext,
  signal: AbortSignal | undefined,
): Error | undefined {
  return stopEntry(ctx, signal, true)?.abort;
}

/** The stop marked on `signal`, or on a signal it follows (`AbortSignal.any([caller's,
 *  own])`: fired with it in the first execution). Without the latter, a loop whose signal
 *  follows a stopped caller's went on where the first execution's SDK stopped it (its stop
 *  landed in onStepFinish, with no tool of its own to record it): its next model call took
 *  the next number of the model's name, another call's record. */
function stopEntry(
  ctx: WorkflowContext,
  signal: AbortSignal | undefined,
  certainOnly: boolean,
): Stop | undefined {
  const mine = signal ? stops.get(ctx) : undefined;
  if (!mine || !signal) return undefined;
  const fits = (s: Stop | undefined) => (s && (!certainOnly || s.certain) ? s : undefined);
  const own = fits(mine.get(signal));
  if (own) return own;
  for (const source of signalSources(signal) ?? []) {
    const followed = fits(mine.get(source));
    if (followed) return followed;
  }
  return undefined;
}

/** The signals of the model calls whose answers hold tool calls not yet made, by toolKey. */
const loops = new WeakMap<WorkflowContext, Map<string, AbortSignal[]>>();

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
    const live = linked.filter((l) => !l.aborted && !stopOf(ctx, l));
    if (live.length === 0) mine.delete(key);
    else if (live.length < linked.length) mine.set(key, live);
  }
  for (const p of parts ?? []) {
    if (p.type !== "tool-call") continue;
    const c = p as { toolName?: unknown; toolCallId?: unknown; providerExecuted?: unknown };
    if (c.providerExecuted === true) continue;
    const key = toolKey(String(c.toolName), String(c.toolCallId));
    mine.set(key, [...(mine.get(key) ?? []), signal]);
  }
}

/** Answers of several loops (signals) hold a tool call's tool and id, and which one it
 *  comes from cannot be read (a runtime without Node's record of AbortSignal.any): the
 *  loops it may come from. */
export interface UnknownLoop {
  candidates: AbortSignal[];
}

/** Keys of tool calls that answers of several loops hold, not all taken yet, by toolKey:
 *  those loops (see takeLoopSignal). */
const unknownLoops = new WeakMap<WorkflowContext, Map<string, AbortSignal[]>>();

/** The signal of the loop a tool call comes from, taken (the next answer with this tool
 *  and id is another turn's): of the answers holding this tool and id, the one whose signal
 *  the tool's (`toolSignal`) is, or follows (see signalSources); none when it follows none
 *  (a loop without a signal, whose tool has a timer's alone). Where that cannot be read,
 *  the newest answer's when all the answers are one loop's (a link left by a tool call the
 *  SDK never made, its input failed the tool's schema, is older, and a later answer of the
 *  loop reuses its id, call_0); an UnknownLoop when they are several loops' (taking the
 *  newest, one loop's stop was marked on the other's signal: a silent swap in the replay). */
export function takeLoopSignal(
  ctx: WorkflowContext,
  toolName: string,
  toolCallId: string,
  toolSignal: AbortSignal | undefined,
): AbortSignal | UnknownLoop | undefined {
  const mine = loops.get(ctx);
  const key = toolKey(toolName, toolCallId);
  const linked = mine?.get(key);
  if (!mine || !linked) return undefined;
  let i = linked.length - 1;
  if (toolSignal === undefined) return undefined;
  if (linked.includes(toolSignal)) i = linked.lastIndexOf(toolSignal);
  else {
    const followed = signalSources(toolSignal);
    if (followed === null) return undefined;
    // Once several loops' answers held the key, every call of it is of an unknown loop:
    // the one taken before may have been the other's.
    const candidates = unknownLoops.get(ctx)?.get(key) ?? [...new Set(linked)];
    if (followed === undefined && candidates.length > 1) {
      let unknown = unknownLoops.get(ctx);
      if (!unknown) {
        unknown = new Map();
        unknownLoops.set(ctx, unknown);
      }
      linked.splice(i, 1);
      if (linked.length > 0) unknown.set(key, candidates);
      else {
        mine.delete(key);
        unknown.delete(key);
      }
      return { candidates };
    }
    if (followed !== undefined) {
      // A loop's own signal may be a composite too (its caller's, timeout.totalMs): the
      // tool's follows every signal it follows.
      i = linked.findLastIndex((l) => {
        const own = signalSources(l);
        return own ? [...own].every((s) => followed.has(s)) : followed.has(l);
      });
      if (i < 0) return undefined;
    }
  }
  const signal = linked[i];
  linked.splice(i, 1);
  if (linked.length === 0) mine.delete(key);
  return signal;
}

/** The signals an `AbortSignal.any()` signal follows, as Node keeps them (weak refs under
 *  its internal `kSourceSignals`; a composite of composites lists theirs); null for a
 *  signal Node says follows none (its `kComposite` false); undefined where that is not
 *  found (another runtime). Not public: read because nothing public tells which loop a tool
 *  given a signal of its own by `timeout.toolMs` (`AbortSignal.any([loop's, its timer])`)
 *  belongs to when two loops at once answer the same tool and id (a mock's "call-1"): the
 *  newest answer's was taken, and one loop's stop marked the other's signal. */
function signalSources(signal: AbortSignal): Set<AbortSignal> | null | undefined {
  const own = signal as unknown as Record<symbol, unknown>;
  const keys = Object.getOwnPropertySymbols(signal);
  const composite = keys.find((k) => k.description === "kComposite");
  const sources = keys.find((k) => k.description === "kSourceSignals");
  if (composite !== undefined && own[composite] === false) return null;
  const refs = (sources === undefined ? undefined : own[sources]) as Iterable<unknown> | undefined;
  // Node's own SafeSet of SafeWeakRefs: neither is an instance of this realm's Set or WeakRef.
  if (typeof refs?.[Symbol.iterator] !== "function") return undefined;
  const out = new Set<AbortSignal>();
  for (const ref of refs) {
    const s = (ref as { deref?: () => unknown } | undefined)?.deref?.();
    if (s instanceof AbortSignal) out.add(s);
  }
  return out;
}

/** Whether a tool call's caller abort `abort` may have stopped one of `unknown`'s loops:
 *  one of them fired (this execution), or the record says the loop's own signal fired. */
export function mayStopUnknownLoop(unknown: UnknownLoop, abort: Error, replayed: boolean): boolean {
  const callersOwn = abort.name === "AbortError" || isLoopStop(abort);
  return unknown.candidates.some((l) => l.aborted) || (replayed && callersOwn);
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
  const callersOwn = abort.name === "AbortError" || isLoopStop(abort);
  return loop.aborted || (replayed && callersOwn);
}
