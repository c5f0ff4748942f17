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

/** The outcome of an execution whose run could not be driven to an end, keeping the error
 *  that stopped it as thrown (`driveError`): a store error there tested nothing. */
export function settleFailed(err: unknown): Omit<SweepOutcome, "sideEffects"> {
  const message = err instanceof Error ? err.message : String(err);
  const name = err instanceof Error ? err.name : "Error";
  const code = (err as { code?: unknown } | null)?.code;
  return {
    status: "running",
    error: { name: "CrashSweepError", message },
    driveError: { name, message, ...(typeof code === "string" && { code }) },
  };
}

/** Whether the error that stopped an execution came from the store (StoreError, code
 *  STORE; SQLite's own, which its store passes on as thrown): then the storage failed, not
 *  the workflow, and that execution tested nothing. */
export function storeFailed(outcome: SweepOutcome): boolean {
  const e = outcome.driveError;
  if (e === undefined) return false;
  return (
    e.code === "STORE" ||
    e.name === "StoreError" ||
    e.name === "SqliteError" ||
    e.code?.startsWith("SQLITE_") === true
  );
}

/** What to tell of an execution a store error stopped: which run, where it crashed (none:
 *  the undisturbed run), the error, and what to do. */
export function storeFailure(
  runId: string,
  where: string | undefined,
  outcome: SweepOutcome,
): string {
  const e = outcome.driveError as { name: string; message: string };
  const what =
    where === undefined ? `the undisturbed run "${runId}"` : `crash ${where} (run "${runId}")`;
  return `${what}: a store error stopped the execution, so nothing was compared there: ${e.name}: ${e.message}. The storage failed, not the workflow: check it (the \`storage\` or \`postgres\` given, the disk, the database's connections) and sweep again${where === undefined ? "" : " (`filter` can sweep this boundary alone)"}`;
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
