// Counts the side effects a test cares about ("one pull request"), as the user's fakes
// report them. An in-process crash cannot stop the dead engine's JavaScript, and what that
// code does after the crash is not something a killed process would have done: a record
// made by a step body of an engine that has crashed is not counted (the harness runs each
// body for its engine, runForEngine), and the harness pauses the counter between a crash
// and the recovery for records made outside any body.

import { AsyncLocalStorage } from "node:async_hooks";

/** Whether the engine whose step body is running has crashed. */
const bodyOwner = new AsyncLocalStorage<() => boolean>();

/** Runs a step or effect body on behalf of an engine; `crashed()` says whether that engine
 *  is dead by now: what the body records from then on is not counted. */
export function runForEngine<T>(crashed: () => boolean, fn: () => T): T {
  return bodyOwner.run(crashed, fn);
}

export interface SideEffectCounter {
  /** Notes one side effect named `name`. With a `key`, repeats of the same key count once,
   *  as a provider that honours idempotency keys would apply them once. */
  record(name: string, key?: string): void;
  /** How many times each named side effect happened (keyed ones: distinct keys). */
  counts(): Record<string, number>;
  /** Forgets everything recorded so far. */
  reset(): void;
  /** While paused, `record` notes nothing from outside a live engine's step bodies (a crash
   *  harness pauses it between a crash and the recovery). */
  paused: boolean;
}

export function createSideEffectCounter(): SideEffectCounter {
  const unkeyed = new Map<string, number>();
  const keyed = new Map<string, Set<string>>();
  return {
    paused: false,
    record(name: string, key?: string): void {
      const ownerCrashed = bodyOwner.getStore();
      // A live engine's body counts even while an earlier engine's crash paused the rest.
      if (ownerCrashed ? ownerCrashed() : this.paused) return;
      if (typeof name !== "string" || name === "") {
        throw new TypeError("sideEffects.record(name): name must be a non-empty string");
      }
      if (key === undefined) {
        unkeyed.set(name, (unkeyed.get(name) ?? 0) + 1);
        return;
      }
      const keys = keyed.get(name) ?? new Set<string>();
      keys.add(key);
      keyed.set(name, keys);
    },
    counts(): Record<string, number> {
      const out: Record<string, number> = {};
      for (const [name, n] of unkeyed) out[name] = n;
      for (const [name, keys] of keyed) out[name] = (out[name] ?? 0) + keys.size;
      return Object.fromEntries(Object.entries(out).sort(([a], [b]) => (a < b ? -1 : 1)));
    },
    reset(): void {
      unkeyed.clear();
      keyed.clear();
    },
  };
}
