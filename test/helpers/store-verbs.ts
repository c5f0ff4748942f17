// Store wrappers and probes for the lifecycle findings tests (close(), hand-backs, crash
// charges): a store with some verbs replaced, a promise settled from outside, and the lost
// attempts a run's journal holds.

import type { Store } from "../../src/index.js";
import { sqliteStore } from "../../src/index.js";
import { realClock } from "../../src/lib/clock.js";

type Verb = (
  call: (...args: unknown[]) => Promise<unknown>,
  ...args: unknown[]
) => Promise<unknown>;

/** `inner`, with some verbs replaced: each replacement gets the inner verb to call. */
export function around(inner: Store, verbs: Partial<Record<keyof Store, Verb>>): Store {
  return new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      const replaced = verbs[prop as keyof Store];
      if (!replaced) return value.bind(target);
      return (...args: unknown[]) =>
        replaced((...a: unknown[]) => value.apply(target, a) as Promise<unknown>, ...args);
    },
  }) as Store;
}

/** A promise and the function that settles it. */
export function gate(): { opened: Promise<void>; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((r) => {
    open = r;
  });
  return { opened, open };
}

/** Every attempt of run `runId` charged as lost with a worker, by step key. `path`: a
 *  SQLite file, or a store to open. */
export async function lostAttempts(path: string | (() => Store), runId: string): Promise<string[]> {
  const look = typeof path === "string" ? sqliteStore(path) : path();
  await look.open({ clock: realClock });
  try {
    const journal = await look.loadJournal(runId);
    return journal.attempts.filter((a) => a.error?.code === "WORKER_LOST").map((a) => a.key);
  } finally {
    await look.close();
  }
}
