// The public API of cairn: an explicit list. Types are exported with `export type`.

export { DEFAULT_MAX_PAYLOAD_BYTES } from "./codec/codec.js";
export type {
  Engine,
  EngineMetrics,
  EngineOptions,
  RunHandle,
  StartOptions,
} from "./engine/engine.js";
export { createEngine } from "./engine/engine.js";
export type { RetryPolicy } from "./engine/retry.js";
export { DEFAULT_RETRY } from "./engine/retry.js";
export type { AttemptView, RunView, StepStatus, StepView } from "./engine/views.js";
export {
  BudgetExceededError,
  CairnError,
  FatalError,
  InputValidationError,
  LeaseLostError,
  NonDeterminismError,
  RateLimitError,
  RunCanceledError,
  RunConflictError,
  RunNotFoundError,
  SerializationError,
  StepTimeoutError,
  StoreError,
  UnknownWorkflowError,
} from "./errors.js";
export type { Clock } from "./lib/clock.js";
export { realClock } from "./lib/clock.js";
export type { Duration } from "./lib/duration.js";
export { type PostgresStoreOptions, postgresStore } from "./store/postgres/postgres-store.js";
export { sqliteStore } from "./store/sqlite/sqlite-store.js";
export type { Amounts, RunFilter, RunStatus, Store } from "./store/store.js";
export type {
  Effect,
  StepContext,
  StepOptions,
  WaitResult,
  WorkflowContext,
} from "./workflow/context-types.js";
export type { AnyWorkflow, Workflow, WorkflowOptions } from "./workflow/define.js";
export { workflow } from "./workflow/define.js";
