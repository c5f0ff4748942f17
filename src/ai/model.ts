// A durable language model: the model the AI SDK calls from workflow code, whose every
// call (doGenerate, doStream) is a cairn step. The first execution calls the provider and
// records the response; a replay returns the recorded response without calling it.
//
// One call, as one step body:
//   1. the shared limiter admits it (or says "wait until T": the step then records only
//      that, and the model sleeps durably before asking again under the next key);
//   2. the provider is called with the step's signal; a streamed call forwards its parts
//      to the run's stream as they arrive, when asked to;
//   3. its usage is priced and spent with the attempt (tokens, and dollars from the price
//      table), and the window's estimate is corrected to the tokens really used;
//   4. a provider failure becomes what cairn's retry policy should see (provider-errors.ts);
//      a 429 also blocks the shared limiter for everyone, for the provider's Retry-After.
// The SDK's own retries never run: a durable call fails with cairn's recorded error, which
// the SDK does not consider retryable. Retries are the step's, and every attempt is
// recorded with its error and spend.

import { randomUUID } from "node:crypto";
import { type Experimental_DownloadFunction as DownloadFunction, wrapLanguageModel } from "ai";
import type { Store } from "../index.js";
import {
  FatalError,
  NonDeterminismError,
  RateLimitError,
  type StepContext,
  type StepOptions,
  type WorkflowContext,
} from "../index.js";
import { callIsLate } from "../lib/call-late.js";
import { toMs } from "../lib/duration.js";
import { failRunWith } from "../lib/fail-run.js";
import { generationOf } from "../lib/run-generation.js";
import { captureScope, reenterScope } from "../workflow/call-scope.js";
import { callName, checkGivenName } from "./call-names.js";
import { addPart, type CallRecord, compactGenerate, streamOf } from "./call-record.js";
import type { ModelLimits, SharedLimiter } from "./limiter.js";
import { estimateTokens, lookupModel, type ModelPrice, spendOf, usedTokens } from "./pricing.js";
import { downloadUrlParts, EVERY_URL, hasUrlParts } from "./prompt-urls.js";
import { providerError, streamCutError, streamPartError } from "./provider-errors.js";
import { legacyDigest, readRequest } from "./request-text.js";
import { RunStreamWriter } from "./run-stream.js";
import type { CallOptions, LanguageModelV4, ModelObject, StreamPart, Usage } from "./sdk-types.js";
import { noteToolSource, retireToolSource, type ToolSource, toolKey } from "./tool-order.js";

export interface ModelOptions extends StepOptions {
  /** The name of this model's calls. Default "model:<modelId>"; turns share it. */
  name?: string;
  /** Forward the parts of streamed calls to the run's stream (needs the kit's store). */
  stream?: boolean;
  /** On replay, check that the code sends each recorded call the same request (prompt,
   *  tools, tool choice, response format). Default true. */
  checkRequest?: boolean;
  /** Downloads the files the prompt gives by URL that the model does not take as URLs
   *  (the SDK's `experimental_download` shape). Default: the SDK's own download. They are
   *  downloaded inside the call's step, never on replay (prompt-urls.ts). */
  download?: DownloadFunction;
}

/** What a durable model needs from the kit that made it. */
export interface ModelRuntime {
  clock: { now(): number; sleep(ms: number, signal?: AbortSignal): Promise<void> };
  prices: Readonly<Record<string, ModelPrice>> | undefined;
  limits: Readonly<Record<string, ModelLimits>> | undefined;
  limiter: SharedLimiter | undefined;
  /** The kit's store, opened (only when the kit has one). */
  store: (() => Promise<Store>) | undefined;
  /** Problems that must not fail a call that the provider already answered. */
  log(message: string, err?: unknown): void;
}

type Mode = "generate" | "stream";

/** What every call of one durable model shares, checked once when the model is made. */
interface DurableModel {
  rt: ModelRuntime;
  ctx: WorkflowContext;
  inner: LanguageModelV4;
  id: { provider: string; modelId: string };
  /** The name of its calls' steps, and of the sleeps of throttled calls. */
  name: string;
  throttleName: string;
  price: ModelPrice | undefined;
  /** The shared limiter's key and limits for this model. */
  limitKey: string;
  limits: ModelLimits;
  stream: boolean;
  checkRequest: boolean;
  download: DownloadFunction | undefined;
  stepOptions: StepOptions;
}

export function durableModel(
  rt: ModelRuntime,
  ctx: WorkflowContext,
  model: ModelObject,
  options: ModelOptions = {},
): LanguageModelV4 {
  const m = prepareModel(rt, ctx, model, options);
  return {
    specificationVersion: "v4",
    provider: m.inner.provider,
    modelId: m.inner.modelId,
    // Every URL: the SDK downloads nothing, and a call that runs downloads what its model
    // does not take (prompt-urls.ts), a replayed one nothing.
    supportedUrls: EVERY_URL,
    async doGenerate(o) {
      const rec = await durableCall(m, "generate", o);
      if (!rec.generate) return diverged(ctx, wrongMode(ctx, m.name, "doGenerate"));
      return rec.generate;
    },
    async doStream(o) {
      const rec = await durableCall(m, "stream", o);
      if (!rec.parts) return diverged(ctx, wrongMode(ctx, m.name, "doStream"));
      return { stream: streamOf(rec.parts) };
    },
  };
}

/** Checks the model and the kit's settings for it; throws a TypeError saying what to give. */
function prepareModel(
  rt: ModelRuntime,
  ctx: WorkflowContext,
  model: ModelObject,
  options: ModelOptions,
): DurableModel {
  if (typeof model !== "object" || model === null || !("doGenerate" in model)) {
    throw new TypeError(
      `ai.model() in run "${ctx.runId}": pass a model object (e.g. openai("gpt-4o"), or gateway("openai/gpt-4o")), not a model id string`,
    );
  }
  const inner: LanguageModelV4 =
    model.specificationVersion === "v4" ? model : wrapLanguageModel({ model, middleware: [] });
  const id = { provider: inner.provider, modelId: inner.modelId };
  if (options.name !== undefined) checkGivenName(ctx.runId, "ai.model()", options.name);
  const name = options.name ?? callName("model", inner.modelId);
  const price = priceOf(rt, ctx, id);
  if (options.stream && !rt.store) {
    throw new TypeError(
      `ai.model() in run "${ctx.runId}": { stream: true } forwards parts to the run's stream, which lives in a store; give createAi({ store }) the store your workers use`,
    );
  }
  if (options.download !== undefined && typeof options.download !== "function") {
    throw new TypeError(
      `ai.model() in run "${ctx.runId}": \`download\` must be a download function (as the AI SDK's experimental_download, e.g. createDownload()), not ${options.download === null ? "null" : typeof options.download}`,
    );
  }
  const limit = lookupModel(rt.limits, id);
  const stepOptions: StepOptions = {};
  if (options.retry !== undefined) stepOptions.retry = options.retry;
  if (options.timeout !== undefined) stepOptions.timeout = options.timeout;
  if (options.estimate !== undefined) stepOptions.estimate = options.estimate;
  return {
    rt,
    ctx,
    inner,
    id,
    name,
    throttleName: name.length <= 189 ? `${name}:throttled` : callName(name, "throttled"),
    price,
    limitKey: limit?.key ?? `${id.provider.split(".")[0]}:${id.modelId}`,
    limits: limit?.value ?? {},
    stream: Boolean(options.stream),
    checkRequest: options.checkRequest !== false,
    download: options.download,
    stepOptions,
  };
}

/** The model's price; a model without one is refused when there is a price table, or a
 *  budget in dollars to charge. */
function priceOf(
  rt: ModelRuntime,
  ctx: WorkflowContext,
  id: DurableModel["id"],
): ModelPrice | undefined {
  const price = lookupModel(rt.prices, id)?.value;
  if (rt.prices && !price) {
    throw new TypeError(
      `ai.model() in run "${ctx.runId}": the price table has no entry for "${id.provider}:${id.modelId}"; add one under that key, "${id.provider.split(".")[0]}:${id.modelId}" or "*" (dollars per million tokens), so its calls are charged to the run's budget`,
    );
  }
  if (!price && ctx.budget.limit.usd !== undefined) {
    throw new TypeError(
      `ai.model() in run "${ctx.runId}": the run has a budget in usd, but model "${id.provider}:${id.modelId}" has no price; give createAi({ prices }) an entry for it`,
    );
  }
  return price;
}

/** One call: its step (again, after a durable sleep, while the limiter throttles it), and
 *  on replay the check that the recorded response answers this request. */
async function durableCall(m: DurableModel, mode: Mode, o: CallOptions): Promise<CallRecord> {
  const { ctx, name } = m;
  // The request's text, read once (request-text.ts: a file's bytes make it costly).
  const { digest, prefixes, promptChars, hasBytes } = readRequest(o, m.checkRequest);
  const made = continueConversation(ctx, name, o.prompt, prefixes);
  try {
    return await durableLoop(m, mode, { o, digest, promptChars, hasBytes }, prefixes, made);
  } catch (err) {
    if (made) made.failed = true;
    throw err;
  }
}

/** A call's request, and what cairn read of it once (request-text.ts). */
interface Asked {
  o: CallOptions;
  digest: string;
  promptChars: number;
  hasBytes: boolean;
}

async function durableLoop(
  m: DurableModel,
  mode: Mode,
  asked: Asked,
  prefixes: string[] | undefined,
  made: Answered | undefined,
): Promise<CallRecord> {
  const { ctx, name } = m;
  const { digest } = asked;
  for (;;) {
    const rec = await ctx.step<CallRecord>(name, (s) => attempt(m, s, mode, asked), m.stepOptions);
    if (rec.throttledUntil !== undefined) {
      await ctx.sleepUntil(m.throttleName, rec.throttledUntil);
      continue;
    }
    const differs = digest !== "" && rec.d !== "" && rec.d !== digest;
    if (differs && !olderRecordMatches(rec, asked)) {
      return diverged(
        ctx,
        new NonDeterminismError(
          `Run "${ctx.runId}" no longer matches its journal: model call "${name}" was recorded as the answer to another request (its prompt, tools or settings differ from the first run's at this point), so the recorded response cannot stand for this one. Run the code this run started on (${ctx.workflow}@${ctx.version}), or fork the run onto a new version.`,
        ),
      );
    }
    if (prefixes && made) {
      const twin = answered(ctx, name, made, rec);
      if (twin) return diverged(ctx, twin);
    }
    return rec;
  }
}

/** Whether a record written before `u` (call-record.ts) answers this request: its digest
 *  is of the whole JSON text, a file's bytes as JSON (request-text.ts), and of the files
 *  its URL parts gave, downloaded by the SDK: those cannot be checked against the URLs
 *  (nor downloaded again to check them). */
function olderRecordMatches(rec: CallRecord, asked: Asked): boolean {
  if (rec.u !== undefined) return false;
  if (hasUrlParts(asked.o.prompt)) return true;
  return asked.hasBytes && legacyDigest(asked.o) === rec.d;
}

// ---- where a call stands in the run's call tree ----
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

interface Answered {
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
function continueConversation(
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
function answered(
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

/** The usage the provider reported during one attempt (set as soon as it arrives). */
interface Meter {
  usage?: Usage;
}

/** One attempt of one call: the body of the call's step. */
async function attempt(
  m: DurableModel,
  s: StepContext,
  mode: Mode,
  asked: Asked,
): Promise<CallRecord> {
  const { rt, limitKey } = m;
  const { o, digest } = asked;
  const deadline = deadlineOf(m);
  // Unique to this execution of the attempt: attempt numbers start again at 1 when a failed
  // run is resumed, and a grant found under the same id is taken as already granted (the
  // store's idempotency, for its own retries), bypassing the window and any block.
  const grantId = `${s.idempotencyKey}:${s.attempt}:${randomUUID()}`;
  const signal = o.abortSignal ? AbortSignal.any([s.signal, o.abortSignal]) : s.signal;
  let prompt: CallOptions["prompt"];
  let admitted = false;
  try {
    if (rt.limiter) {
      // The caller's signal too: an abort during a wait for the window is the call's end,
      // not a wait recorded as "throttled" (and slept durably) with the abort forgotten.
      const tokens = estimateTokens(asked.promptChars, o.maxOutputTokens);
      const a = await rt.limiter.admit(limitKey, m.limits, tokens, grantId, signal);
      if (!a.granted) {
        if (o.abortSignal?.aborted) throw o.abortSignal.reason;
        return { d: digest, u: 1, throttledUntil: a.until };
      }
      admitted = true;
    }
    prompt = await downloadUrlParts(o.prompt, m.inner, m.download, signal);
  } catch (err) {
    // A download that failed sent the provider nothing: the estimate the window took for
    // this attempt is given back (left, a file server's outage held the fleet's tokens).
    if (admitted && rt.limiter && m.limits.tokensPerMinute !== undefined) {
      await sideWork(
        rt,
        rt.limiter.settle(limitKey, grantId, 0),
        `limiter "${limitKey}": the estimate of a call whose files failed to download was not given back`,
        deadline,
      );
    }
    // Named as the abort's error (a download wraps it in its own). Not the provider's
    // failure either way: the limiter is not blocked for a file server's 429.
    if (o.abortSignal?.aborted && !s.signal.aborted) throw callerAborted(o.abortSignal.reason);
    throw err;
  }
  const call = { ...o, prompt, abortSignal: signal };
  const meter: Meter = {};
  try {
    const rec =
      mode === "generate"
        ? await generateOnce(m, s, call, digest, meter)
        : await streamOnce(m, s, call, digest, meter, deadline);
    // Only a tokens-per-minute window needs the estimate corrected.
    if (rt.limiter && m.limits.tokensPerMinute !== undefined) {
      await sideWork(
        rt,
        rt.limiter.settle(limitKey, grantId, usedTokens(meter.usage)),
        `limiter "${limitKey}": the tokens of a call were not settled`,
        deadline,
      );
    }
    return rec;
  } catch (err) {
    // The caller gave up (the SDK's abortSignal): not a failure to retry.
    if (o.abortSignal?.aborted && !s.signal.aborted) throw callerAborted(err);
    throw await providerFailure(m, err, deadline);
  } finally {
    // What the provider reported is spent with this attempt, whether it then succeeded
    // or not (a stream can fail after its usage arrived).
    if (meter.usage) s.spend(spendOf(meter.usage, m.price));
  }
}

async function generateOnce(
  m: DurableModel,
  s: StepContext,
  call: CallOptions,
  digest: string,
  meter: Meter,
): Promise<CallRecord> {
  const r = await m.inner.doGenerate(call);
  meter.usage = r.usage;
  const generate = compactGenerate(r);
  const meta = callMetadata(m, s);
  generate.response = {
    ...generate.response,
    id: generate.response?.id ?? meta.id,
    timestamp: generate.response?.timestamp ?? meta.timestamp,
  };
  return { d: digest, u: 1, generate };
}

/** What the SDK makes up when a provider does not say (a random id, the current time) is
 *  decided inside the call and recorded, so a replay hands the workflow the same values. */
function callMetadata(m: DurableModel, s: StepContext): { id: string; timestamp: Date } {
  return { id: `cairn-${s.idempotencyKey}`, timestamp: new Date(m.rt.clock.now()) };
}

function withResponseMetadata(parts: StreamPart[], meta: { id: string; timestamp: Date }): void {
  const i = parts.findIndex((p) => p.type === "response-metadata");
  if (i >= 0) {
    const p = parts[i] as Extract<StreamPart, { type: "response-metadata" }>;
    parts[i] = { ...p, id: p.id ?? meta.id, timestamp: p.timestamp ?? meta.timestamp };
    return;
  }
  const start = parts.findIndex((p) => p.type === "stream-start");
  parts.splice(start + 1, 0, { type: "response-metadata", ...meta });
}

/** Reads a streamed call to its end, forwarding its parts to the run's stream if asked. */
async function streamOnce(
  m: DurableModel,
  s: StepContext,
  call: CallOptions,
  digest: string,
  meter: Meter,
  deadline: number | undefined,
): Promise<CallRecord> {
  const { rt, ctx, name } = m;
  const parts: StreamPart[] = [];
  const writer =
    m.stream && rt.store
      ? new RunStreamWriter(await rt.store(), ctx.runId, {
          call: s.idempotencyKey,
          name,
          generation: generationOf(ctx),
          attempt: s.attempt,
        })
      : undefined;
  const r = await m.inner.doStream(call);
  const reader = r.stream.getReader();
  let readToEnd = false;
  let finished = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (value.type === "error") throw streamPartError(value.error, m.id);
      if (value.type === "finish") {
        meter.usage = value.usage;
        finished = true;
      }
      writer?.push(value);
      addPart(parts, value);
    }
    readToEnd = true;
  } finally {
    // Left early (an error part, a failed read): the provider's stream, and the connection
    // under it, is cancelled rather than left to run on. Not awaited: a provider's cancel
    // that hangs must not hold up the attempt.
    if (!readToEnd) reader.cancel().catch(() => {});
    reader.releaseLock();
    // The provider has answered (and charged): a stream that could not be stored
    // must not make the call run again.
    if (writer) {
      const problem = `run "${ctx.runId}": parts of call "${name}" were not forwarded to its stream`;
      await sideWork(rt, writer.close(), problem, deadline);
    }
  }
  // A stream that just ends (a connection closed cleanly mid-answer) holds part of an
  // answer: recorded, every replay would hand the part back as the whole.
  if (!finished) throw streamCutError(m.id);
  withResponseMetadata(parts, callMetadata(m, s));
  return { d: digest, u: 1, parts };
}

/** A call its caller aborted: final (FatalError), under the name the SDK and the caller
 *  know it by (AbortError, TimeoutError). */
export function callerAborted(err: unknown): FatalError {
  const e = err as { name?: unknown; message?: unknown } | undefined;
  const fatal = new FatalError(
    typeof e?.message === "string" ? e.message : "the call was aborted by its caller",
    { cause: err },
  );
  fatal.name = typeof e?.name === "string" ? e.name : "AbortError";
  return fatal;
}

/** What cairn's retry policy should see for a provider's failure; a 429 also blocks the
 *  shared limiter for everyone, for the provider's Retry-After. */
async function providerFailure(
  m: DurableModel,
  err: unknown,
  deadline: number | undefined,
): Promise<unknown> {
  const { error, retryAfterMs } = providerError(err, m.id, m.rt.clock.now());
  if (m.rt.limiter && error instanceof RateLimitError && retryAfterMs) {
    await sideWork(
      m.rt,
      m.rt.limiter.block(m.limitKey, retryAfterMs),
      `limiter "${m.limitKey}": a provider's 429 was not shared with other runs`,
      deadline,
    );
  }
  return error;
}

/** How long a call the provider has answered waits for the kit's store (its stream's last
 *  parts, the limiter's settle or block) before it is recorded without it. */
const SIDE_WORK_WAIT_MS = 5_000;

/** When the attempt's step times out (the kit clock's ms), if it has a timeout. */
function deadlineOf(m: DurableModel): number | undefined {
  const timeout = m.stepOptions.timeout;
  return timeout === undefined ? undefined : m.rt.clock.now() + toMs(timeout);
}

/** Waits for work on the kit's store that must not fail the call, nor hold it: a store that
 *  does not answer (a stalled connection) held the answered call until its step timed out,
 *  and the provider was called, and paid, again; without a timeout, for ever. So it waits
 *  5 s at most, and at most half the time left before the step's timeout (waiting longer,
 *  the timeout would fire first: the answer lost, the call made again). */
async function sideWork(
  rt: ModelRuntime,
  work: Promise<void>,
  problem: string,
  deadline: number | undefined,
): Promise<void> {
  const done = work.then(
    () => true,
    (err: unknown) => {
      rt.log(problem, err);
      return true;
    },
  );
  const waitMs =
    deadline === undefined
      ? SIDE_WORK_WAIT_MS
      : Math.max(0, Math.min(SIDE_WORK_WAIT_MS, (deadline - rt.clock.now()) / 2));
  const stop = new AbortController();
  const late = rt.clock.sleep(waitMs, stop.signal).then(
    () => false,
    () => true,
  );
  const finished = await Promise.race([done, late]);
  stop.abort();
  if (!finished)
    rt.log(`${problem}: the store did not answer within ${Math.round(waitMs) / 1000} s`);
}

/** Fails the run with a divergence through the engine (lib/fail-run.ts): thrown into the
 *  SDK, streamText would turn it into an error part of its stream. */
function diverged(ctx: WorkflowContext, err: NonDeterminismError): Promise<never> {
  return failRunWith(ctx, err);
}

function wrongMode(ctx: WorkflowContext, name: string, method: string): NonDeterminismError {
  return new NonDeterminismError(
    `Run "${ctx.runId}" no longer matches its journal: model call "${name}" was recorded from the other of generate and stream, and the code now calls ${method} at this point. Run the code this run started on (${ctx.workflow}@${ctx.version}), or fork the run onto a new version.`,
  );
}
