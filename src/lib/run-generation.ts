// The generation of the execution a WorkflowContext belongs to, for cairn's own layers
// above it: an internal member keyed by a registered symbol, like FAIL_RUN (fail-run.ts).
// cairn/ai numbers its run-stream chunks with it: attempt numbers start again at 1 when a
// failed run is resumed (a new generation), so (generation, attempt) orders a call's
// executions where the attempt alone does not.

/** The member of a WorkflowContext holding its generation (context.ts sets it). */
export const RUN_GENERATION = Symbol.for("cairn.runGeneration");

/** `ctx`'s generation; 0 for a context without the member (not the engine's). */
export function generationOf(ctx: object): number {
  const g = (ctx as Record<symbol, unknown>)[RUN_GENERATION];
  return typeof g === "number" ? g : 0;
}
