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
import { wrapLanguageModel } from "ai";
import type { Store } from "../index.js";
import {
  FatalError,
  NonDeterminismError,
  RateLimitError,
  type StepContext,
  type StepOptions,
  type WorkflowContext,
} from "../index.js";
import { failRunWith } from "../lib/fail-run.js";
import { generationOf } from "../lib/run-generation.js";
import { callName } from "./call-names.js";
import {
  addPart,
  type CallRecord,
  compactGenerate,
  requestDigest,
  streamOf,
} from "./call-record.js";
import type { ModelLimits, SharedLimiter } from "./limiter.js";
import { estimateTokens, lookupModel, type ModelPrice, spendOf, usedTokens } from "./pricing.js";
import { providerError } from "./provider-errors.js";
import { RunStreamWriter } from "./run-stream.js";
import type { CallOptions, LanguageModelV4, ModelObject, StreamPart, Usage } from "./sdk-types.js";

export interface ModelOptions extends StepOptions {
  /** The name of this model's calls. Default "model:<modelId>"; turns share it. */
  name?: string;
  /** Forward the parts of streamed calls to the run's stream (needs the kit's store). */
  stream?: boolean;
  /** On replay, check that the code sends each recorded call the same request (prompt,
   *  tools, tool choice, response format). Default true. */
  checkRequest?: boolean;
}

/** What a durable model needs from the kit that made it. */
export interface ModelRuntime {
  clock: { now(): number };
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
    get supportedUrls() {
      return m.inner.supportedUrls;
    },
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
  const name = options.name ?? callName("model", inner.modelId);
  const price = priceOf(rt, ctx, id);
  if (options.stream && !rt.store) {
    throw new TypeError(
      `ai.model() in run "${ctx.runId}": { stream: true } forwards parts to the run's stream, which lives in a store; give createAi({ store }) the store your workers use`,
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
  const digest = m.checkRequest ? requestDigest(o) : "";
  for (;;) {
    const rec = await ctx.step<CallRecord>(
      name,
      (s) => attempt(m, s, mode, o, digest),
      m.stepOptions,
    );
    if (rec.throttledUntil !== undefined) {
      await ctx.sleepUntil(m.throttleName, rec.throttledUntil);
      continue;
    }
    if (digest !== "" && rec.d !== "" && rec.d !== digest) {
      return diverged(
        ctx,
        new NonDeterminismError(
          `Run "${ctx.runId}" no longer matches its journal: model call "${name}" was recorded as the answer to another request (its prompt, tools or settings differ from the first run's at this point), so the recorded response cannot stand for this one. Run the code this run started on (${ctx.workflow}@${ctx.version}), or fork the run onto a new version.`,
        ),
      );
    }
    return rec;
  }
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
  o: CallOptions,
  digest: string,
): Promise<CallRecord> {
  const { rt, limitKey } = m;
  // Unique to this execution of the attempt: attempt numbers start again at 1 when a failed
  // run is resumed, and a grant found under the same id is taken as already granted (the
  // store's idempotency, for its own retries), bypassing the window and any block.
  const grantId = `${s.idempotencyKey}:${s.attempt}:${randomUUID()}`;
  if (rt.limiter) {
    const tokens = estimateTokens(o.prompt, o.maxOutputTokens);
    const a = await rt.limiter.admit(limitKey, m.limits, tokens, grantId, s.signal);
    if (!a.granted) return { d: digest, throttledUntil: a.until };
  }
  const signal = o.abortSignal ? AbortSignal.any([s.signal, o.abortSignal]) : s.signal;
  const call = { ...o, abortSignal: signal };
  const meter: Meter = {};
  try {
    const rec =
      mode === "generate"
        ? await generateOnce(m, s, call, digest, meter)
        : await streamOnce(m, s, call, digest, meter);
    // Only a tokens-per-minute window needs the estimate corrected.
    if (rt.limiter && m.limits.tokensPerMinute !== undefined) {
      await rt.limiter.settle(limitKey, grantId, usedTokens(meter.usage)).catch((err: unknown) => {
        rt.log(`limiter "${limitKey}": the tokens of a call were not settled`, err);
      });
    }
    return rec;
  } catch (err) {
    // The caller gave up (the SDK's abortSignal): not a failure to retry.
    if (o.abortSignal?.aborted && !s.signal.aborted) throw callerAborted(err);
    throw await providerFailure(m, err);
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
  return { d: digest, generate };
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
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (value.type === "error") throw value.error;
      if (value.type === "finish") meter.usage = value.usage;
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
    await writer?.close().catch((err: unknown) => {
      rt.log(`run "${ctx.runId}": parts of call "${name}" were not forwarded to its stream`, err);
    });
  }
  withResponseMetadata(parts, callMetadata(m, s));
  return { d: digest, parts };
}

/** A call its caller aborted: final (FatalError), under the name the SDK and the caller
 *  know it by (AbortError, TimeoutError). */
function callerAborted(err: unknown): FatalError {
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
async function providerFailure(m: DurableModel, err: unknown): Promise<unknown> {
  const { error, retryAfterMs } = providerError(err, m.id, m.rt.clock.now());
  if (m.rt.limiter && error instanceof RateLimitError && retryAfterMs) {
    await m.rt.limiter.block(m.limitKey, retryAfterMs).catch((e: unknown) => {
      m.rt.log(`limiter "${m.limitKey}": a provider's 429 was not shared with other runs`, e);
    });
  }
  return error;
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
