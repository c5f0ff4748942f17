// Whether the next call of a name made now would find a recorded outcome, for cairn's own
// layers above the context: an internal member keyed by a registered symbol, like FAIL_RUN
// (fail-run.ts). A look at the journal ahead of the calls, taking nothing: cairn/ai
// (tools.ts) asks it as a streamed loop's tool call is made, for the record of a stop that
// landed, in the first execution, after the tool's body ended and before its outcome was
// handed back (streamText gave up at once, with nothing else recording it).

/** The member of a WorkflowContext telling whether the next call of a name is recorded. */
export const NEXT_CALL_RECORDED = Symbol.for("cairn.nextCallRecorded");

/** True when the next call of `name` made by `ctx`'s workflow would find a recorded
 *  outcome; false for a context without the member (not the engine's): nothing is read. */
export function nextCallRecorded(ctx: object, name: string): boolean {
  const f = (ctx as Record<symbol, unknown>)[NEXT_CALL_RECORDED];
  return typeof f === "function" ? Boolean((f as (n: string) => boolean)(name)) : false;
}
