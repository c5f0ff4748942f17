// Fault injection as a Store decorator (never debug hooks in production code): wraps any
// Store and lets a test stall or fail chosen verbs, or run a callback (e.g. SIGKILL this
// process) right before or after a journal write that contains a given step key.

import type { RunWrite, Store, WriteOutcome } from "../store/store.js";

export interface FaultPlan {
  /** Called before appendRecords with the batch; may throw, never return, or kill. */
  beforeAppend?: (writes: RunWrite[]) => void | Promise<void>;
  /** Called after appendRecords committed the batch, with each write's outcome. */
  afterAppend?: (writes: RunWrite[], outcomes: WriteOutcome[]) => void | Promise<void>;
  /** Verbs (by name) that hang forever while `stalled` contains them. */
  stalled?: Set<keyof Store>;
  /** Verbs (by name) that reject with this error while `failing` contains them. */
  failing?: Set<keyof Store>;
}

export interface FaultyStore extends Store {
  readonly plan: FaultPlan;
}

/** True if the batch writes a completed record (step row) under `key`. */
export function writesStep(writes: RunWrite[], key: string, runId?: string): boolean {
  return writes.some(
    (w) => (runId === undefined || w.runId === runId) && (w.steps ?? []).some((s) => s.key === key),
  );
}

export function faultyStore(inner: Store, plan: FaultPlan = {}): FaultyStore {
  const handler: ProxyHandler<Store> = {
    get(target, prop, receiver) {
      if (prop === "plan") return plan;
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      const name = prop as keyof Store;
      return (...args: unknown[]) => {
        if (plan.stalled?.has(name)) return new Promise(() => {});
        if (plan.failing?.has(name)) {
          return Promise.reject(new Error(`faultyStore: ${String(name)} fails (injected)`));
        }
        if (name === "appendRecords") {
          const writes = args[0] as RunWrite[];
          return (async () => {
            await plan.beforeAppend?.(writes);
            const out = await target.appendRecords(writes);
            await plan.afterAppend?.(writes, out);
            return out;
          })();
        }
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  };
  return new Proxy(inner, handler) as FaultyStore;
}
