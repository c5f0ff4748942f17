// A model or tool call its caller aborted (the SDK's abortSignal: a stop, the SDK's own
// timeouts) is final: it is not retried, and it keeps the name the caller knows it by.

import { FatalError } from "../index.js";

/** A call its caller aborted: final (FatalError), under the name the SDK and the caller
 *  know it by (AbortError, TimeoutError). */
export function callerAborted(err: unknown): FatalError {
  const e = err as { name?: unknown; message?: unknown } | undefined;
  const fatal = new FatalError(
    typeof e?.message === "string" ? e.message : "the call was aborted by its caller",
    { cause: err },
  );
  fatal.name = typeof e?.name === "string" ? e.name : "AbortError";
  return fatal;
}
