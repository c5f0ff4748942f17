// Every public error class of cairn. Each carries a stable string `code` so callers can
// branch on it across processes (a recorded error is rebuilt from name/code/message).

import { isNativeError } from "node:util/types";
import { fromStoredText, toStoredText } from "./codec/stored-text.js";

/** Every code a cairn error carries (docs/API.md "Errors" says when each is thrown). */
export type ErrorCode =
  | "NON_DETERMINISM"
  | "FATAL"
  | "CALLER_ABORTED"
  | "RATE_LIMIT"
  | "BUDGET_EXCEEDED"
  | "RUN_CANCELED"
  | "STEP_TIMEOUT"
  | "SERIALIZATION"
  | "LEASE_LOST"
  | "WORKER_LOST"
  | "UNKNOWN_WORKFLOW"
  | "INPUT_VALIDATION"
  | "RUN_NOT_FOUND"
  | "RUN_CONFLICT"
  | "STORE"
  | "ENGINE_CLOSED"
  | "WORKSPACE"
  | "WORKSPACE_NOT_FOUND"
  | "APPROVAL_NOT_FOUND"
  | "APPROVAL_TOKEN"
  | "LIMIT"
  | "PAYLOAD_KEY"
  | "ENCRYPTION_KEY_MISSING";

/** The run (and the call in it) an error is about, as fields a caller can branch on. */
export interface ErrorSubject {
  runId?: string;
  key?: string;
}

export class CairnError extends Error {
  readonly code: ErrorCode;
  /** The run the error is about, when it is about one. */
  readonly runId?: string;
  /** The call (step key) in that run, when it is about one. */
  readonly key?: string;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown } & ErrorSubject) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.name = "CairnError";
    if (options?.runId !== undefined) this.runId = options.runId;
    if (options?.key !== undefined) this.key = options.key;
  }
}

/** The one wording of "no such run" (the engine, the HTTP API, the CLI, the stores). */
export function runNotFound(runId: string, consequence?: string): RunNotFoundError {
  const quoted = JSON.stringify(runId);
  return new RunNotFoundError(
    `Run ${quoted} does not exist${consequence ? `; ${consequence}` : ""}`,
    { runId },
  );
}

/** Replayed code called something other than what the journal recorded at that point. */
export class NonDeterminismError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("NON_DETERMINISM", message, options);
    this.name = "NonDeterminismError";
  }
}

/** Throw from a step to fail it at once, without retries. */
export class FatalError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("FATAL", message, options);
    this.name = "FatalError";
  }
}

/** Throw from a step when a provider rate-limits: the retry waits at least `retryAfter`. */
export class RateLimitError extends CairnError {
  readonly retryAfter: number | string | Date | undefined;
  constructor(message: string, options?: { retryAfter?: number | string | Date; cause?: unknown }) {
    super("RATE_LIMIT", message, options);
    this.name = "RateLimitError";
    this.retryAfter = options?.retryAfter;
  }
}

export class BudgetExceededError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("BUDGET_EXCEEDED", message, options);
    this.name = "BudgetExceededError";
  }
}

export class RunCanceledError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("RUN_CANCELED", message, options);
    this.name = "RunCanceledError";
  }
}

export class StepTimeoutError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("STEP_TIMEOUT", message, options);
    this.name = "StepTimeoutError";
  }
}

/** A workspace (ctx.workspace) cannot be checkpointed or restored: a file or a checkpoint
 *  over its size limit, a file type or name it cannot keep, a checkpoint no longer stored.
 *  A FatalError: the step fails at once, since trying again would meet the same thing. */
export class WorkspaceError extends FatalError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super(message, options);
    (this as { code: string }).code = "WORKSPACE";
    this.name = "WorkspaceError";
  }
}

/** A run has no workspace checkpoint of that hash, or a checkpoint has no file at that path
 *  (inspection: engine.readCheckpoint, readWorkspaceFile, diffCheckpoints). */
export class WorkspaceNotFoundError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("WORKSPACE_NOT_FOUND", message, options);
    this.name = "WorkspaceNotFoundError";
  }
}

/** A run has no approval of that name or key (ctx.approval). */
export class ApprovalNotFoundError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("APPROVAL_NOT_FOUND", message, options);
    this.name = "ApprovalNotFoundError";
  }
}

/** An approval link's token is not valid: malformed, signed by no configured key (forged or
 *  from another deployment), or expired. Nothing was changed. */
export class ApprovalTokenError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("APPROVAL_TOKEN", message, options);
    this.name = "ApprovalTokenError";
  }
}

/** A value cannot be stored: unsupported type, or larger than the payload limit. */
export class SerializationError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("SERIALIZATION", message, options);
    this.name = "SerializationError";
  }
}

/** Recorded on an attempt that was in flight when its worker stopped (a crash, a kill, a
 *  lost lease) before recording an outcome; the attempt counts toward `maxAttempts`. */
export class WorkerLostError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("WORKER_LOST", message, options);
    this.name = "WorkerLostError";
  }
}

/** Internal: this worker's lease on a run was taken over; it must write nothing more. */
export class LeaseLostError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("LEASE_LOST", message, options);
    this.name = "LeaseLostError";
  }
}

export class UnknownWorkflowError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("UNKNOWN_WORKFLOW", message, options);
    this.name = "UnknownWorkflowError";
  }
}

export class InputValidationError extends CairnError {
  readonly issues: ReadonlyArray<{ message: string; path?: ReadonlyArray<unknown> }>;
  constructor(
    message: string,
    issues: ReadonlyArray<{ message: string; path?: ReadonlyArray<unknown> }> = [],
    options?: { cause?: unknown },
  ) {
    super("INPUT_VALIDATION", message, options);
    this.name = "InputValidationError";
    this.issues = issues;
  }
}

export class RunNotFoundError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("RUN_NOT_FOUND", message, options);
    this.name = "RunNotFoundError";
  }
}

/** An id reused for another workflow, or an action the run's status does not allow. */
export class RunConflictError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("RUN_CONFLICT", message, options);
    this.name = "RunConflictError";
  }
}

/** The store cannot be used: newer schema, corrupted file, unreachable database. */
export class StoreError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("STORE", message, options);
    this.name = "StoreError";
  }
}

/** A different record already exists under a key: the journal is immutable, so the write
 *  was refused. Internal: the execution that meets it fails its run with it. */
export class WriteConflictError extends Error {
  constructor(
    readonly runId: string,
    readonly key: string,
  ) {
    super(
      `Run "${runId}": a different record already exists under key "${key}"; the journal is immutable, so this write was refused`,
    );
    this.name = "WriteConflictError";
  }
}

/** An error as the journal records it: name, code (a CairnError's), message, stack. */
export function toErrorRecord(err: unknown): {
  name: string;
  code?: string | undefined;
  message: string;
  stack?: string | undefined;
} {
  // Every field as the text a store keeps: the record handed to the workflow on its first
  // execution must be the one a replay reads back (an Error whose message was set to
  // undefined was "" at first and "null" on replay; a BigInt one could not be stored at all,
  // and the run was handed back for ever). An Error of another realm (node:vm, a sandbox)
  // is one too: instanceof knows only this realm's, and its name and code were lost.
  if (isErrorValue(err)) {
    const code = read(err, "code");
    const stack = read(err, "stack");
    return {
      name: asText(read(err, "name"), "Error"),
      code: typeof code === "string" ? code : undefined,
      message: toStoredText(asText(read(err, "message"), "")),
      stack: typeof stack === "string" ? toStoredText(stack) : undefined,
    };
  }
  return {
    name: "Error",
    message: toStoredText(asText(err, err === null ? "null" : "undefined")),
  };
}

/** Whether a thrown value is an Error (of any realm). A revoked proxy throws on instanceof:
 *  none (then its record failed to build, and the run's end was never written). */
function isErrorValue(err: unknown): err is Error {
  try {
    return err instanceof Error || isNativeError(err);
  } catch {
    return false;
  }
}

/** A property of a thrown value (a getter may throw: then undefined). */
function read(v: object, key: string): unknown {
  try {
    return (v as Record<string, unknown>)[key];
  } catch {
    return undefined;
  }
}

/** A thrown value's field as text: strings as they are, null and undefined as `fallback`,
 *  anything else as String() makes it (or, when that throws, its tag). */
function asText(v: unknown, fallback: string): string {
  if (typeof v === "string") return v;
  if (v === undefined || v === null) return fallback;
  try {
    return String(v);
  } catch {
    try {
      return Object.prototype.toString.call(v);
    } catch {
      return "[a value that cannot be read]"; // a revoked proxy
    }
  }
}

/** The engine was closed: it serves no more calls. Runs are not affected (they live in the
 *  store); a new engine (createEngine) picks them up. */
export class EngineClosedError extends CairnError {
  constructor(message: string, options?: { cause?: unknown } & ErrorSubject) {
    super("ENGINE_CLOSED", message, options);
    this.name = "EngineClosedError";
  }
}

/**
 * A recorded error rebuilt in another process (or after a replay). Keeps the original
 * `name`, `code` and `message`; `instanceof` the matching class when the code is known.
 */
export function errorFromRecord(rec: {
  name: string;
  code?: string | undefined;
  message: string;
  stack?: string | undefined;
}): Error {
  const make = rec.code ? ERROR_BY_CODE[rec.code as ErrorCode] : undefined;
  const message = fromStoredText(rec.message);
  let err: Error;
  if (make) {
    err = make(message);
  } else if (rec.code) {
    // Not one of cairn's (a Node error's ECONNRESET, a provider's code): a plain Error that
    // keeps its code, not a CairnError it never was.
    err = Object.assign(new Error(message), { code: rec.code });
  } else {
    err = new Error(message);
  }
  err.name = rec.name;
  if (rec.stack) err.stack = fromStoredText(rec.stack);
  return err;
}

const ERROR_BY_CODE: Partial<Record<ErrorCode, (message: string) => CairnError>> = {
  NON_DETERMINISM: (m) => new NonDeterminismError(m),
  FATAL: (m) => new FatalError(m),
  CALLER_ABORTED: (m) => Object.assign(new FatalError(m), { code: "CALLER_ABORTED" as const }),
  RATE_LIMIT: (m) => new RateLimitError(m),
  BUDGET_EXCEEDED: (m) => new BudgetExceededError(m),
  RUN_CANCELED: (m) => new RunCanceledError(m),
  STEP_TIMEOUT: (m) => new StepTimeoutError(m),
  SERIALIZATION: (m) => new SerializationError(m),
  LEASE_LOST: (m) => new LeaseLostError(m),
  WORKER_LOST: (m) => new WorkerLostError(m),
  UNKNOWN_WORKFLOW: (m) => new UnknownWorkflowError(m),
  INPUT_VALIDATION: (m) => new InputValidationError(m),
  RUN_NOT_FOUND: (m) => new RunNotFoundError(m),
  RUN_CONFLICT: (m) => new RunConflictError(m),
  STORE: (m) => new StoreError(m),
  ENGINE_CLOSED: (m) => new EngineClosedError(m),
  WORKSPACE: (m) => new WorkspaceError(m),
  WORKSPACE_NOT_FOUND: (m) => new WorkspaceNotFoundError(m),
  APPROVAL_NOT_FOUND: (m) => new ApprovalNotFoundError(m),
  APPROVAL_TOKEN: (m) => new ApprovalTokenError(m),
  LIMIT: (m) => new LimitError(m, { limit: "unknown", max: Number.NaN }),
  PAYLOAD_KEY: (m) => new PayloadKeyError(m, { keyId: "unknown" }),
  ENCRYPTION_KEY_MISSING: (m) =>
    new EncryptionKeyMissingError(m, { store: "unknown", what: "a payload" }),
};

/** A stored payload is encrypted with a key this process was not given, or cannot be
 *  decrypted with the key of that id it was given (another key under the same id, or a
 *  damaged value). `keyId` names the key; the payload itself is never in the message. */
export class PayloadKeyError extends CairnError {
  readonly keyId: string;
  constructor(message: string, options: { keyId: string; cause?: unknown }) {
    super("PAYLOAD_KEY", message, options);
    this.name = "PayloadKeyError";
    this.keyId = options.keyId;
  }
}

/** A store marked encrypted (encryptedStore opened it) was given a payload in plain text by
 *  a process that writes without keys (its store is not an encryptedStore): refused, nothing
 *  written. `store` names the store, `what` the payload (never its content); `runId` and
 *  `key` say where. Give the process the keys, or remove the mark (store.unmarkEncrypted())
 *  if the store's workers no longer encrypt. */
export class EncryptionKeyMissingError extends CairnError {
  readonly store: string;
  readonly what: string;
  constructor(
    message: string,
    options: { store: string; what: string; cause?: unknown } & ErrorSubject,
  ) {
    super("ENCRYPTION_KEY_MISSING", message, options);
    this.name = "EncryptionKeyMissingError";
    this.store = options.store;
    this.what = options.what;
  }
}

/** A limit of the engine (EngineOptions.limits) was reached: `limit` names it, `max` is its
 *  value. Nothing beyond it was recorded. */
export class LimitError extends CairnError {
  readonly limit: string;
  readonly max: number;
  constructor(message: string, options: { limit: string; max: number; cause?: unknown }) {
    super("LIMIT", message, options);
    this.name = "LimitError";
    this.limit = options.limit;
    this.max = options.max;
  }
}
