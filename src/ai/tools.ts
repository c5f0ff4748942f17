// Durable tools: each tool the model calls runs as a cairn step named after the tool and
// the tool call id ("tool:search:call_8f2..."). The id comes from the model's recorded
// response, so it is the same on every replay, and parallel tool calls each find their
// own record whatever order they finish in. A tool's result (or its final error, which
// the SDK hands to the model as a tool error) is recorded once; a replay returns it
// without executing the tool.
//
// A tool receives the step's idempotency key (idempotencyKeyOf(options)) to pass to APIs
// that take one. A tool with an external effect and no such API is declared with
// effectTool({ perform, reconcile }): it goes through ctx.effect (intent, perform,
// completion; reconcile asked when an intent has no completion), so a crash between the
// effect and its record never performs it twice.
//
// Tools that change a working directory (edit a file, run a formatter) are given the
// directory's workspace: each of their calls is then a step of that workspace (ws.step),
// so what it changed is checkpointed with its record and restored on any resume, on any
// machine. As plain steps, their edits would not be state: a resume elsewhere would replay
// "edited" without the edit.

import type { FlexibleSchema, Tool, ToolExecutionOptions, ToolSet } from "ai";
import {
  NonDeterminismError,
  type StepContext,
  type StepOptions,
  type WorkflowContext,
  type Workspace,
} from "../index.js";
import { failRunWith } from "../lib/fail-run.js";
import { unknownOptionNames, unknownOptionsText } from "../lib/option-names.js";
import { STEP_OPTION_NAMES } from "../workflow/context-types.js";
import { callName, checkGivenName } from "./call-names.js";
import { callerAborted } from "./caller-abort.js";
import {
  isCallerAbort,
  isLoopStop,
  markStopped,
  mayStopUnknownLoop,
  stopOf,
  stopsLoop,
  takeLoopSignal,
} from "./caller-stop.js";
import {
  isStreamTurn,
  type Turn,
  takeDeferredToolStop,
  takeTurn,
  toolCallEnded,
} from "./stop-after-record.js";
import { type StreamStopWatch, watchStreamStop } from "./stream-stop.js";
import { placeToolCall } from "./tool-order.js";
import { orAborted } from "./unheard-abort.js";

export interface ToolsOptions extends StepOptions {
  /** The first part of its calls' names: "<name>:<toolName>:<toolCallId>". Default "tool".
   *  Conversations of one run whose provider numbers tool call ids alike (call_0 on every
   *  answer) and whose callbacks await I/O each need their own (see tool-order.ts). */
  name?: string;
  /** Step options for single tools, by tool name (over the shared ones). */
  byTool?: Readonly<Record<string, StepOptions>>;
  /** Run each tool call as a step of this workspace (ws.step): what the tool changes in its
   *  directory is checkpointed with the call's record, and the directory is restored to it
   *  on any resume. Effect tools stay effects (ctx.effect): they must not change it. */
  workspace?: Workspace;
}

/** What a durable tool's execute receives besides the SDK's options. */
export interface DurableToolOptions {
  /** Stable for this tool call: the same on every attempt, resume and replay. */
  idempotencyKey: string;
  /** 1-based attempt of this tool call. */
  attempt: number;
}

export interface EffectToolOptions extends DurableToolOptions {
  toolCallId: string;
  /** Aborted on the step's timeout, the run's cancel, or the SDK's abort. */
  abortSignal: AbortSignal;
}

export interface EffectToolDefinition<INPUT, OUTPUT> {
  description?: string;
  title?: string;
  inputSchema: FlexibleSchema<INPUT>;
  /** Performs the effect; pass `idempotencyKey` along as its marker. */
  perform: (input: INPUT, options: EffectToolOptions) => Promise<OUTPUT> | OUTPUT;
  /** Finds whether `perform` already happened (by the key it was given): its result, or
   *  undefined if it did not. Asked only when an intent was recorded without completion. */
  reconcile: (
    input: INPUT,
    options: { idempotencyKey: string; toolCallId: string },
  ) => Promise<OUTPUT | undefined> | OUTPUT | undefined;
}

const EFFECT = Symbol.for("cairn.ai.effectTool");
const DURABLE = Symbol.for("cairn.ai.durable");

interface EffectParts {
  perform: (input: unknown, options: EffectToolOptions) => unknown;
  reconcile: (input: unknown, options: { idempotencyKey: string; toolCallId: string }) => unknown;
}

/** A tool whose call is an external effect without an idempotency API of its own. It runs
 *  only through ai.tools(ctx, ...). */
export function effectTool<INPUT, OUTPUT>(
  def: EffectToolDefinition<INPUT, OUTPUT>,
): Tool<INPUT, OUTPUT> {
  const { perform, reconcile, ...rest } = def;
  // Checked here, where it is written: a missing reconcile surfaced only in the recovery
  // after a crash, the one moment it exists for.
  for (const [part, fn] of [
    ["perform", perform],
    ["reconcile", reconcile],
  ] as const) {
    if (typeof fn !== "function") {
      throw new TypeError(
        `effectTool(): ${part} must be a function (got ${typeof fn}); an effect tool needs perform, and reconcile to find whether perform already happened after a crash`,
      );
    }
  }
  const execute = (): Promise<OUTPUT> => {
    throw new TypeError(
      "An effectTool runs only inside a workflow, through ai.tools(ctx, { ... }): its perform and reconcile need the run's journal",
    );
  };
  // What tool() makes (it is the identity): a function tool with an inputSchema.
  const t = { ...rest, execute } as unknown as Tool<INPUT, OUTPUT>;
  const parts = { perform, reconcile } as unknown as EffectParts;
  Object.defineProperty(t, EFFECT, { value: parts });
  return t;
}

/** The idempotency key of the tool call whose execute received `options`. */
export function idempotencyKeyOf(options: ToolExecutionOptions<unknown>): string {
  const key = (options as Partial<DurableToolOptions>).idempotencyKey;
  if (typeof key !== "string") {
    throw new TypeError(
      "idempotencyKeyOf(): these options do not come from a durable tool call; wrap the tools with ai.tools(ctx, { ... })",
    );
  }
  return key;
}

function signalOf(s: StepContext, sdk: AbortSignal | undefined): AbortSignal {
  return sdk ? AbortSignal.any([s.signal, sdk]) : s.signal;
}

/** The last value of a streaming tool (an async iterable execute): what the SDK records as
 *  its final output. The preliminary values are not recorded. */
async function finalOutput(result: unknown): Promise<unknown> {
  if (result !== null && typeof result === "object" && Symbol.asyncIterator in result) {
    let last: unknown;
    for await (const v of result as AsyncIterable<unknown>) last = v;
    return last;
  }
  return result;
}

/** One tool call as it goes: whether its body ran in this execution (or its record
 *  replayed), its loop's signal (caller-stop.ts) and the answer it comes from
 *  (stop-after-record.ts). */
interface Execution {
  ran: boolean;
  loop: AbortSignal | undefined;
  turn: Turn | undefined;
  /** A streamed answer's tool call: a stop landing after its body ended (stream-stop.ts). */
  watch?: StreamStopWatch | undefined;
}

export function durableTools<TOOLS extends ToolSet>(
  ctx: WorkflowContext,
  tools: TOOLS,
  options: ToolsOptions = {},
): TOOLS {
  const ws = options.workspace as Partial<Workspace> | undefined;
  if (ws !== undefined && (typeof ws !== "object" || typeof ws?.step !== "function")) {
    throw new TypeError(
      `ai.tools() in run "${ctx.runId}": \`workspace\` must be a workspace the run opened (await ctx.workspace(name)), not ${ws === null ? "null" : typeof ws}`,
    );
  }
  const unknown = unknownOptionNames(options, TOOLS_OPTIONS);
  if (unknown.length > 0) {
    throw new TypeError(
      `ai.tools() in run "${ctx.runId}": ${unknownOptionsText(unknown, TOOLS_OPTIONS)}`,
    );
  }
  checkByTool(ctx, tools, options.byTool);
  const prefix = namePrefix(ctx, options.name);
  const out: Record<string, unknown> = {};
  for (const [toolName, t] of Object.entries(tools)) {
    const stepOptions = optionsFor(options, toolName);
    const effect = (t as unknown as Record<symbol, EffectParts | undefined>)[EFFECT];
    const execute = (t as { execute?: unknown }).execute;
    if ((t as unknown as Record<symbol, unknown>)[DURABLE] || typeof execute !== "function") {
      out[toolName] = t; // already durable, or not executed here (client or provider tools)
      continue;
    }
    let call: (
      input: unknown,
      o: ToolExecutionOptions<unknown>,
      execution: Execution,
    ) => Promise<unknown>;
    if (effect) {
      call = (input, o, execution) =>
        ctx.effect(
          callName(prefix, toolName, o.toolCallId),
          {
            perform: async (key, s) => {
              notBegunAfterStop(ctx, o.abortSignal, execution);
              execution.ran = true;
              try {
                return await untilStreamStops(
                  execution,
                  effect.perform(input, {
                    idempotencyKey: key,
                    attempt: s.attempt,
                    toolCallId: o.toolCallId,
                    abortSignal: signalOf(s, o.abortSignal),
                  }),
                );
              } catch (err) {
                // As for a plain tool (below): retried, the effect was reconciled and
                // performed again with the caller's signal already aborted.
                if (o.abortSignal?.aborted && !s.signal.aborted) {
                  throw callerStop(err, o.abortSignal, execution.loop);
                }
                throw asError(err);
              } finally {
                // Its outcome is not the stop: one landing from now on is recorded apart.
                if (!o.abortSignal?.aborted) execution.watch?.bodyEnded();
              }
            },
            reconcile: (key) =>
              effect.reconcile(input, { idempotencyKey: key, toolCallId: o.toolCallId }),
          },
          stepOptions,
        );
    } else {
      const run = execute as (input: unknown, o: ToolExecutionOptions<unknown>) => unknown;
      const owner = options.workspace ?? ctx; // whose step each call is
      call = (input, o, execution) =>
        owner.step(
          callName(prefix, toolName, o.toolCallId),
          async (s) => {
            notBegunAfterStop(ctx, o.abortSignal, execution);
            execution.ran = true;
            let output: unknown;
            try {
              output = await untilStreamStops(
                execution,
                finalOutput(
                  // Called on its tool, as the SDK calls it (tool.execute(...)): an execute
                  // that is a method (a class's, an object literal's) reads its `this`.
                  run.call(t, input, {
                    ...o,
                    abortSignal: signalOf(s, o.abortSignal),
                    idempotencyKey: s.idempotencyKey,
                    attempt: s.attempt,
                  } as ToolExecutionOptions<unknown> & DurableToolOptions),
                ),
              );
            } catch (err) {
              // The caller gave up (the SDK's abortSignal, its tool timeout): final, as for
              // a model call. Retried, every attempt ran the tool again with a signal
              // already aborted: its work before the first abortable await done again.
              if (o.abortSignal?.aborted && !s.signal.aborted) {
                throw callerStop(err, o.abortSignal, execution.loop);
              }
              execution.watch?.bodyEnded();
              throw asError(err);
            }
            // The caller's stop landed while it ran: the SDK ends its loop here, so that is
            // this call's outcome, for a replay to stop here too (caller-stop.ts).
            if (o.abortSignal?.aborted && !s.signal.aborted) {
              throw callerStop(o.abortSignal.reason, o.abortSignal, execution.loop);
            }
            execution.watch?.bodyEnded();
            return output;
          },
          stepOptions,
        );
    }
    // Made from the place of the earlier call with this tool and id it follows, if any
    // (tool-order.ts): synchronously, right before the call.
    const wrapped = async (input: unknown, o: ToolExecutionOptions<unknown>) => {
      // The loop first: placing the call may move the flow to an earlier turn's place.
      const link = takeLoopSignal(ctx, toolName, o.toolCallId, o.abortSignal);
      const unknown = link instanceof AbortSignal || link === undefined ? undefined : link;
      const loop = unknown ? undefined : (link as AbortSignal | undefined);
      const execution: Execution = {
        ran: false,
        loop,
        turn: takeTurn(ctx, toolName, o.toolCallId, loop),
      };
      const placed = placeToolCall(ctx, prefix, toolName, o.toolCallId, input);
      const stream = isStreamTurn(execution.turn);
      execution.watch = watchStreamStop(ctx, prefix, toolName, o.toolCallId, loop, stream);
      try {
        const output = await call(input, o, execution);
        await execution.watch?.settled();
        return output;
      } catch (err) {
        await execution.watch?.settled();
        // A caller's abort ends the SDK's loop when the SDK's own signal fired: as it did
        // here, or (replayed) in the first execution. A tool's own error of that name,
        // thrown while the signal stayed quiet, ends nothing.
        const stops = !execution.ran || o.abortSignal?.aborted === true;
        if (o.abortSignal && stops && isCallerAbort(err)) {
          if (unknown && mayStopUnknownLoop(unknown, err, !execution.ran)) {
            return failRunWith(ctx, unknownLoopStop(ctx, toolName, o.toolCallId));
          }
          const certain = isLoopStop(err);
          markStopped(ctx, o.abortSignal, err, certain);
          // A tool with a timeout of its own was handed a signal of its own: the loop's
          // model calls see the loop's.
          if (stopsLoop(execution.loop, o.abortSignal, err, !execution.ran)) {
            markStopped(ctx, execution.loop, err, certain);
          }
        }
        throw err;
      } finally {
        placed();
        // A stop that landed as its record was written, after its last check (stop-after-record.ts).
        toolCallEnded(ctx, execution.turn, execution.ran);
      }
    };
    const d = { ...t, execute: wrapped };
    Object.defineProperty(d, DURABLE, { value: true });
    out[toolName] = d;
  }
  return out as TOOLS;
}

/** A streamed loop's tool call, ended by the loop's stop: streamText gives up on its tool
 *  calls then and the workflow goes on, while the tool may run on. Recorded only once the
 *  tool ended, the call's record came after the workflow's next calls; a replay, whose
 *  signal has not fired, waits for the tool's outcome before it goes on, and the run was
 *  refused, its next recorded call never made. The tool, if it runs on, is given up on. */
function untilStreamStops<T>(execution: Execution, work: PromiseLike<T> | T): Promise<T> {
  const p = Promise.resolve(work);
  return isStreamTurn(execution.turn) ? orAborted(p, execution.loop) : p;
}

/** A caller's stop in a tool call that answers of several loops held, alike in tool and id,
 *  where the loop it comes from cannot be read (see takeLoopSignal): refused, as marking
 *  either loop stopped could stop the other's replay and let this one's go on. */
function unknownLoopStop(ctx: WorkflowContext, toolName: string, toolCallId: string): Error {
  return new NonDeterminismError(
    `Run "${ctx.runId}": the caller's stop ended tool call "${toolName}" (id "${toolCallId}"), whose tool and id answers of several tool loops running at once held, and this runtime does not tell which loop's signal the tool's (timeout.toolMs) follows: a replay could not tell which loop stopped. Give each loop's tools their own tool names, run such loops one after the other, or run them without timeout.toolMs.`,
  );
}

/** A tool body about to run (no record of it) whose signal a caller's stop already ended in
 *  this execution: the SDK begins no tool call once its signal fired (toolCallConcurrency's
 *  queue), so the first execution never began it, or (cut by a crash) it would have ended
 *  after the stop, with it. Its outcome is that stop, and its body does not run: a replay,
 *  whose signal has not fired, would otherwise run a tool the first execution never ran. */
function notBegunAfterStop(
  ctx: WorkflowContext,
  signal: AbortSignal | undefined,
  execution: Execution,
): void {
  const stop = stopOf(ctx, signal) ?? stopOf(ctx, execution.loop);
  if (stop) throw callerAborted(stop);
  // A stop that landed as an earlier tool call of the turn was recorded (stop-after-record.ts).
  const deferred = takeDeferredToolStop(ctx, execution.turn);
  if (deferred) throw deferred;
}

/** A tool call the SDK's signal ended (the body saw it fired), as its record says it: code
 *  CALLER_ABORTED when the loop's own signal had fired, which ends the SDK's loop (a replay
 *  then stops it there for certain, caller-stop.ts); FATAL when only the tool's own timer
 *  (`timeout.toolMs`) fired, after which the SDK's loop goes on. So a caller's TimeoutError
 *  (`timeout.totalMs`, `AbortSignal.timeout`) is told from the tool's own by whose signal
 *  fired, not by its name. Without a link to its loop, by its name, as callerAborted makes it. */
function callerStop(err: unknown, toolSignal: AbortSignal, loop: AbortSignal | undefined): Error {
  const stop = callerAborted(err);
  if (loop === undefined) return stop;
  const loopFired = loop === toolSignal || loop.aborted;
  (stop as { code: string }).code = loopFired ? "CALLER_ABORTED" : "FATAL";
  return stop;
}

/** What a tool threw, as an Error whose message is the text the SDK gives the model for it
 *  (a string as it is, null or undefined "unknown error", anything else its JSON): cairn
 *  records a thrown value that is not an Error as String() makes it, so a tool that threw
 *  `{ code: 7, reason: "quota" }` reached the model as "[object Object]", and the model
 *  lost what went wrong (without cairn it reads the JSON). */
function asError(thrown: unknown): unknown {
  if (thrown instanceof Error) return thrown;
  let text: string | undefined;
  if (thrown === null || thrown === undefined) text = "unknown error";
  else if (typeof thrown === "string") text = thrown;
  else {
    try {
      text = JSON.stringify(thrown);
    } catch {
      // A cycle, a BigInt: the text cairn would have recorded anyway.
    }
  }
  if (text === undefined) return thrown;
  const err = new Error(text, { cause: thrown });
  // Its frames would be cairn's, not where the value was thrown (it had no stack).
  err.stack = `Error: ${text}`;
  return err;
}

/** The names' first part: a name a step may have (ctx.step's own rule). */
function namePrefix(ctx: WorkflowContext, name: unknown): string {
  if (name === undefined) return "tool";
  checkGivenName(ctx.runId, "ai.tools()", name);
  return name;
}

/** A `byTool` entry must name a tool of the set: a misspelt one (`sendEmial`) was ignored,
 *  and its tool ran with the shared options (a `maxAttempts: 1` meant for a tool that must
 *  not run twice gave way to the default 3 attempts). */
const TOOLS_OPTIONS = ["name", "byTool", "workspace", "retry", "timeout", "estimate"];

function checkByTool(ctx: WorkflowContext, tools: ToolSet, byTool: ToolsOptions["byTool"]): void {
  for (const [name, own] of Object.entries(byTool ?? {})) {
    const unknown = unknownOptionNames(own, STEP_OPTION_NAMES);
    if (unknown.length > 0) {
      throw new TypeError(
        `ai.tools() in run "${ctx.runId}": byTool["${name}"]: ${unknownOptionsText(unknown, STEP_OPTION_NAMES)}`,
      );
    }
    if (!Object.hasOwn(tools, name)) {
      throw new TypeError(
        `ai.tools() in run "${ctx.runId}": byTool["${name}"] names no tool of this set (${Object.keys(tools).join(", ") || "none"}); check its spelling`,
      );
    }
  }
}

function optionsFor(options: ToolsOptions, toolName: string): StepOptions {
  const own = options.byTool?.[toolName];
  const o: StepOptions = {};
  const retry = own?.retry ?? options.retry;
  const timeout = own?.timeout ?? options.timeout;
  const estimate = own?.estimate ?? options.estimate;
  if (retry !== undefined) o.retry = retry;
  if (timeout !== undefined) o.timeout = timeout;
  if (estimate !== undefined) o.estimate = estimate;
  return o;
}
