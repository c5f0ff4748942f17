// cairn/store: what a third-party backend needs to implement the Store interface and pass
// the public contract suite (cairn/testing/store-contract): the interface, every record
// type it takes and returns, and the shared helpers both built-in backends use.

export type { Clock } from "./lib/clock.js";
export type {
  AnswerApprovalOutcome,
  ApprovalDecision,
  ApprovalRecord,
  ApprovalVerbs,
  RequestApprovalOutcome,
} from "./store/approval-records.js";
export type {
  Amounts,
  AttemptRecord,
  CancelOutcome,
  ClaimedRun,
  ErrorRecord,
  EventHead,
  EventHeadsPage,
  EventPayload,
  EventRecord,
  IntentRecord,
  Journal,
  LoadJournalOptions,
  NewEvent,
  NewRun,
  PendingEventsOptions,
  Release,
  ReleasedRun,
  ReleaseOutcome,
  ResumeOutcome,
  RunFilter,
  RunRecord,
  RunStatus,
  RunWrite,
  SendEventOutcome,
  StepKind,
  StepRecord,
  Store,
  StoreHint,
  WorkerRecord,
  WriteOutcome,
} from "./store/store.js";
export { TERMINAL_STATUSES, unservedReason } from "./store/store.js";
export type {
  DeleteRunOutcome,
  DeleteRunsOptions,
  PutWorkspaceOutcome,
  WorkspaceObject,
  WorkspaceVerbs,
} from "./store/workspace-records.js";
