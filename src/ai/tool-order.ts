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
// whose prompt continued turn 1's answer (conversation.ts's claim) and holds the result of turn
// 1's call with the same tool and id. So the call is made from the place that earlier tool
// call's outcome resumed in, and the core sees what the data says. Nothing is claimed when
// the model call the tool call comes from cannot be told (two answers alike in the tool,
// id and input, neither executed yet, or one answer holding the id twice): the core
// decides. Nor between conversations (two generateText calls, each answered call_0):
// nothing in the data orders one's call_0 after the other's, so each needs its own tools
// `name`, and a call is made only from the place of an earlier one of the same name
// (side by side, the call's input tells which of two answers alike in tool and id it
// comes from; alike in input too, the answer whose prompt holds the result of that tools
// name's earlier call with the id does; twin answers still alike then, as two
// conversations asked the same thing are, give the same place and share what was executed
// from them: a call of either is placed, where before none was and an awaiting
// onToolExecutionStart failed the run's first execution with NonDeterminismError).

import type { WorkflowContext } from "../index.js";
import { captureScope, reenterScope } from "../workflow/call-scope.js";

/** A model call's answer, as the tool calls made from it need to know it. */
export interface ToolSource {
  /** The answer whose conversation this call's prompt continued (conversation.ts), if claimed. */
  continued: ToolSource | undefined;
  /** Tool calls (toolKey) whose results follow the continued answer in this call's prompt. */
  resultsInPrompt: ReadonlySet<string>;
  /** Tool calls of this answer not yet executed here, by toolKey: how many of each. */
  untaken: Map<string, number>;
  /** The input of each tool call of this answer (its JSON text, as the answer holds it),
   *  by toolKey. */
  inputs: ReadonlyMap<string, string | undefined>;
  /** Where each executed tool call's outcome resumed, and the tools name (ai.tools'
   *  `name`) it was made through, by toolKey (once answered). Twin answers (alike in the
   *  tool, id, input and place of a call made from one of them) share this map. */
  executed: Map<string, Executed[]>;
}

interface Executed {
  scope: unknown;
  via: string;
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

/** Where `via`'s earlier call with this tool and id resumed, when `source`'s prompt holds
 *  its result after the answer it continued; undefined when the data does not say. */
function placeOf(source: ToolSource, key: string, via: string): Executed | undefined {
  // The id may last have been used turns before (call_1, then call_2, then call_1 again):
  // each answer continued extends the prompt of the one it continued, so the prompt holds
  // the result of the nearest earlier answer that held this tool and id.
  for (let s: ToolSource | undefined = source; s; s = s.continued) {
    if (s.resultsInPrompt.has(key)) {
      const mine = s.continued?.executed.get(key)?.filter((e) => e.via === via) ?? [];
      return mine.length === 1 ? mine[0] : undefined;
    }
    // The answer continued held it, but its result is not in the prompt: nothing to say.
    if (s.continued?.inputs.has(key)) return undefined;
  }
  return undefined;
}

/** Called synchronously before a tool call's step: makes the call from the place of the
 *  earlier call it follows (if the data says which), and returns what to call once its
 *  outcome is handed over. */
export function placeToolCall(
  ctx: WorkflowContext,
  via: string,
  toolName: string,
  toolCallId: string,
  input: unknown,
): () => void {
  const key = toolKey(toolName, toolCallId);
  const list = sources.get(ctx) ?? [];
  let fits = list.filter((s) => (s.untaken.get(key) ?? 0) > 0);
  if (fits.length > 1) {
    // Conversations side by side, each with its own tools name, whose answers both hold
    // this tool and id: the call's input tells which answer it comes from when only one
    // holds that input.
    const text = valueText(input);
    const same =
      text === undefined ? [] : fits.filter((s) => inputText(s.inputs.get(key)) === text);
    if (same.length > 0) fits = same;
  }
  if (fits.length > 1) {
    // Alike in input too (or an input the tool's schema changed): an answer whose prompt
    // holds the result of this tools name's earlier call with this id continues this
    // conversation (each has its own tools name). Answers still alike then (twins, the
    // same to the input and the place) are one: the call is made from that place, and
    // what it executed is noted on all of them (they share it), whichever it came from.
    const places = new Map(fits.map((s) => [s, placeOf(s, key, via)]));
    const placed = fits.filter((s) => places.get(s) !== undefined);
    if (placed.length > 0) fits = placed;
    const place = places.get(fits[0]!);
    if (fits.some((s) => places.get(s) !== place)) return () => {};
  }
  if (fits.length === 0 || fits.some((s) => s.untaken.get(key) !== 1)) return () => {};
  const source = fits[0]!;
  if (fits.length > 1) {
    const shared = source.executed;
    for (const twin of fits.slice(1)) {
      const own = twin.executed;
      if (own === shared) continue; // shared since an earlier call
      for (const [k, entries] of own) shared.set(k, [...(shared.get(k) ?? []), ...entries]);
      for (const s of list) if (s.executed === own) s.executed = shared;
      twin.executed = shared;
    }
  }
  source.untaken.delete(key);
  if (source.untaken.size === 0) list.splice(list.indexOf(source), 1);
  const before = placeOf(source, key, via);
  if (before) reenterScope(before.scope);
  return () => {
    const entries = source.executed.get(key) ?? [];
    source.executed.set(key, [...entries, { scope: captureScope(), via }]);
  };
}

/** A tool call's input as the answer holds it (JSON text), as canonical text: keys sorted,
 *  so the input the SDK parsed (its schema's key order) compares equal; undefined when it
 *  is not JSON. */
function inputText(json: string | undefined): string | undefined {
  if (json === undefined) return undefined;
  try {
    return valueText(JSON.parse(json));
  } catch {
    return undefined;
  }
}

function valueText(value: unknown): string | undefined {
  try {
    return JSON.stringify(value, (_key, v: unknown) =>
      v !== null && typeof v === "object" && !Array.isArray(v)
        ? Object.fromEntries(
            Object.keys(v)
              .sort()
              .map((k) => [k, (v as Record<string, unknown>)[k]]),
          )
        : v,
    );
  } catch {
    return undefined;
  }
}
