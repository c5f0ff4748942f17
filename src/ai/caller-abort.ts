// A model or tool call its caller aborted (the SDK's abortSignal: a stop, the SDK's own
// timeouts) is final: it is not retried, and it keeps the name the caller knows it by.

import { FatalError } from "../index.js";
import { isCallerAbort } from "./caller-stop.js";

/** A call its caller aborted: final (FatalError), under the name the SDK and the caller
 *  know it by (AbortError, TimeoutError). */
export function callerAborted(err: unknown): FatalError {
  const e = err as { name?: unknown; message?: unknown } | undefined;
  const fatal = new FatalError(
    typeof e?.message === "string" ? e.message : "the call was aborted by its caller",
    { cause: err },
  );
  fatal.name = typeof e?.name === "string" ? e.name : "AbortError";
  // A stop with a reason of the caller's own (`controller.abort(new Error("stop"))`) keeps
  // its name: its code says it is a caller's abort, which a replay must tell from the
  // tool's own errors (caller-stop.ts). Recorded as FATAL, the replay took it for the
  // tool's error and made the model call the first execution never made.
  if (fatal.name !== "AbortError" && fatal.name !== "TimeoutError") {
    (fatal as { code: string }).code = "CALLER_ABORTED";
  }
  return fatal;
}

/** `err`, marked, when it is a caller's abort, as what streamText rejects its results with.
 *  streamText rejects with its signal's reason when the signal fires (its own listener);
 *  a replay, whose signal has not fired, was handed the recorded abort as the stream's
 *  error and rejected with NoOutputGeneratedError instead (or, after an earlier step of its
 *  loop, resolved with that step's text). The SDK rejects with an error part's error that
 *  carries this marker: the abort the first execution ended with. */
export function asStreamEnd(err: unknown): unknown {
  if (isCallerAbort(err)) {
    Object.defineProperty(err, Symbol.for(NO_OUTPUT_MARKER), { value: true });
  }
  return err;
}

/** The AI SDK's mark of a NoOutputGeneratedError (AISDKError.hasMarker). */
const NO_OUTPUT_MARKER = "vercel.ai.error.AI_NoOutputGeneratedError";
