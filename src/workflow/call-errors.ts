// How a call's error is marked with the call's key (so that a resume knows which calls
// failed the run), and which stored payloads this worker cannot read.

import { UndecodableError } from "../codec/codec.js";
import { PayloadKeyError } from "../errors.js";
import type { Call } from "./call-core.js";

/** Marks an error handed to the workflow as a call's outcome, with the call's key. */
export const CALL_KEY = Symbol.for("cairn.callKey");

/** The key of the call whose error this is (or caused it), if any. */
export function failedCallKey(err: unknown): string | null {
  let e: unknown = err;
  try {
    for (let depth = 0; depth < 8 && e instanceof Error; depth++) {
      const key = (e as unknown as Record<symbol, unknown>)[CALL_KEY];
      if (typeof key === "string") return key;
      e = e.cause;
    }
  } catch {
    // A thrown value that throws when read (a revoked proxy): no call's error. Let through,
    // the run's end was never written and the run stayed running, leased, for ever.
  }
  return null;
}

/** The keys of the calls whose errors failed the run: the one failedCallKey finds, or, for
 *  an AggregateError (Promise.any with every branch failed) that no call's error caused,
 *  every call's in it (nested ones too), so that a resume executes each of them again;
 *  repairing one alone would leave the others' recorded errors replayed for ever. */
export function failedCallKeys(err: unknown): string[] {
  const keys = new Set<string>();
  // Each error once: an AggregateError that holds one error many times (or itself) at
  // every level was visited a number of times exponential in its depth, hanging the worker.
  const seen = new Set<unknown>();
  const visit = (err: unknown, depth: number): void => {
    let e: unknown = err;
    for (let link = 0; link < 8 && e instanceof Error && !seen.has(e); link++) {
      seen.add(e);
      const key = (e as unknown as Record<symbol, unknown>)[CALL_KEY];
      if (typeof key === "string") {
        keys.add(key);
        return;
      }
      // An AggregateError a call's error caused (its cause chain) names that call, as any
      // error does: only one that no call caused stands for the errors it holds.
      if (
        e instanceof AggregateError &&
        Array.isArray(e.errors) &&
        failedCallKey(e.cause) === null
      ) {
        // Every error it holds: a resume must execute again each call of a Promise.any over
        // any number of branches (a cap left the calls past it replaying their errors for
        // ever). The keys are calls of this run, no more than it made (maxStepsPerRun).
        if (depth < 8) for (const inner of e.errors) visit(inner, depth + 1);
        return;
      }
      e = e.cause;
    }
  };
  try {
    visit(err, 0);
  } catch {
    // A thrown value that throws when read (a revoked proxy): the keys found before it.
    // Let through, the run's end was never written and the run stayed running for ever.
  }
  return [...keys];
}

/** A payload this worker cannot decrypt, met while replaying or executing a call; not a
 *  call's recorded outcome that happens to be a PayloadKeyError (it carries its key, and is
 *  handed over as any outcome). */
export function keyMissing(err: unknown): boolean {
  return err instanceof PayloadKeyError && failedCallKey(err) === null;
}

/** A stored payload this worker cannot use: encrypted with a key it lacks, or undecodable. */
export function unreadable(err: unknown): boolean {
  return keyMissing(err) || err instanceof UndecodableError;
}

/** An undecodable record's error, naming the call it belongs to. */
export function undecodableCall(call: Call, err: unknown): Error {
  if (!(err instanceof UndecodableError)) return err as Error;
  return new UndecodableError(`the recorded result of ${call.kind} "${call.key}" ${err.message}`, {
    cause: err,
  });
}
