// A durable model's settings, checked once when ai.model() makes it: the model object (a
// string id is refused), the calls' name, the price (a model without one is refused when
// the kit has a price table, or the run a budget in dollars), the limiter's key and limits,
// and the step options of its calls. What every call of that model then shares.

import { type Experimental_DownloadFunction as DownloadFunction, wrapLanguageModel } from "ai";
import type { StepOptions, Store, WorkflowContext } from "../index.js";
import { unknownOptionNames, unknownOptionsText } from "../lib/option-names.js";
import { callName, checkGivenName } from "./call-names.js";
import type { ModelLimits, SharedLimiter } from "./limiter.js";
import { lookupModel, type ModelPrice } from "./pricing.js";
import type { LanguageModelV4, ModelObject } from "./sdk-types.js";

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

export type Mode = "generate" | "stream";

/** What every call of one durable model shares, checked once when the model is made. */
export interface DurableModel {
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

const MODEL_OPTIONS = [
  "name",
  "stream",
  "checkRequest",
  "download",
  "retry",
  "timeout",
  "estimate",
];

/** Checks the model and the kit's settings for it; throws a TypeError saying what to give. */
export function prepareModel(
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
  const unknown = unknownOptionNames(options, MODEL_OPTIONS);
  if (unknown.length > 0) {
    throw new TypeError(
      `ai.model() in run "${ctx.runId}": ${unknownOptionsText(unknown, MODEL_OPTIONS)}`,
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
