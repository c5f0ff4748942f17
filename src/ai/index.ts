// cairn/ai: durable agents with the Vercel AI SDK (`ai`, version 7, an optional peer
// dependency: only code that imports this subpath needs it). An explicit list.

export { type Ai, type AiOptions, createAi } from "./create-ai.js";
export type { ModelLimits } from "./limiter.js";
export type { ModelOptions } from "./model-setup.js";
export type { ModelPrice } from "./pricing.js";
export {
  isLaterExecution,
  type ReadStreamOptions,
  type RunStreamChunk,
} from "./run-stream.js";
export type { LanguageModelV4 } from "./sdk-types.js";
export {
  type DurableToolOptions,
  type EffectToolDefinition,
  type EffectToolOptions,
  effectTool,
  idempotencyKeyOf,
  type ToolsOptions,
} from "./tools.js";
