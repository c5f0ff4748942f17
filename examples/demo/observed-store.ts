// A store that tells the demo which calls THIS worker recorded: the journal is written
// only by the worker that executed a call, never by one that replays it, so "recorded
// here" is "executed here". Everything else passes through untouched.

import type { RunWrite, Store, WriteOutcome } from "../../src/store-api.js";

export function observedStore(
  store: Store,
  onRecorded: (key: string, kind: string, outcome: "ok" | "error") => void,
): Store {
  return new Proxy(store, {
    get(target, property) {
      const value = Reflect.get(target, property, target);
      if (property === "appendRecords") {
        return async (writes: RunWrite[]): Promise<WriteOutcome[]> => {
          const outcomes = await target.appendRecords(writes);
          writes.forEach((w, i) => {
            if (!outcomes[i]?.ok) return;
            for (const s of w.steps ?? []) onRecorded(s.key, s.kind, s.outcome);
          });
          return outcomes;
        };
      }
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}
