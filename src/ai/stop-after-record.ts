// A caller's stop that lands after a generateText loop's last tool call of a turn ended,
// before the SDK goes on: between the tool's end (its body saw no stop) and its record
// becoming durable. The tool's record says it succeeded; the SDK then ends its loop without
// calling the model (it reads the signal, throwIfAborted, before each model call after the
// first), and nothing recorded the stop: a replay, whose signal has not fired, made the
// loop's next model call under the next number of the model's name, another call's record
// (NonDeterminismError), or a new, paid call where the journal ended.
//
// So that check lets the SDK go on, once, in the execution that saw the stop there: the
// SDK makes its next model call as a replay's SDK does, and that call's step fails with the
// stop (model.ts), recorded: first execution and replay take the same path and end the loop
// with the same abort, and a loop the SDK ends on its own (its stopWhen met) makes no call
// in either. The check is the SDK's own when the SDK's loop calls it itself: the frame right
// below it is `executeGenerateText` (or its tool queue's `worker`) of the SDK's file, read
// from V8's call sites, not the stack's text (a stack limit of 0, or source maps writing
// frames as ai/src/..., hid it; the user's own check in an onStepFinish, whose stack holds
// that frame further down, was let go on, and the SDK's own then threw, unrecorded). Any
// other caller, or an SDK whose frame is named otherwise, gets the signal's own check.
//
// A stop that lands as a model call whose answer holds tool calls is recorded is kept the
// same way (noteTurn): the SDK's parse of a tool call whose input fails reads the signal too,
// and its wait for that call's repair (`repairToolCall`) reads `aborted`: told the signal has
// not fired, as a replay's wait is, the repaired call is made and records the stop.
// Its tool queue's checks go on until every tool call of the turn has begun, each recording
// the stop, as a replay's queue begins them all.
//
// Kept per answer, not per signal: loops sharing the caller's signal each end their turn,
// and each of their checks goes on once (one kept per signal, the second loop's replaced
// the first's, and one loop's stop went unrecorded: its replay went on, paid).
// streamText rejects at the stop by itself: not done there (see tools.ts).

import type { WorkflowContext } from "../index.js";
import { callerAborted } from "./caller-abort.js";
import { certainStopOf } from "./caller-stop.js";
import { toolKey } from "./tool-order.js";

/** A model call's answer whose tool calls are running. */
export interface Turn {
  /** The signal the call was made with: its loop's. */
  signal: AbortSignal;
  /** A streamed call's answer: streamText gives up on its tool calls at the stop. */
  stream: boolean;
  /** The answer (conversation.ts's Answered), which the loop's next call continues. */
  answer: object | undefined;
  /** The stop its loop's next call (or queued tool call) records, once one landed. */
  deferred?: Error;
  /** Whether the SDK's check was let go on for it. */
  passed?: boolean;
  /** Kept as the call was recorded: the SDK's parse of its tool calls goes on too. */
  parse?: boolean;
  /** Its tool calls, and how many of them have begun. */
  calls: number;
  begun: number;
}

/** Turns by the key of a tool call they hold (toolKey), newest last. */
const byTool = new WeakMap<WorkflowContext, Map<string, Turn[]>>();
/** Turns whose stop is kept for the loop's next call, by their signal. */
const pending = new WeakMap<WorkflowContext, WeakMap<AbortSignal, Turn[]>>();

/** The SDK's functions whose checks are let go on: before each model call after the first
 *  (`executeGenerateText`), before each tool call its `toolCallConcurrency` queue starts
 *  (`worker`), and as it parses a tool call whose input fails (`parseToolCall`), in the
 *  SDK's own file. */
const SDK_LOOP_FUNCTIONS = new Set(["executeGenerateText", "worker", "parseToolCall"]);
const SDK_FILE = /[\\/]ai[\\/]dist[\\/]/;

/** Notes an answer (`parts`) of a model call made with `signal`: its tool calls now run.
 *  `ran`: the call was made in this execution; a stop that landed as its record was written
 *  (its step succeeded) is kept for the loop's next call, as a tool's is: the SDK reads its
 *  signal as it parses a tool call whose input fails, and ends the loop there, unrecorded
 *  (a replay handed the model the input's error and made the next call, paid). */
export function noteTurn(
  ctx: WorkflowContext,
  parts: ReadonlyArray<{ type: string }> | undefined,
  signal: AbortSignal | undefined,
  stream: boolean,
  answer: object | undefined,
  ran = false,
): void {
  if (!signal) return;
  const turn: Turn = { signal, stream, answer, calls: 0, begun: 0 };
  for (const p of parts ?? []) {
    const c = p as { toolName?: unknown; toolCallId?: unknown; providerExecuted?: unknown };
    if (p.type !== "tool-call" || c.providerExecuted === true) continue;
    let mine = byTool.get(ctx);
    if (!mine) {
      mine = new Map();
      byTool.set(ctx, mine);
    }
    const key = toolKey(String(c.toolName), String(c.toolCallId));
    mine.set(key, [...(mine.get(key) ?? []), turn]);
    turn.calls++;
  }
  if (ran && turn.calls > 0) {
    turn.parse = true;
    defer(ctx, turn);
  }
}

/** The turn a tool call of `loop` comes from, taken: the newest answer of `loop` holding its
 *  tool and id (an older one is a call the SDK never made, its input failing its schema). */
export function takeTurn(
  ctx: WorkflowContext,
  toolName: string,
  toolCallId: string,
  loop: AbortSignal | undefined,
): Turn | undefined {
  const mine = byTool.get(ctx);
  const key = toolKey(toolName, toolCallId);
  const held = loop ? mine?.get(key) : undefined;
  const i = held ? held.findLastIndex((t) => t.signal === loop) : -1;
  if (!mine || !held || i < 0) return undefined;
  const turn = held[i] as Turn;
  held.splice(i, 1);
  if (held.length === 0) mine.delete(key);
  turn.begun++;
  return turn;
}

/** Whether a tool call of `turn` comes from a streamed answer. */
export const isStreamTurn = (turn: Turn | undefined): boolean => turn?.stream === true;

/** A tool call of `turn` ended (its outcome handed over); `ran`: its body ran in this
 *  execution. When the loop's signal fired with no stop recorded for it, the SDK's next
 *  check goes on, to the next model call or tool call, whose outcome is the stop (see the
 *  header). */
export function toolCallEnded(ctx: WorkflowContext, turn: Turn | undefined, ran: boolean): void {
  // A replay's signal firing with no stop recorded is a stop the first execution did not
  // have: it stops that replay as the SDK does, unrecorded.
  if (turn && ran) defer(ctx, turn);
}

/** Keeps the stop of `turn`'s loop for its next call, when its signal fired with none
 *  recorded, and lets the SDK's next check go on once (see the header). */
function defer(ctx: WorkflowContext, turn: Turn): void {
  const loop = turn.signal;
  if (turn.deferred || turn.stream || !loop.aborted || certainStopOf(ctx, loop)) return;
  let mine = pending.get(ctx);
  if (!mine) {
    mine = new WeakMap();
    pending.set(ctx, mine);
  }
  turn.deferred = callerAborted(loop.reason);
  const kept = mine.get(loop) ?? [];
  mine.set(loop, [...kept, turn]);
  if (Object.hasOwn(loop, "throwIfAborted")) return;
  // Its wait for a repair (`repairToolCall`) of a tool call whose input fails, which the
  // SDK makes with the signal (waitForPromiseWithAbortSignal): a replay's, whose signal has
  // not fired, takes the repaired call and runs it. Rejected at once here, the call stayed
  // invalid and the replay ran a tool where the journal held the loop's next model call
  // (NonDeterminismError). So that wait is told the signal has not fired; the repaired tool
  // call then records the stop (notBegunAfterStop in tools.ts), as its replay finds it.
  Object.defineProperty(loop, "aborted", {
    configurable: true,
    get: function aborted(this: AbortSignal) {
      const fired = abortedOf.call(this);
      if (!fired || certainStopOf(ctx, loop)) return fired;
      const parsing = (mine.get(loop) ?? []).some((t) => !t.passed && t.parse);
      return !(parsing && sdkRepairWait(aborted));
    },
  });
  Object.defineProperty(loop, "throwIfAborted", {
    configurable: true,
    writable: true,
    value: function throwIfAborted(this: AbortSignal) {
      const kept = mine.get(loop) ?? [];
      const caller = kept.length > 0 ? sdkCaller(throwIfAborted) : undefined;
      // Its tool queue starts every tool call of the turn, as a replay's does (its signal
      // never fires there): each records the stop and runs no body. Stopped after one, the
      // replay's queue began the others at once, before that one's record was handed back,
      // and ran their bodies, which the first execution never ran.
      if (caller === "worker" && kept.some((t) => t.begun < t.calls)) return;
      // A tool call of the turn that ended since with the stop recorded it: the SDK stops.
      const unpassed = certainStopOf(ctx, loop) ? undefined : kept.find((t) => !t.passed);
      // Its parse of a tool call whose input fails (its answer's record): not a step's end.
      if (caller === "parseToolCall" && unpassed && kept.some((t) => !t.passed && t.parse)) {
        return;
      }
      if (unpassed && caller === "executeGenerateText") {
        unpassed.passed = true;
        dropCheckIfDone(ctx, loop);
        return;
      }
      return AbortSignal.prototype.throwIfAborted.call(this);
    },
  });
}

/** The SDK's function calling `check` (see the header), if it is one of SDK_LOOP_FUNCTIONS:
 *  read from V8's call sites, one frame, whatever the process's stack limit and formatter. */
function sdkCaller(check: (...args: never[]) => unknown): string | undefined {
  const E = Error as ErrorConstructor & { prepareStackTrace?: unknown };
  const hadFormatter = Object.hasOwn(E, "prepareStackTrace");
  const { prepareStackTrace, stackTraceLimit } = E;
  let set = false;
  try {
    E.prepareStackTrace = (_err: Error, sites: NodeJS.CallSite[]) => sites;
    E.stackTraceLimit = 1;
    set = true;
    const holder: { stack?: unknown } = {};
    Error.captureStackTrace(holder, check);
    const site = (holder.stack as NodeJS.CallSite[] | undefined)?.[0];
    const name = site?.getFunctionName() ?? "";
    const sdk = SDK_LOOP_FUNCTIONS.has(name) && SDK_FILE.test(site?.getFileName() ?? "");
    return sdk ? name : undefined;
  } catch {
    return undefined; // a locked-down Error: the signal's own check
  } finally {
    if (set) {
      E.stackTraceLimit = stackTraceLimit;
      if (hadFormatter) E.prepareStackTrace = prepareStackTrace;
      else delete (E as { prepareStackTrace?: unknown }).prepareStackTrace;
    }
  }
}

const abortedOf = Object.getOwnPropertyDescriptor(AbortSignal.prototype, "aborted")?.get as (
  this: AbortSignal,
) => boolean;

/** Whether `read` (the signal's `aborted`) is read by the SDK's wait for a repaired tool
 *  call: its `waitForPromiseWithAbortSignal` called by its `parseToolCall`, in the SDK's
 *  own file (read from V8's call sites, a few frames: the wait's Promise executor, the
 *  Promise constructor, the wait, the parse). */
function sdkRepairWait(read: (...args: never[]) => unknown): boolean {
  const sites = callSites(read, 5);
  const i = sites.findIndex((s) => s.getFunctionName() === "waitForPromiseWithAbortSignal");
  const sdk = (s: NodeJS.CallSite | undefined) => SDK_FILE.test(s?.getFileName() ?? "");
  const parse = sites[i + 1];
  return i >= 0 && sdk(sites[i]) && parse?.getFunctionName() === "parseToolCall" && sdk(parse);
}

/** Up to `limit` of V8's call sites above `fn`, whatever the process's stack limit and
 *  formatter; none where Error is locked down. */
function callSites(fn: (...args: never[]) => unknown, limit: number): NodeJS.CallSite[] {
  const E = Error as ErrorConstructor & { prepareStackTrace?: unknown };
  const hadFormatter = Object.hasOwn(E, "prepareStackTrace");
  const { prepareStackTrace, stackTraceLimit } = E;
  let set = false;
  try {
    E.prepareStackTrace = (_err: Error, sites: NodeJS.CallSite[]) => sites;
    E.stackTraceLimit = limit;
    set = true;
    const holder: { stack?: unknown } = {};
    Error.captureStackTrace(holder, fn);
    const sites = holder.stack;
    return Array.isArray(sites) ? (sites as NodeJS.CallSite[]) : [];
  } catch {
    return [];
  } finally {
    if (set) {
      E.stackTraceLimit = stackTraceLimit;
      if (hadFormatter) E.prepareStackTrace = prepareStackTrace;
      else delete (E as { prepareStackTrace?: unknown }).prepareStackTrace;
    }
  }
}

/** Removes `loop`'s check of its own once no kept stop waits for one to go on. */
function dropCheckIfDone(ctx: WorkflowContext, loop: AbortSignal): void {
  if (
    pending
      .get(ctx)
      ?.get(loop)
      ?.some((t) => !t.passed || t.begun < t.calls)
  )
    return;
  delete (loop as { throwIfAborted?: unknown }).throwIfAborted;
  delete (loop as { aborted?: unknown }).aborted;
}

/** Takes `turn` off its signal's kept stops. */
function take(ctx: WorkflowContext, turn: Turn): Error | undefined {
  const kept = pending.get(ctx)?.get(turn.signal);
  const i = kept ? kept.indexOf(turn) : -1;
  if (!kept || i < 0) return undefined;
  kept.splice(i, 1);
  dropCheckIfDone(ctx, turn.signal);
  return turn.deferred;
}

/** The stop a tool call of `turn` the SDK's queue started after its check went on records
 *  as its outcome (see the header). */
export function takeDeferredToolStop(
  ctx: WorkflowContext,
  turn: Turn | undefined,
): Error | undefined {
  // Kept for the loop's next call too: every tool call of the turn records it.
  const kept = turn ? pending.get(ctx)?.get(turn.signal) : undefined;
  const d = turn && kept?.includes(turn) ? turn.deferred : undefined;
  if (!d) return undefined;
  const stop = callerAborted(d);
  (stop as { code: string }).code = "CALLER_ABORTED"; // the loop's own signal had fired
  return stop;
}

/** The stop a model call made with `signal`, continuing `answer`, records as its outcome:
 *  the loop's next call, made after the SDK's check went on (see the header). */
export function takeDeferredStop(
  ctx: WorkflowContext,
  signal: AbortSignal | undefined,
  answer: object | undefined,
): Error | undefined {
  const turn = signal
    ? pending
        .get(ctx)
        ?.get(signal)
        ?.find((t) => t.answer === answer)
    : undefined;
  return turn ? take(ctx, turn) : undefined;
}
