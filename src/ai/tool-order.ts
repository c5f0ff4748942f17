// Where a tool call stands in the run's call tree, so that a tool call id a provider reuses
// on every turn (a mock's or a provider's `call_0`, `call_1`, ...) keeps its key in order.
//
// A tool call is a step named after the tool and its id ("tool:search:call_0"); turn 2's
// call_0 of the same tool reuses the name ("tool:search:call_0#2"). The core accepts a
// reused name only when it can tell the order is fixed (context.ts, beginCall): so an
// `onToolExecutionStart` that awaits a timer or I/O (as a log write does) failed the run's
// FIRST execution with NonDeterminismError at turn 2's tool call.
//
// The data fixes that order: turn 2's tool call comes from the answer of a model call
// whose prompt continued turn 1's answer (model.ts's claim) and holds the result of turn
// 1's call with the same tool and id. So the call is made from the place that earlier tool
// call's outcome resumed in, and the core sees what the data says. Nothing is claimed when
// the model call the tool call comes from cannot be told (two answers alike in the tool
// and id, neither executed yet, or one answer holding the id twice): the core decides.
// Nor between conversations (two generateText calls, each answered call_0): nothing in the
// data orders one's call_0 after the other's, so each needs its own tools `name`.

import type { WorkflowContext } from "../index.js";
import { captureScope, reenterScope } from "../workflow/call-scope.js";

/** A model call's answer, as the tool calls made from it need to know it. */
export interface ToolSource {
  /** The answer whose conversation this call's prompt continued (model.ts), if claimed. */
  continued: ToolSource | undefined;
  /** Tool calls (toolKey) whose results follow the continued answer in this call's prompt. */
  resultsInPrompt: ReadonlySet<string>;
  /** Tool calls of this answer not yet executed here, by toolKey: how many of each. */
  untaken: Map<string, number>;
  /** Where each executed tool call's outcome resumed, by toolKey (once answered). */
  executed: Map<string, unknown>;
}

const sources = new WeakMap<WorkflowContext, ToolSource[]>();

export const toolKey = (toolName: string, toolCallId: string): string =>
  `${toolName}\u0000${toolCallId}`;

/** Notes an answered model call whose answer holds tool calls. */
export function noteToolSource(ctx: WorkflowContext, source: ToolSource): void {
  if (source.untaken.size === 0) return;
  let list = sources.get(ctx);
  if (!list) {
    list = [];
    sources.set(ctx, list);
  }
  list.push(source);
}

/** A call continued `source`'s answer: its tool calls not executed here by now never will
 *  be (input the SDK refused, a tool without execute): they must not make a later answer
 *  with the same tool and id look like a twin. */
export function retireToolSource(ctx: WorkflowContext, source: ToolSource): void {
  source.untaken.clear();
  const list = sources.get(ctx);
  const i = list?.indexOf(source) ?? -1;
  if (i >= 0) list!.splice(i, 1);
}

/** Called synchronously before a tool call's step: makes the call from the place of the
 *  earlier call it follows (if the data says which), and returns what to call once its
 *  outcome is handed over. */
export function placeToolCall(
  ctx: WorkflowContext,
  toolName: string,
  toolCallId: string,
): () => void {
  const key = toolKey(toolName, toolCallId);
  const list = sources.get(ctx) ?? [];
  const fits = list.filter((s) => (s.untaken.get(key) ?? 0) > 0);
  if (fits.length !== 1 || fits[0]!.untaken.get(key) !== 1) return () => {};
  const source = fits[0]!;
  source.untaken.delete(key);
  if (source.untaken.size === 0) list.splice(list.indexOf(source), 1);
  const earlier = source.continued;
  if (earlier && source.resultsInPrompt.has(key) && earlier.executed.has(key)) {
    reenterScope(earlier.executed.get(key));
  }
  return () => {
    source.executed.set(key, captureScope());
  };
}
