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
// in either. The check is the SDK's own when it is called from the SDK's loop (its frame,
// `executeGenerateText`, on the stack); any other caller, or an SDK whose frame is named
// otherwise, gets the signal's own check (the stop then goes unrecorded, as before).
// streamText rejects at the stop by itself: not done there (see tools.ts).

import type { WorkflowContext } from "../index.js";
import { callerAborted } from "./caller-abort.js";
import { certainStopOf } from "./caller-stop.js";

/** A model call's answer whose tool calls are running: how many have not ended. */
interface Turn {
  open: number;
  /** A streamed call's answer: streamText gives up on its tool calls at the stop. */
  stream: boolean;
  /** The answer (conversation.ts's Answered), which the loop's next call continues. */
  answer: object | undefined;
}

interface Deferred {
  stop: Error;
  answer: object | undefined;
}

const turns = new WeakMap<WorkflowContext, WeakMap<AbortSignal, Turn>>();
const deferred = new WeakMap<WorkflowContext, WeakMap<AbortSignal, Deferred>>();

/** The SDK's functions whose checks are let go on: before each model call after the first
 *  (`executeGenerateText`), and before each tool call its `toolCallConcurrency` queue starts
 *  (`worker`), in the SDK's own file. */
const SDK_LOOP_FRAME = /\n\s+at (async )?(executeGenerateText|worker) \([^)]*\/ai\/dist\//;

/** Notes an answer (`parts`) of a model call made with `signal`: its tool calls now run. */
export function noteTurn(
  ctx: WorkflowContext,
  parts: ReadonlyArray<{ type: string }> | undefined,
  signal: AbortSignal | undefined,
  stream: boolean,
  answer: object | undefined,
): void {
  if (!signal) return;
  let mine = turns.get(ctx);
  if (!mine) {
    mine = new WeakMap();
    turns.set(ctx, mine);
  }
  const open = (parts ?? []).filter(
    (p) =>
      p.type === "tool-call" && (p as { providerExecuted?: unknown }).providerExecuted !== true,
  ).length;
  if (open === 0) mine.delete(signal);
  else mine.set(signal, { open, stream, answer });
}

/** Whether `loop`'s tool calls running now come from a streamed answer. */
export function isStreamTurn(ctx: WorkflowContext, loop: AbortSignal | undefined): boolean {
  return loop !== undefined && turns.get(ctx)?.get(loop)?.stream === true;
}

/** A tool call of `loop`'s turn ended (its outcome handed over); `ran`: its body ran in this
 *  execution. When the loop's signal fired with no stop recorded for it, the SDK's next
 *  check goes on, to the next model call or tool call, whose outcome is the stop (see the
 *  header). */
export function toolCallEnded(
  ctx: WorkflowContext,
  loop: AbortSignal | undefined,
  ran: boolean,
): void {
  const turn = loop ? turns.get(ctx)?.get(loop) : undefined;
  if (!loop || !turn) return;
  turn.open--;
  if (turn.open === 0) turns.get(ctx)?.delete(loop);
  // A replay's signal firing with no stop recorded is a stop the first execution did not
  // have: it stops that replay as the SDK does, unrecorded.
  if (!ran || turn.stream || !loop.aborted || certainStopOf(ctx, loop)) return;
  let mine = deferred.get(ctx);
  if (!mine) {
    mine = new WeakMap();
    deferred.set(ctx, mine);
  }
  mine.set(loop, { stop: callerAborted(loop.reason), answer: turn.answer });
  Object.defineProperty(loop, "throwIfAborted", {
    configurable: true,
    writable: true,
    value: function throwIfAborted(this: AbortSignal) {
      // A tool call of the turn that ended since with the stop recorded it: the SDK stops.
      const unrecorded = mine.has(loop) && !certainStopOf(ctx, loop);
      if (unrecorded && SDK_LOOP_FRAME.test(new Error().stack ?? "")) {
        delete (loop as { throwIfAborted?: unknown }).throwIfAborted;
        return;
      }
      return AbortSignal.prototype.throwIfAborted.call(this);
    },
  });
}

/** The stop a tool call of `loop` the SDK's queue started after its check went on records
 *  as its outcome (see the header). */
export function takeDeferredToolStop(
  ctx: WorkflowContext,
  loop: AbortSignal | undefined,
): Error | undefined {
  const mine = loop ? deferred.get(ctx) : undefined;
  const d = loop ? mine?.get(loop) : undefined;
  if (!loop || !d) return undefined;
  mine?.delete(loop);
  delete (loop as { throwIfAborted?: unknown }).throwIfAborted;
  const stop = callerAborted(d.stop);
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
  const mine = signal ? deferred.get(ctx) : undefined;
  const d = signal ? mine?.get(signal) : undefined;
  if (!signal || !d) return undefined;
  mine?.delete(signal);
  delete (signal as { throwIfAborted?: unknown }).throwIfAborted;
  return d.answer === answer ? d.stop : undefined;
}
