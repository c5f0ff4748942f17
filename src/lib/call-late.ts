// Whether a call made now is "late" (made outside any delivery's cascade, after work of the
// workflow's own: a timer, I/O), for cairn's own layers above the context: an internal
// member keyed by a registered symbol, like FAIL_RUN (fail-run.ts). cairn/ai (conversation.ts)
// asks it when a call continues an earlier answer: only then does the place it claims
// decide whether the core accepts the call.

/** The member of a WorkflowContext telling whether a call made now is late (context.ts). */
export const CALL_IS_LATE = Symbol.for("cairn.callIsLate");

/** True when a call made now by `ctx`'s workflow would be late; true for a context without
 *  the member (not the engine's): the cautious answer. */
export function callIsLate(ctx: object): boolean {
  const f = (ctx as Record<symbol, unknown>)[CALL_IS_LATE];
  return typeof f === "function" ? Boolean((f as () => boolean)()) : true;
}
