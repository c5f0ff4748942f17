// Where a crash sweep crashes, shared by both of its modes so they agree on the boundaries:
// the hooks that note every durable boundary an undisturbed execution crosses, and the hooks
// that find one of them again in a later execution and crash there. What "crash" means is
// the caller's: in process, the store goes dead (or the engine does, before a step's
// function); with real processes, the child SIGKILLs itself.

import { type Boundary, boundariesOf, boundaryId, makeBoundary } from "./crash-boundaries.js";
import type { CallInfo } from "./instrument.js";
import type { TestEngineInternals } from "./test-engine.js";

/** The boundary crossed right before a step's function runs (none for an effect: its
 *  perform follows its intent, which is a boundary already). */
function beforeFunction(call: CallInfo): Boundary | undefined {
  if (call.kind !== "step") return undefined;
  return makeBoundary({
    point: "before-function",
    runId: call.runId,
    key: call.key,
    kind: "step",
    attempt: call.attempt,
  });
}

/** Hooks that note every boundary crossed, once each, in the order first crossed. */
export function noteBoundaries(seen: Map<string, Boundary>): TestEngineInternals {
  const note = (bs: Boundary[]) => {
    for (const b of bs) {
      const id = boundaryId(b);
      if (!seen.has(id)) seen.set(id, b);
    }
  };
  return {
    firstStore: {
      crashBefore: (call) => {
        note(boundariesOf(call, "before"));
        return false;
      },
      crashAfter: (call) => {
        note(boundariesOf(call, "after"));
        return false;
      },
    },
    beforeFunction: (call) => {
      const b = beforeFunction(call);
      if (b) note([b]);
    },
  };
}

/** Where a crash happens: in a store call (before it runs, or after it committed), or right
 *  before a step's function. */
export type CrashSite = "store" | "function";

export interface CrashPoint {
  /** Hooks for the first engine of an execution. */
  internals: TestEngineInternals;
  /** Whether the execution reached the boundary (and crashed there). */
  readonly fired: boolean;
  /** The boundary crashed at, as this execution named it (its key may differ). */
  readonly actual: Boundary;
}

/**
 * Hooks that crash at `target`, the `ordinal`-th boundary the undisturbed execution crossed.
 * A boundary is found again by its key, or by its place: the same ordinal among the
 * boundaries this execution crosses, of the same point and kind. Keys may differ between
 * executions (an AI SDK tool call's key holds the call id the model made up), while the
 * code, replayed on fresh storage, crosses its boundaries in the same order. Only a boundary
 * the undisturbed execution never crossed (one of `known`, the ids it crossed) stands in by
 * its place: parallel branches may finish in another order, and a branch's boundary found at
 * the target's place is that branch's, not the target's (which was then never crashed at).
 *
 * `crash(site)` is called once, when the boundary is reached. For a store call, returning
 * makes the crashable store crash; before a function, what it returns is awaited before
 * the function would run (never settling stops it).
 */
export function crashPoint(
  target: Boundary,
  ordinal: number,
  known: ReadonlySet<string>,
  crash: (site: CrashSite) => void | Promise<void>,
): CrashPoint {
  const targetId = boundaryId(target);
  const crossed = new Set<string>();
  let fired = false;
  let actual = target;
  const hit = (bs: Boundary[]) => {
    if (fired) return false;
    for (const b of bs) {
      const id = boundaryId(b);
      // Crossed again (a write tried again): it had its turn the first time.
      if (crossed.has(id)) continue;
      crossed.add(id);
      const place = crossed.size - 1;
      const same =
        id === targetId ||
        (place === ordinal && !known.has(id) && b.point === target.point && b.kind === target.kind);
      if (same) {
        fired = true;
        actual = b;
        return true;
      }
    }
    return false;
  };
  const inStore = (bs: Boundary[]) => {
    if (!hit(bs)) return false;
    void crash("store");
    return true;
  };
  return {
    internals: {
      firstStore: {
        crashBefore: (call) => inStore(boundariesOf(call, "before")),
        crashAfter: (call) => inStore(boundariesOf(call, "after")),
      },
      beforeFunction: async (call) => {
        const b = beforeFunction(call);
        if (b && hit([b])) await crash("function");
      },
    },
    get fired() {
      return fired;
    },
    get actual() {
      return actual;
    },
  };
}
