// The AI SDK's language-model shapes, derived from the `ai` package itself (its
// LanguageModel union), so cairn/ai needs no second SDK package to name them. The SDK
// calls `doGenerate` / `doStream` on a model of specification v4; cairn/ai wraps one.

import type { LanguageModel } from "ai";

/** A language model of the SDK's current specification (v4). */
export type LanguageModelV4 = Extract<LanguageModel, { specificationVersion: "v4" }>;
/** A model object of any specification the SDK accepts (v2, v3, v4); not a string id. */
export type ModelObject = Exclude<LanguageModel, string>;
export type CallOptions = Parameters<LanguageModelV4["doGenerate"]>[0];
export type GenerateResult = Awaited<ReturnType<LanguageModelV4["doGenerate"]>>;
export type StreamResult = Awaited<ReturnType<LanguageModelV4["doStream"]>>;
export type StreamPart = StreamResult["stream"] extends ReadableStream<infer P> ? P : never;
export type Usage = GenerateResult["usage"];
