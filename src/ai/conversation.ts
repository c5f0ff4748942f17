// Where a model call stands in the run's call tree.
//
// The SDK makes every model call of a tool loop (generateText, streamText, an agent) from
// its own promise chain, which does not carry the workflow's place in its call tree: each
// call reaches ctx.step at the root. The core accepts a name used again ("model:x", then
// "model:x#2") only when it can tell the order is fixed: the calls are in one cascade, or the
// later one continues from the earlier. So any timer or I/O of the workflow's in between (an
// onStepFinish that writes a log, a prepareStep that reads one, smoothStream's pacing)
// failed the run's FIRST execution with NonDeterminismError at the loop's second call.
//
// A call whose prompt is an earlier call's prompt followed by that call's answer (an
// assistant message with the same tool call ids) can only be made once that answer was
// delivered: it continues from that call, in every execution. It is made from that call's
// place in the tree, so the core sees what the data says. Nothing is claimed when no
// earlier call fits, or more than one fits equally (twin conversations): the core's own
// rule then decides, as before. The core still checks that the name's previous call is
// this place or above it: a call of another conversation in between still fails the run.

import type { WorkflowContext } from "../index.js";
import { NonDeterminismError } from "../index.js";
import { callIsLate } from "../lib/call-late.js";
import { captureScope, reenterScope } from "../workflow/call-scope.js";
import type { CallRecord } from "./call-record.js";
import type { CallOptions } from "./sdk-types.js";
import { noteToolSource, retireToolSource, type ToolSource, toolKey } from "./tool-order.js";

export interface Answered {
  /** Messages in its prompt, and the digest of their JSON. */
  length: number;
  prefix: string;
  /** The tool call ids of its answer, in order (undefined while the call is in flight). */
  toolCallIds?: string[];
  /** Its place in the run's call tree (call-scope.ts), once answered. */
  scope?: unknown;
  /** Made after work of the workflow's own (a late call, context.ts). */
  late: boolean;
  /** The call failed: it has no answer to continue. */
  failed?: boolean;
  /** Calls with this one's prompt whose answer was continued while this one was in flight:
   *  should this one answer with the same tool call ids, the claim was ambiguous (twins). */
  claimedMeanwhile?: Answered[];
  /** The earlier call whose answer this one's prompt continues (the claim), if any. */
  continued?: Answered;
  /** The tool calls whose results follow that answer in this call's prompt (toolKey). */
  resultsInPrompt?: Set<string>;
  /** Its answer, for the tool calls made from it (tool-order.ts), once answered. */
  source?: ToolSource;
}

const answeredCalls = new WeakMap<WorkflowContext, Map<string, Answered[]>>();

function toolCallIdsOf(parts: ReadonlyArray<{ type: string }> | undefined): string[] {
  const ids: string[] = [];
  for (const p of parts ?? []) {
    if (p.type === "tool-call") ids.push(String((p as { toolCallId?: unknown }).toolCallId));
  }
  return ids;
}

const sameIds = (a: readonly string[], b: readonly string[]): boolean =>
  a.length === b.length && a.every((id, i) => id === b[i]);

/** Makes the call from the place of the earlier call whose answer its prompt continues, and
 *  notes the call (in flight) for the calls after it. */
export function continueConversation(
  ctx: WorkflowContext,
  name: string,
  prompt: CallOptions["prompt"],
  prefixes: string[] | undefined,
): Answered | undefined {
  if (!prefixes) return undefined;
  let byName = answeredCalls.get(ctx);
  if (!byName) {
    byName = new Map();
    answeredCalls.set(ctx, byName);
  }
  let list = byName.get(name);
  if (!list) {
    list = [];
    byName.set(name, list);
  }
  const fits = list.filter((a) => {
    const answer = prompt[a.length];
    if (a.toolCallIds === undefined) return false;
    if (a.length >= prompt.length || prefixes[a.length] !== a.prefix) return false;
    if (answer?.role !== "assistant" || !Array.isArray(answer.content)) return false;
    return sameIds(toolCallIdsOf(answer.content), a.toolCallIds);
  });
  // The latest answer it continues (that call's own prompt held the earlier ones): one, or
  // none is claimed (twin conversations, alike to the ids, cannot be told apart).
  const longest = Math.max(...fits.map((a) => a.length));
  const latest = fits.filter((a) => a.length === longest);
  const late = callIsLate(ctx);
  if (latest.length === 1) {
    const claimed = latest[0]!;
    reenterScope(claimed.scope);
    // A call with the same prompt still in flight may yet answer with the same ids: a twin
    // not there to be seen now, that a replay may see (its answer is handed over in its
    // turn, and a late call is made whenever the workflow's own I/O ends), and then claim
    // nothing, and fail. When the claim decides (this call or the claimed one is late), that
    // answer fails the run: every execution alike fails, none takes another way.
    if (late || claimed.late) {
      for (const a of list) {
        const pending = a.toolCallIds === undefined && !a.failed;
        if (pending && a.length === claimed.length && a.prefix === claimed.prefix) {
          a.claimedMeanwhile = [...(a.claimedMeanwhile ?? []), claimed];
        }
      }
    }
  }
  const made: Answered = { length: prompt.length, prefix: prefixes[prompt.length]!, late };
  if (latest.length === 1) {
    made.continued = latest[0]!;
    made.resultsInPrompt = toolResultsAfter(prompt, latest[0]!.length + 1);
    if (latest[0]!.source) retireToolSource(ctx, latest[0]!.source);
  }
  list.push(made);
  return made;
}

/** The tool results (toolKey) in the prompt's messages from `from` on. */
function toolResultsAfter(prompt: CallOptions["prompt"], from: number): Set<string> {
  const keys = new Set<string>();
  for (const message of prompt.slice(from)) {
    if (message.role !== "tool") continue;
    for (const p of message.content) {
      if (p.type === "tool-result") keys.add(toolKey(p.toolName, p.toolCallId));
    }
  }
  return keys;
}

/** The answer's tool calls the SDK executes here (not a provider's own), by toolKey: how
 *  many of each, and the input of each as the answer holds it (tool-order.ts: which answer
 *  a call comes from, read only when several answers fit). */
function toolCallsOf(parts: ReadonlyArray<{ type: string }> | undefined): {
  untaken: Map<string, number>;
  inputs: Map<string, string | undefined>;
} {
  const untaken = new Map<string, number>();
  const inputs = new Map<string, string | undefined>();
  for (const p of parts ?? []) {
    if (p.type !== "tool-call") continue;
    const c = p as {
      toolName?: unknown;
      toolCallId?: unknown;
      providerExecuted?: unknown;
      input?: unknown;
    };
    if (c.providerExecuted === true) continue;
    const key = toolKey(String(c.toolName), String(c.toolCallId));
    untaken.set(key, (untaken.get(key) ?? 0) + 1);
    inputs.set(key, typeof c.input === "string" ? c.input : undefined);
  }
  return { untaken, inputs };
}

/** Notes an answered call (its place: the scope the step's outcome resumed in); returns the
 *  error failing the run when a call continued a twin of it while it was in flight. */
export function answered(
  ctx: WorkflowContext,
  name: string,
  made: Answered,
  rec: CallRecord,
): NonDeterminismError | undefined {
  const content = rec.generate?.content ?? rec.parts;
  made.toolCallIds = toolCallIdsOf(content);
  made.scope = captureScope();
  made.source = {
    continued: made.continued?.source,
    resultsInPrompt: made.resultsInPrompt ?? new Set(),
    ...toolCallsOf(content),
    executed: new Map(),
  };
  noteToolSource(ctx, made.source);
  const ids = made.toolCallIds;
  if (made.claimedMeanwhile?.some((c) => sameIds(c.toolCallIds ?? [], ids))) {
    return new NonDeterminismError(
      `Run "${ctx.runId}": two calls of model "${name}" had the same prompt and answered with the same tool call ids, and a later call continuing one of them was made after work of the workflow's own (a timer, I/O): cairn cannot tell which it continues, and a replay could see them in another order. Give each conversation its own name (ai.model(ctx, model, { name: "..." })).`,
    );
  }
  made.claimedMeanwhile = undefined;
  return undefined;
}
