// Crash points of the generative replay test, shared by the test process (in-process
// crashes) and worker processes (SIGKILL): a kill spec drawn by the generator becomes a
// trigger scaled to the reference run's profile, and store-call triggers become the
// predicates of a crashable store.

import type { NewRun, RunWrite } from "../../src/store/store.js";
import type { StoreCall } from "../../src/testing/crashable-store.js";
import type { KillSpec } from "./gen-grammar.js";

/** Store verbs that mark a step of an execution (crash points are counted over these). */
const MEANINGFUL = new Set(["appendRecords", "releaseRun", "createRun", "loadJournal"]);

/** What the reference run took: kill points are drawn as fractions of it. */
export interface Profile {
  ledgerWrites: number;
  storeCalls: number;
  durationMs: number;
}

export type Trigger =
  | { kind: "ledger"; n: number }
  | { kind: "store-before"; n: number }
  | { kind: "store-after"; n: number }
  | { kind: "time"; ms: number }
  /** After the non-deterministic call's record; `begun`: as soon as it has begun durably
   *  (its intent, or its child's create), if it has a beginning. */
  | { kind: "nondet"; begun?: boolean };

export function triggerFor(spec: KillSpec | undefined, profile: Profile): Trigger | undefined {
  if (!spec) return undefined;
  const pick = (total: number) => Math.max(1, Math.round(spec.frac * Math.max(1, total)));
  switch (spec.at) {
    case "ledger":
      return { kind: "ledger", n: pick(profile.ledgerWrites) };
    case "store-before":
      return { kind: "store-before", n: pick(profile.storeCalls) };
    case "store-after":
      return { kind: "store-after", n: pick(profile.storeCalls) };
    case "time":
      return { kind: "time", ms: Math.round(spec.frac * Math.max(5, profile.durationMs)) };
  }
}

/** True if the batch writes the non-deterministic call's record (or, `begun`, its intent). */
export function writesNondet(writes: RunWrite[], begun = false): boolean {
  return writes.some(
    (w) =>
      (w.steps ?? []).some((s) => s.name.startsWith("nd-")) ||
      (begun && (w.intents ?? []).some((i) => i.name.startsWith("nd-"))),
  );
}

/** True if the call creates the child of a non-deterministic ctx.child call. */
function createsNondetChild(call: StoreCall): boolean {
  return call.verb === "createRun" && (call.args[0] as NewRun).id.includes("/nd-");
}

/** The store-call predicates of a trigger: crash points count over MEANINGFUL verbs. */
export function storePredicates(trigger: Trigger | undefined, onKill: () => void) {
  let meaningful = 0;
  const index = new WeakMap<StoreCall, number>();
  return {
    crashBefore: (call: StoreCall) => {
      if (!MEANINGFUL.has(call.verb)) return false;
      index.set(call, ++meaningful);
      if (trigger?.kind === "store-before" && meaningful === trigger.n) {
        onKill();
        return true;
      }
      return false;
    },
    crashAfter: (call: StoreCall) => {
      const crash =
        (trigger?.kind === "store-after" && index.get(call) === trigger.n) ||
        (trigger?.kind === "nondet" &&
          ((call.verb === "appendRecords" &&
            writesNondet(call.args[0] as RunWrite[], trigger.begun)) ||
            (trigger.begun === true && createsNondetChild(call))));
      if (crash) onKill();
      return crash;
    },
    count: () => meaningful,
  };
}
