// createAi(): the one object a workflow module needs to make AI SDK code durable. It holds
// what is shared by every run of a worker: the price table, the rate limits, and (when
// given) the store where the shared limiter and the runs' streams live. Per run, it makes
// a durable model (ai.model) and durable tools (ai.tools) to hand to the SDK's own
// generateText / streamText / ToolLoopAgent.

import type { ToolSet } from "ai";
import { type Clock, realClock, type Store, type WorkflowContext } from "../index.js";
import { unknownOptionNames, unknownOptionsText } from "../lib/option-names.js";
import { type ModelLimits, SharedLimiter } from "./limiter.js";
import { durableModel } from "./model.js";
import type { ModelOptions, ModelRuntime } from "./model-setup.js";
import type { ModelPrice } from "./pricing.js";
import { type ReadStreamOptions, type RunStreamChunk, readRunStream } from "./run-stream.js";
import type { LanguageModelV4, ModelObject } from "./sdk-types.js";
import { durableTools, type ToolsOptions } from "./tools.js";

export interface AiOptions {
  /** The store your workers use: where the shared rate limiters and the runs' streams
   *  live. Needed for `limits` and `{ stream: true }`; model and tool calls are durable
   *  without it (they are the engine's steps). */
  store?: Store;
  /** Default: the real clock. Give tests the engine's virtual clock. */
  clock?: Clock;
  /** Dollars per million tokens, by "provider:model" ("openai:gpt-4o"), "provider:*" or
   *  "*". With a table, a model that has no entry is refused (its calls would be free). */
  prices?: Readonly<Record<string, ModelPrice>>;
  /** Requests and tokens per minute, by "provider:model", "provider:*" or "*": one window
   *  per entry, shared by every run of every worker on the store. Models without an entry
   *  still share a provider's 429s. */
  limits?: Readonly<Record<string, ModelLimits>>;
  /** A limiter wait up to this long (in all, per call) is slept in process; a longer one
   *  releases the run like a retry backoff does. Default 5 s. */
  maxInProcessWaitMs?: number;
  /** Problems that must not fail a call (a stream chunk not stored). Default console.error. */
  log?: (message: string, err?: unknown) => void;
}

export interface Ai {
  /** The model, durable in this run: every call the SDK makes is a recorded step. */
  model(ctx: WorkflowContext, model: ModelObject, options?: ModelOptions): LanguageModelV4;
  /** The tools, durable in this run: every tool call is a step keyed by its tool call id
   *  (an effectTool goes through ctx.effect). Tools without execute are left as they are. */
  tools<TOOLS extends ToolSet>(ctx: WorkflowContext, tools: TOOLS, options?: ToolsOptions): TOOLS;
  /** A run's stream (the parts of its streamed calls), from any process; with `follow`
   *  (default) until the run has finished. Resume after a chunk with `from: offset + 1`. */
  readStream(runId: string, options?: ReadStreamOptions): AsyncIterable<RunStreamChunk>;
  /** Closes the kit's hold on the store (the store is opened on first use). */
  close(): Promise<void>;
}

const LIMIT_FIELDS: readonly string[] = ["requestsPerMinute", "tokensPerMinute"];
const PRICE_FIELDS: readonly string[] = [
  "input",
  "output",
  "cachedInput",
  "cacheWrite",
  "reasoning",
];

/** A price the kit can charge with. A price without `input` or `output` (or one that is
 *  Infinity) made every call's usd NaN or Infinity: s.spend() refused it after the provider
 *  had answered (and charged), so the call was made again on every attempt, and the run
 *  failed with nothing recorded. A misspelt field (`outputs`) left `output` missing. */
function checkPrice(key: string, p: unknown): void {
  if (typeof p !== "object" || p === null) {
    throw new TypeError(
      `createAi(): prices["${key}"] must be { input, output, cachedInput?, cacheWrite?, reasoning? } (dollars per million tokens), not ${p === null ? "null" : typeof p}`,
    );
  }
  for (const [name, v] of Object.entries(p)) {
    if (!PRICE_FIELDS.includes(name)) {
      throw new TypeError(
        `createAi(): prices["${key}"].${name} is not a price; give input, output, cachedInput, cacheWrite or reasoning (dollars per million tokens)`,
      );
    }
    if (v !== undefined && !(typeof v === "number" && Number.isFinite(v) && v >= 0)) {
      throw new TypeError(`createAi(): prices["${key}"].${name} must be a finite number >= 0`);
    }
  }
  for (const name of ["input", "output"]) {
    if ((p as Record<string, unknown>)[name] === undefined) {
      throw new TypeError(
        `createAi(): prices["${key}"].${name} is missing; give dollars per million tokens (0 if free)`,
      );
    }
  }
}

/** The options createAi takes: anything else is a misspelling (`limit`, `price`) that left
 *  the kit without its rate limits or prices, silently. */
const AI_OPTIONS = ["store", "clock", "prices", "limits", "maxInProcessWaitMs", "log"];

export function createAi(options: AiOptions = {}): Ai {
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    throw new TypeError(
      `createAi(options): options must be an object { ${AI_OPTIONS.join(", ")} }, got ${options === null ? "null" : Array.isArray(options) ? "an array" : typeof options}`,
    );
  }
  const unknown = unknownOptionNames(options, AI_OPTIONS);
  if (unknown.length > 0) {
    throw new TypeError(`createAi(): ${unknownOptionsText(unknown, AI_OPTIONS)}`);
  }
  const clock = options.clock ?? realClock;
  const log =
    options.log ??
    ((message: string, err?: unknown) =>
      console.error(
        `cairn/ai: ${message}${err ? `: ${(err as Error)?.message ?? String(err)}` : ""}`,
      ));
  if (options.limits && !options.store) {
    throw new TypeError(
      "createAi(): `limits` are shared through a store; give createAi({ store }) the store your workers use",
    );
  }
  for (const [key, l] of Object.entries(options.limits ?? {})) {
    if (typeof l !== "object" || l === null) {
      throw new TypeError(
        `createAi(): limits["${key}"] must be { requestsPerMinute?, tokensPerMinute? }, not ${l === null ? "null" : typeof l}`,
      );
    }
    for (const [name, v] of Object.entries(l)) {
      // A misspelt limit (requestPerMinute) was ignored: the model ran with no limit at all.
      if (!LIMIT_FIELDS.includes(name)) {
        throw new TypeError(
          `createAi(): limits["${key}"].${name} is not a limit; give requestsPerMinute and/or tokensPerMinute`,
        );
      }
      if (v !== undefined && !(Number.isInteger(v) && v > 0)) {
        throw new TypeError(`createAi(): limits["${key}"].${name} must be a whole number > 0`);
      }
    }
  }
  const wait = options.maxInProcessWaitMs;
  if (wait !== undefined && !(typeof wait === "number" && wait >= 0 && Number.isFinite(wait))) {
    // NaN would make every limiter wait, however long, one the step sleeps in process.
    throw new TypeError("createAi(): maxInProcessWaitMs must be a finite number >= 0");
  }
  for (const [key, p] of Object.entries(options.prices ?? {})) {
    checkPrice(key, p);
  }
  let opened: Promise<Store> | undefined;
  let closed = false;
  // Ends the streams being followed when the kit closes: the store may stay open (an engine
  // holds it too), and a follower would otherwise poll it until its run ends.
  const closedSignal = new AbortController();
  let closing: Promise<void> | undefined;
  const given = options.store;
  const store = given
    ? () => {
        if (closed) return Promise.reject(new Error("cairn/ai: this kit is closed"));
        if (opened === undefined) {
          // A failed open is not kept: the next call tries again (the database may be back).
          const attempt = given.open({ clock }).then(() => given);
          opened = attempt;
          attempt.catch(() => {
            if (opened === attempt) opened = undefined;
          });
        }
        return opened;
      }
    : undefined;
  const runtime: ModelRuntime = {
    clock,
    prices: options.prices,
    limits: options.limits,
    limiter: store
      ? new SharedLimiter(store, clock, options.maxInProcessWaitMs ?? 5_000)
      : undefined,
    store,
    log,
  };
  return {
    model: (ctx, model, o) => durableModel(runtime, ctx, model, o),
    tools: (ctx, tools, o) => durableTools(ctx, tools, o),
    readStream(runId, o) {
      if (!store) {
        throw new TypeError("ai.readStream(): streams live in a store; give createAi({ store })");
      }
      const from = o?.from ?? 0;
      const pollMs = o?.pollMs ?? 100;
      // As engine.readStream: a NaN offset read as an empty stream on SQLite (and failed
      // on PostgreSQL), so a reader resuming from `Number(lastId) + 1` saw nothing and ended.
      if (!Number.isSafeInteger(from) || from < 0) {
        throw new TypeError(
          `ai.readStream(): "from" must be a whole number >= 0 (run "${runId}"), got ${String(from)}`,
        );
      }
      if (!(typeof pollMs === "number" && pollMs >= 0 && Number.isFinite(pollMs))) {
        throw new TypeError(`ai.readStream(): "pollMs" must be a finite number >= 0`);
      }
      const signal = o?.signal
        ? AbortSignal.any([o.signal, closedSignal.signal])
        : closedSignal.signal;
      return (async function* () {
        yield* readRunStream(await store(), runId, { ...o, signal });
      })();
    },
    close() {
      // A second close() settles when the first one has, once the store is closed.
      if (closing === undefined) {
        closed = true;
        closedSignal.abort(new Error("cairn/ai: this kit is closed"));
        closing = (async () => {
          if (opened) await (await opened.catch(() => undefined))?.close();
        })();
      }
      return closing;
    },
  };
}
