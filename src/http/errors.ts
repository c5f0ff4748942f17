// Errors as the API answers them: JSON `{ "error": { code, message, issues? } }` with the
// HTTP status the code calls for. cairn's own errors keep their code (RUN_NOT_FOUND is a
// 404, RUN_CONFLICT a 409, ...); anything unexpected is a 500 whose body says nothing
// about the failure (the log has its name and message — never a payload).

import { CairnError, type ErrorCode, InputValidationError } from "../index.js";
import { leadingText } from "../lib/text.js";
import type { Issue } from "./schema.js";

export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly issues?: Issue[],
  ) {
    super(message);
    this.name = "HttpError";
  }
}

/** Every code's status; null for the codes a request should never meet (a run's own
 *  failures, control flow inside a worker): they are answered as an internal error, and
 *  logged. Total, so a new code needs a decision here. */
const STATUS_BY_CODE: Record<ErrorCode, number | null> = {
  NON_DETERMINISM: null,
  FATAL: null,
  CALLER_ABORTED: null,
  RATE_LIMIT: null,
  BUDGET_EXCEEDED: null,
  RUN_CANCELED: null,
  STEP_TIMEOUT: null,
  LEASE_LOST: null,
  WORKER_LOST: null,
  RUN_NOT_FOUND: 404,
  UNKNOWN_WORKFLOW: 404,
  RUN_CONFLICT: 409,
  INPUT_VALIDATION: 400,
  SERIALIZATION: 400,
  STORE: 503,
  // The engine behind the API is shutting down: try again on another instance.
  ENGINE_CLOSED: 503,
  APPROVAL_NOT_FOUND: 404,
  APPROVAL_TOKEN: 403,
  WORKSPACE_NOT_FOUND: 404,
  // A checkpoint object the store cannot give back intact (deleted, damaged).
  WORKSPACE: 410,
  LIMIT: 409,
  PAYLOAD_KEY: 503,
  // A plain payload refused by a store marked encrypted: this server needs the keys.
  ENCRYPTION_KEY_MISSING: 409,
};

export interface ErrorBody {
  error: { code: string; message: string; issues?: Issue[] };
}

/** The status and body for an error; `log` hears about the ones that are not expected. */
export function errorAnswer(
  err: unknown,
  log: (message: string) => void,
): { status: number; body: ErrorBody } {
  if (err instanceof HttpError) {
    const body: ErrorBody = { error: { code: err.code, message: err.message } };
    if (err.issues && err.issues.length > 0) body.error.issues = err.issues;
    return { status: err.status, body };
  }
  const status = err instanceof CairnError ? STATUS_BY_CODE[err.code] : null;
  if (err instanceof CairnError && typeof status === "number") {
    const body: ErrorBody = { error: { code: err.code, message: err.message } };
    if (err instanceof InputValidationError && err.issues.length > 0) {
      body.error.issues = err.issues.slice(0, 20).map((i) => ({
        path: leadingText(
          (i.path ?? [])
            .map((p) => `/${String(typeof p === "object" && p !== null && "key" in p ? p.key : p)}`)
            .join(""),
          200,
        ),
        message: leadingText(i.message, 500),
      }));
    }
    if (err.code === "STORE") log(`store error: ${err.message}`);
    return { status, body };
  }
  if (isClientGone(err)) {
    // Nobody reads this answer; an operator's log would only count a client that left.
    return {
      status: 400,
      body: {
        error: { code: "VALIDATION", message: "The request's body ended before it arrived whole." },
      },
    };
  }
  const name = err instanceof Error ? err.name : typeof err;
  const message = err instanceof Error ? err.message : "";
  log(`unexpected error in a request: ${name}: ${message.slice(0, 500)}`);
  return {
    status: 500,
    body: {
      error: { code: "INTERNAL", message: "Internal error; the server's log has the details." },
    },
  };
}

/** Node's error for a request whose client went away while its body was being read. */
function isClientGone(err: unknown): boolean {
  return (
    err instanceof Error &&
    (err as NodeJS.ErrnoException).code === "ECONNRESET" &&
    err.message === "aborted"
  );
}

/** An id or name for a message: quoted, and cut when it is long. */
export function quote(text: string, max = 80): string {
  return JSON.stringify(text.length > max ? `${leadingText(text, max)}…` : text);
}
