// What close() leaves running once it resolves: work that outlasted its bound (an open of
// the store, a claim or a create still unanswered) hands back what it leased as it answers,
// then closes the store. A process that exits right after close() (`cairn worker`) cuts
// that short, and the runs it leased stay leased to a worker that is gone until their leases
// end: such a caller waits for it here, within a bound of its own. Not public API.

import type { Engine } from "./engine.js";
import type { EngineInternals } from "./engine-internals.js";

const leftoversOf = new WeakMap<Engine, EngineInternals>();

/** Lets closeLeftovers(engine) find the engine's internals. */
export function trackCloseLeftovers(engine: Engine, internals: EngineInternals): void {
  leftoversOf.set(engine, internals);
}

/** Settles once close() has resolved and everything it left running has ended (at once
 *  when it left nothing). Never rejects: that work reports its own failures to the log. */
export async function closeLeftovers(engine: Engine): Promise<void> {
  const internals = leftoversOf.get(engine);
  if (internals === undefined) return;
  await internals.closing?.catch(() => {});
  // Work ending may leave more (an open that ended late starts close()'s stages, whose
  // claim may answer late too): it is added before the work that left it settles.
  for (let i = 0; i < internals.lateWork.length; i++) await internals.lateWork[i];
}
