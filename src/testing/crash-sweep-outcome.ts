// What a crash sweep compares: how an execution's run ended (status, output, error) and
// the side effects counted, and the sentences that say how a crashed execution's outcome
// differs from the undisturbed one's.

import { isDeepStrictEqual } from "node:util";
import type { SweepOutcome } from "./crash-sweep.js";
import { firstDifference, show } from "./crash-sweep-difference.js";

/** A finished run's outcome, side effects aside. */
export function outcomeOf(view: {
  status: SweepOutcome["status"];
  output?: unknown;
  error?: { name: string; message: string } | undefined;
}): Omit<SweepOutcome, "sideEffects"> {
  return {
    status: view.status,
    ...(view.output !== undefined ? { output: view.output } : {}),
    ...(view.error ? { error: { name: view.error.name, message: view.error.message } } : {}),
  };
}

/** The outcome of an execution whose run could not be driven to an end. */
export function settleFailed(err: unknown): Omit<SweepOutcome, "sideEffects"> {
  return {
    status: "running",
    error: { name: "CrashSweepError", message: err instanceof Error ? err.message : String(err) },
  };
}

/** `outcome` with its output mapped by the user's `normalize`. */
export function normalized(
  outcome: SweepOutcome,
  normalize: ((output: unknown) => unknown) | undefined,
): SweepOutcome {
  if (!normalize || outcome.output === undefined) return outcome;
  return { ...outcome, output: normalize(outcome.output) };
}

/** What differs between the undisturbed outcome and a crashed execution's; empty when
 *  nothing does. */
export function compareOutcomes(base: SweepOutcome, got: SweepOutcome): string[] {
  const out: string[] = [];
  if (got.status !== base.status) {
    const why = got.error ? ` (${got.error.name}: ${got.error.message})` : "";
    out.push(`the run ended ${got.status}${why} instead of ${base.status}`);
  } else if (!isDeepStrictEqual(got.error, base.error)) {
    out.push(`its error is ${show(got.error)} instead of ${show(base.error)}`);
  }
  const d = firstDifference(got.output, base.output);
  if (d) {
    const what = d.path === "" ? "its output is" : `its output differs at ${d.path}:`;
    out.push(`${what} ${show(d.got)} instead of ${show(d.base)}`);
  }
  const names = new Set([...Object.keys(base.sideEffects), ...Object.keys(got.sideEffects)]);
  for (const name of [...names].sort()) {
    const b = base.sideEffects[name] ?? 0;
    const g = got.sideEffects[name] ?? 0;
    if (b !== g) {
      out.push(`side effect "${name}" happened ${g} time${g === 1 ? "" : "s"} (undisturbed: ${b})`);
    }
  }
  return out;
}
