// How cairn's own layers above the workflow context (cairn/ai, workspaces) fail a run with a
// divergence they detect, as the engine's own checks do: an internal member of the context,
// keyed by a registered symbol (so a second copy of the module finds the same one). Thrown
// into user code instead, the error could be caught (the AI SDK's streamText turns it into
// an error part) and a replay would go on with other data than the first execution had.

/** The member of a WorkflowContext that fails its run (context.ts sets it). */
export const FAIL_RUN = Symbol.for("cairn.failRun");

/** Fails `ctx`'s run with `err`, returning a promise that never settles (nothing may go on
 *  after a divergence); a context without the member (not the engine's) gets `err` thrown. */
export function failRunWith(ctx: object, err: Error): Promise<never> {
  const fail = (ctx as Record<symbol, unknown>)[FAIL_RUN];
  if (typeof fail === "function") return (fail as (e: Error) => Promise<never>)(err);
  throw err;
}
