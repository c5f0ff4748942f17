// Fault scripts: "call 7 throws a rate limit once", "when call 3 starts, send the event
// 'approve'". A call is chosen by its 1-based position among a run's step and effect calls
// (replays included, so the position is the same on every execution), or by its key.

import type { CallInfo } from "./instrument.js";

export interface CallFault {
  /** The call: its 1-based position among the run's step and effect calls, or its key
   *  ("fetch", "fetch#2"). */
  call: number | string;
  /** Only in this run (default: every run, children included). */
  runId?: string;
  /** Makes the call's function throw this error instead of running. */
  throws?: Error | (() => Error);
  /** How many attempts throw (default 1); later attempts run the real function. */
  times?: number;
  /** Runs right before the call's function, and before the throw decision: send an event,
   *  deploy a new version, crash the engine. Awaited before the function runs. */
  run?: (call: CallInfo) => void | Promise<void>;
}

/** The hook applying `faults` (a fault's counts are shared by every engine it is used by,
 *  so "throw twice" means twice in total, across crashes and restarts), and `unfired()`:
 *  what to say of the entries no call matched (a typo'd key, a call number no run
 *  reaches), which tested nothing. */
export function faultHook(faults: CallFault[]): ((call: CallInfo) => Promise<void>) & {
  unfired(): string | undefined;
} {
  for (const f of faults) {
    const ok =
      (typeof f.call === "number" && Number.isInteger(f.call) && f.call >= 1) ||
      (typeof f.call === "string" && f.call !== "");
    if (!ok) {
      throw new TypeError(
        `fault script: call must be a 1-based call number or a step key (got ${JSON.stringify(f.call)})`,
      );
    }
    if (f.times !== undefined && !(Number.isInteger(f.times) && f.times >= 0)) {
      throw new TypeError(
        `fault script for call ${JSON.stringify(f.call)}: times must be a whole number >= 0`,
      );
    }
  }
  const thrown = new Map<CallFault, number>();
  const ran = new Set<string>();
  const matched = new Set<CallFault>();
  // For the message about an entry that never matched: some keys the runs did call, and
  // the most calls one run made.
  const keys = new Set<string>();
  let most = 0;
  const hook = async (call: CallInfo) => {
    if (keys.size < 20) keys.add(call.key);
    most = Math.max(most, call.index);
    for (const f of faults) {
      if (f.runId !== undefined && f.runId !== call.runId) continue;
      if (typeof f.call === "number" ? f.call !== call.index : f.call !== call.key) continue;
      matched.add(f);
      const once = `${faults.indexOf(f)} ${call.runId} ${call.key}`;
      if (f.run && !ran.has(once)) {
        ran.add(once);
        await f.run(call);
      }
      if (f.throws) {
        const n = thrown.get(f) ?? 0;
        if (n < (f.times ?? 1)) {
          thrown.set(f, n + 1);
          throw typeof f.throws === "function" ? f.throws() : f.throws;
        }
      }
    }
  };
  const unfired = () => {
    const missed = faults
      .map((f, i) => ({ f, i }))
      .filter(({ f }) => !matched.has(f))
      .map(({ f, i }) => {
        const which = `fault script entry ${i + 1} (call ${JSON.stringify(f.call)}${f.runId === undefined ? "" : `, run ${JSON.stringify(f.runId)}`})`;
        const seen =
          typeof f.call === "number"
            ? `no run${f.runId === undefined ? "" : " of that id"} made ${f.call} step or effect calls (the most any run made: ${most})`
            : `no run${f.runId === undefined ? "" : " of that id"} called a step or effect by that key (keys called: ${[...keys].map((k) => JSON.stringify(k)).join(", ") || "none"}${keys.size >= 20 ? ", ..." : ""})`;
        return `${which} never matched a call: ${seen}`;
      });
    if (missed.length === 0) return undefined;
    return `cairn/testing: ${missed.join("; ")}. A fault that never fires tests nothing: fix its call (a 1-based position among the run's step and effect calls, or a key: the name, name#2 for its second use), or remove it.`;
  };
  return Object.assign(hook, { unfired });
}
