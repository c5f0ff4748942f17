// Errors a Store call threw, told apart from cairn's own refusals of what it was asked to
// store. A third-party Store over HTTP meets a network failure as Node's fetch reports it,
// a TypeError ("fetch failed"): creating a child must not take that for a refusal of the
// child's input (context.ts records a refusal as the call's outcome, for good), but hand the
// run back to be tried again, as any other store failure.

const failures = new WeakSet<object>();

/** Notes `err` as thrown by a store call; returns it. */
export function asStoreFailure(err: unknown): unknown {
  if ((typeof err === "object" && err !== null) || typeof err === "function") failures.add(err);
  return err;
}

/** True when `err` was thrown by a store call (asStoreFailure). */
export function isStoreFailure(err: unknown): boolean {
  return (
    ((typeof err === "object" && err !== null) || typeof err === "function") && failures.has(err)
  );
}
