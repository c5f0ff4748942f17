// A caller's stop that lands as a streamText loop's tool call is being recorded: after the
// tool's body ended (its last look at the signal saw nothing) and before its outcome, which
// says it succeeded, is handed back. streamText gives up at the stop by itself and the
// workflow goes on; nothing recorded the stop. A replay, whose signal does not fire, was
// handed the tool's outcome, made the loop's next model call, and was refused (the calls
// the workflow made after the stop were never made) or, where the journal ended, answered
// where the first execution had stopped, paying for that call.
//
// So the stop is recorded as a call of its own ("%stop:<tools name>:<tool>:<id>:<n>", the
// n-th call of that tool and id; its outcome the stop, CALLER_ABORTED), made from the tool call's place as the signal fires.
// A replay looks ahead in the journal as the tool call is made (lib/next-call-recorded.ts)
// and, finding that record, makes the same call; each execution hands the SDK the tool's
// outcome only once the stop's is handed over, and marks the loop stopped (caller-stop.ts):
// the SDK's next model call fails with the stop before its step, never made, as streamText
// rejected in the first execution. A generateText loop's stop there is recorded as its next
// model call instead (stop-after-record.ts): the SDK makes that call.

import type { WorkflowContext } from "../index.js";
import { nextCallRecorded } from "../lib/next-call-recorded.js";
import { captureScope, runInScope } from "../workflow/call-scope.js";
import { callName } from "./call-names.js";
import { callerAborted } from "./caller-abort.js";
import { certainStopOf, isCallerAbort, isLoopStop, markStopped } from "./caller-stop.js";

/** A streamed loop's tool call, watched for a stop landing after its body ended. */
export interface StreamStopWatch {
  /** The body returned, past its last look at the signal. */
  bodyEnded(): void;
  /** The call's outcome was handed back: waits for the stop's record, if one was made (or
   *  found), and marks the loop stopped. */
  settled(): Promise<void>;
}

/** Begins watching a tool call of a streamed answer (`stream`) of the loop whose signal is
 *  `loop`, made now (synchronously, from the call's place). */
export function watchStreamStop(
  ctx: WorkflowContext,
  prefix: string,
  toolName: string,
  toolCallId: string,
  loop: AbortSignal | undefined,
  stream: boolean,
): StreamStopWatch | undefined {
  // Counted for every tool call, streamed or not: the calls of a name the run makes.
  const n = occurrence(ctx, callName(prefix, toolName, toolCallId));
  if (!stream || !loop) return undefined;
  // "%" is escaped in a name callName makes ("%25"): no tool call's name is this one. The
  // tool call's own occurrence is part of it: a provider that numbers its ids alike on
  // every turn (call_0) made a stop recorded at turn 2 stop the replay at turn 1.
  const name = callName("%stop", prefix, toolName, toolCallId, String(n));
  const scope = captureScope();
  const record = (stop: Error) => {
    const p = runInScope(scope, () =>
      ctx.step(name, () => {
        throw stop;
      }),
    );
    p.catch(() => {}); // awaited once the tool's outcome is handed back (settled)
    return p;
  };
  let ended = false;
  let handed = false;
  let stopped: Promise<unknown> | undefined;
  if (nextCallRecorded(ctx, name)) {
    // The first execution's stop: its record is the outcome (the body never runs here).
    stopped = record(callerAborted(undefined));
  }
  const onAbort = () => {
    if (!ended || handed || stopped || certainStopOf(ctx, loop)) return;
    const stop = callerAborted(loop.reason);
    (stop as { code: string }).code = "CALLER_ABORTED"; // the loop's own signal fired
    stopped = record(stop);
  };
  if (!stopped && !loop.aborted) loop.addEventListener("abort", onAbort, { once: true });
  return {
    bodyEnded: () => {
      ended = true;
    },
    async settled() {
      if (handed) return;
      handed = true;
      loop.removeEventListener("abort", onAbort);
      if (!stopped) return;
      try {
        await stopped;
      } catch (err) {
        if (!isCallerAbort(err)) return;
        markStopped(ctx, loop, err, isLoopStop(err));
        firedAsBefore(loop, err);
      }
    },
  };
}

/** How many tool calls named `name` the run's execution has made, this one included: the
 *  same in every execution up to a stop (each makes the same calls). */
const made = new WeakMap<WorkflowContext, Map<string, number>>();

function occurrence(ctx: WorkflowContext, name: string): number {
  let mine = made.get(ctx);
  if (!mine) {
    mine = new Map();
    made.set(ctx, mine);
  }
  const n = (mine.get(name) ?? 0) + 1;
  mine.set(name, n);
  return n;
}

/** A replay's `loop`, which has not fired, made to fire as the first execution's did, with
 *  the recorded stop as its reason: streamText's own listener rejects its results with it,
 *  at once, as it did there. Marked stopped alone, a loop whose turn was its last (its
 *  stopWhen met) ended with the answer in the replay where the first execution had
 *  stopped. */
function firedAsBefore(loop: AbortSignal, stop: Error): void {
  if (loop.aborted) return; // the first execution: it fired
  // What the stop recorded: the caller's reason, as the caller's code made it.
  const reason = (stop as { cause?: unknown }).cause ?? stop;
  Object.defineProperty(loop, "aborted", { configurable: true, get: () => true });
  Object.defineProperty(loop, "reason", { configurable: true, get: () => reason });
  Object.defineProperty(loop, "throwIfAborted", {
    configurable: true,
    writable: true,
    value: () => {
      throw reason;
    },
  });
  loop.dispatchEvent(new Event("abort"));
}
