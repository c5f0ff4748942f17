// A caller's stop that lands after a tool loop's last tool call ended, before the SDK goes
// on: between the tool's end (its body saw no stop) and its record becoming durable. The
// tool's record says it succeeded, the SDK then ends its loop without calling the model
// (it reads the signal before each model call after the first), and nothing recorded the
// stop: a replay, whose signal has not fired, made the loop's next model call under the
// next number of the model's name, another call's record (NonDeterminismError, or a new,
// paid call where the journal ended).
//
// So the execution that sees the stop there makes that next model call itself, from the
// place the replay's SDK makes it from (the answer it continues, conversation.ts), failing
// with the stop: its record is the one the replay's call is handed, and that call ends the
// loop with the same abort. The record names the answer it continues; a call that continues
// another (a loop the SDK ended on its own, its stopWhen met, and a later call of the model
// took the number) fails the run loudly rather than take the stop (model.ts).

import type { WorkflowContext } from "../index.js";
import { callerAborted } from "./caller-abort.js";
import { certainStopOf, markStopped } from "./caller-stop.js";

/** A model call's answer whose tool calls are running: how many have not ended, and how to
 *  make the loop's next call as its stop. */
interface Turn {
  open: number;
  /** A streamed call's answer: streamText gives up on its tool calls at the stop. */
  stream: boolean;
  recordStop: (stop: Error) => Promise<unknown>;
}

const turns = new WeakMap<WorkflowContext, WeakMap<AbortSignal, Turn>>();

/** The property of a stop recorded as a loop's next model call: the answer it continues. */
export const CONTINUES = "continues";

/** Notes an answer (`parts`) of a model call made with `signal`: its tool calls now run. */
export function noteTurn(
  ctx: WorkflowContext,
  parts: ReadonlyArray<{ type: string }> | undefined,
  signal: AbortSignal | undefined,
  stream: boolean,
  recordStop: Turn["recordStop"],
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
  else mine.set(signal, { open, stream, recordStop });
}

/** Whether `loop`'s tool calls running now come from a streamed answer. */
export function isStreamTurn(ctx: WorkflowContext, loop: AbortSignal | undefined): boolean {
  return loop !== undefined && turns.get(ctx)?.get(loop)?.stream === true;
}

/** A tool call of `loop`'s turn ended (its outcome handed over); `ran`: its body ran in this
 *  execution. When it is the turn's last, and the loop's signal fired with no stop recorded
 *  for it, records the stop as the loop's next model call (see the header). */
export async function toolCallEnded(
  ctx: WorkflowContext,
  loop: AbortSignal | undefined,
  ran: boolean,
): Promise<void> {
  const turn = loop ? turns.get(ctx)?.get(loop) : undefined;
  if (!loop || !turn) return;
  turn.open--;
  if (turn.open > 0) return;
  turns.get(ctx)?.delete(loop);
  // A replay's signal firing with no stop recorded is a stop the first execution did not
  // have: its record at this place, if any, is the first execution's next call.
  if (!ran || !loop.aborted || certainStopOf(ctx, loop)) return;
  const stop = callerAborted(loop.reason);
  (stop as { code: string }).code = "CALLER_ABORTED";
  markStopped(ctx, loop, stop, true);
  await turn.recordStop(stop).catch(() => {});
}
