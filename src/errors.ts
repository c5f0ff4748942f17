// Every public error class of cairn. Each carries a stable string `code` so callers can
// branch on it across processes (a recorded error is rebuilt from name/code/message).

export class CairnError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = "CairnError";
  }
}

/** Replayed code called something other than what the journal recorded at that point. */
export class NonDeterminismError extends CairnError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("NON_DETERMINISM", message, options);
    this.name = "NonDeterminismError";
  }
}

/** Throw from a step to fail it at once, without retries. */
export class FatalError extends CairnError {
  constructor(message: string, options?: { cause?: unknown }) {
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
  constructor(message: string, options?: { cause?: unknown }) {
    super("BUDGET_EXCEEDED", message, options);
    this.name = "BudgetExceededError";
  }
}

export class RunCanceledError extends CairnError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("RUN_CANCELED", message, options);
    this.name = "RunCanceledError";
  }
}

export class StepTimeoutError extends CairnError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("STEP_TIMEOUT", message, options);
    this.name = "StepTimeoutError";
  }
}

/** A value cannot be stored: unsupported type, or larger than the payload limit. */
export class SerializationError extends CairnError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("SERIALIZATION", message, options);
    this.name = "SerializationError";
  }
}

/** Internal: this worker's lease on a run was taken over; it must write nothing more. */
export class LeaseLostError extends CairnError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("LEASE_LOST", message, options);
    this.name = "LeaseLostError";
  }
}

export class UnknownWorkflowError extends CairnError {
  constructor(message: string, options?: { cause?: unknown }) {
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
  constructor(message: string, options?: { cause?: unknown }) {
    super("RUN_NOT_FOUND", message, options);
    this.name = "RunNotFoundError";
  }
}

/** An id reused for another workflow, or an action the run's status does not allow. */
export class RunConflictError extends CairnError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("RUN_CONFLICT", message, options);
    this.name = "RunConflictError";
  }
}

/** The store cannot be used: newer schema, corrupted file, unreachable database. */
export class StoreError extends CairnError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("STORE", message, options);
    this.name = "StoreError";
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
  const ctor = rec.code ? ERROR_BY_CODE[rec.code] : undefined;
  let err: Error;
  if (ctor) {
    err = new ctor(rec.message);
  } else if (rec.code) {
    err = new CairnError(rec.code, rec.message);
  } else {
    err = new Error(rec.message);
  }
  err.name = rec.name;
  if (rec.stack) err.stack = rec.stack;
  return err;
}

const ERROR_BY_CODE: Record<string, new (message: string) => CairnError> = {
  NON_DETERMINISM: NonDeterminismError,
  FATAL: FatalError,
  RATE_LIMIT: RateLimitError,
  BUDGET_EXCEEDED: BudgetExceededError,
  RUN_CANCELED: RunCanceledError,
  STEP_TIMEOUT: StepTimeoutError,
  SERIALIZATION: SerializationError,
  LEASE_LOST: LeaseLostError,
  UNKNOWN_WORKFLOW: UnknownWorkflowError,
  INPUT_VALIDATION: InputValidationError,
  RUN_NOT_FOUND: RunNotFoundError,
  RUN_CONFLICT: RunConflictError,
  STORE: StoreError,
};
