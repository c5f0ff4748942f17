// The engine's limits, with their defaults. Each one is checked where the thing is
// recorded, and reaching it is a LimitError (or, inside a run, a failed run) that names the
// limit and its value; nothing beyond it is stored. Limits of names and ids are fixed and
// checked where they are given (run ids 256, workflow names 128, call names 200, event names
// 200, idempotency keys 256 characters); the payload limit is `maxPayloadBytes`.

export interface Limits {
  /** Calls a run may record (steps, effects, sleeps, waits, children, approvals, now/random/
   *  uuid): the run fails past it. Default 10,000. */
  maxStepsPerRun: number;
  /** Events a run may be sent, consumed or not: sendEvent is refused past it. Default 10,000. */
  maxEventsPerRun: number;
  /** Events waiting for the run to consume them: sendEvent is refused past it (a run that
   *  never waits cannot grow without bound). Default 1,000. */
  maxPendingEventsPerRun: number;
  /** Workflows (name@version) one engine registers. Default 1,000. */
  maxWorkflows: number;
}

export const DEFAULT_LIMITS: Readonly<Limits> = Object.freeze({
  maxStepsPerRun: 10_000,
  maxEventsPerRun: 10_000,
  maxPendingEventsPerRun: 1_000,
  maxWorkflows: 1_000,
});

/** The defaults with `given` over them; a TypeError names a value that is not a whole
 *  number >= 1. */
export function resolveLimits(given: Partial<Limits> | undefined): Limits {
  const out: Limits = { ...DEFAULT_LIMITS };
  for (const [name, v] of Object.entries(given ?? {})) {
    if (!(name in DEFAULT_LIMITS)) {
      throw new TypeError(
        `createEngine(): limits.${name} is not a limit; the limits are ${Object.keys(DEFAULT_LIMITS).join(", ")}`,
      );
    }
    if (v === undefined) continue;
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 1) {
      throw new TypeError(
        `createEngine(): limits.${name} must be a whole number >= 1 (got ${String(v)})`,
      );
    }
    out[name as keyof Limits] = v;
  }
  return out;
}
