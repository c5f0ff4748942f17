// The public API of cairn: an explicit list. Types are exported with `export type`.
// The PostgreSQL store is "cairn/postgres" (so that this entry never loads `pg`); the types
// a third-party store needs are "cairn/store".

export { DEFAULT_MAX_PAYLOAD_BYTES } from "./codec/codec.js";
export type { EncryptionKey } from "./codec/encryption.js";
export { parseEncryptionKeys } from "./codec/encryption.js";
export type { ApprovalKey } from "./engine/approval-tokens.js";
export { createApprovalToken, parseApprovalKeys } from "./engine/approval-tokens.js";
export type {
  AnswerOptions,
  ApprovalLinkInfo,
  ApprovalLinks,
  ApprovalView,
} from "./engine/approvals.js";
export type {
  Engine,
  EngineMetrics,
  EngineOptions,
  EventsPage,
  GcOptions,
  GcResult,
  RunHandle,
  SendEventOptions,
  SentEvent,
  StartedRun,
  StartOptions,
  StepsPage,
} from "./engine/engine.js";
export { createEngine } from "./engine/engine.js";
export type { Limits } from "./engine/limits.js";
export { DEFAULT_LIMITS } from "./engine/limits.js";
export type { Logger, WorkerEvent, WorkerEventFields } from "./engine/logger.js";
export { consoleLogger, workerEventMessage } from "./engine/logger.js";
export type {
  AttemptView,
  EventView,
  RunView,
  ShownError,
  StepStatus,
  StepView,
  Withheld,
  WorkerView,
} from "./engine/views.js";
export { EncryptedValue, UndecodableValue } from "./engine/views.js";
export type {
  CheckpointChange,
  CheckpointDiff,
  CheckpointEntry,
  CheckpointView,
  WorkspaceFileView,
  WorkspaceView,
} from "./engine/workspace-views.js";
export type { ErrorCode, ErrorSubject } from "./errors.js";
export {
  ApprovalNotFoundError,
  ApprovalTokenError,
  BudgetExceededError,
  CairnError,
  EncryptionKeyMissingError,
  EngineClosedError,
  FatalError,
  InputValidationError,
  LimitError,
  NonDeterminismError,
  PayloadKeyError,
  RateLimitError,
  RunCanceledError,
  RunConflictError,
  RunNotFoundError,
  SerializationError,
  StepTimeoutError,
  StoreError,
  UnknownWorkflowError,
  WorkerLostError,
  WorkspaceError,
  WorkspaceNotFoundError,
} from "./errors.js";
export type { Clock } from "./lib/clock.js";
export { realClock } from "./lib/clock.js";
export type { Duration } from "./lib/duration.js";
export {
  type EncryptionOptions,
  encryptedStore,
} from "./store/encrypted-store.js";
export type { StoreSelection } from "./store/select.js";
export { selectStore } from "./store/select.js";
export { sqliteStore } from "./store/sqlite/sqlite-store.js";
export type { Amounts, RunFilter, RunStatus, Store, StreamChunk } from "./store/store.js";
/** The event an approval waits for is "cairn.approval:<key>" (RunFilter.waitingForEventPrefix). */
export { APPROVAL_EVENT_PREFIX } from "./workflow/approval-calls.js";
export type {
  ApprovalOptions,
  ApprovalResult,
  Effect,
  StepContext,
  StepOptions,
  WaitOptions,
  WaitResult,
  WorkflowContext,
} from "./workflow/context-types.js";
export type { AnyWorkflow, Workflow, WorkflowOptions } from "./workflow/define.js";
export { workflow } from "./workflow/define.js";
export type { RetryPolicy } from "./workflow/retry.js";
export { DEFAULT_RETRY } from "./workflow/retry.js";
export type { Workspace, WorkspaceOptions } from "./workspace/types.js";
