// A run's outcome for `cairn result` and `cairn start --wait`: the run as it is, or as it
// ended once waited for (engine.handle(id).result() does the waiting, across processes),
// printed as a script reads it: the output as JSON on stdout (exit 0), a failed or
// canceled run's error on stderr (exit 1), a run not finished yet said so (exit 3).

import { runNotFound } from "../errors.js";
import { EncryptedValue, type Engine, type RunView, UndecodableValue } from "../index.js";
import { setLongTimeout } from "../lib/timers.js";
import { TERMINAL_STATUSES } from "../store/store.js";
import { type CliContext, UsageError } from "./command.js";
import {
  explainNeedsWorkers,
  explainRun,
  sleepingThrottle,
  unservedWarning,
} from "./explain-run.js";
import { parseDuration } from "./flag-values.js";
import { formatDuration, formatError, quoted, shellArg, toJson } from "./format.js";
import { listenForStopSignal } from "./stop-signal.js";

/** The exit code of a wait stopped by SIGINT or SIGTERM (128 + SIGINT's 2, as a shell's). */
export const STOPPED_EXIT = 130;

/** The exit code of a run not finished (yet): neither an error (1) nor a usage error (2). */
export const NOT_FINISHED_EXIT = 3;

export const RESULT_EXIT_CODES = `Exit codes: 0 completed (the output on stdout), 1 failed or canceled (the error on
stderr; also an output this process cannot read, such as one encrypted with a key not in
$CAIRN_ENCRYPTION_KEYS, and any other error), 2 usage error, ${NOT_FINISHED_EXIT} not finished (yet:
pending, running, waiting or paused; with --wait, not within --timeout), ${STOPPED_EXIT} the wait stopped
(Ctrl+C; the run goes on).`;

export interface RunOutcome {
  run: RunView;
  /** Why an unfinished run is where it is (explainRun); "" for a finished one. */
  why: string;
  /** The wait given up after this many ms (--timeout); undefined when not waited for. */
  waitedMs?: number;
  /** The wait stopped by this signal (Ctrl+C): the run goes on, its outcome unknown here. */
  stopped?: NodeJS.Signals;
}

/** Run `id` as it is now, or, with `wait`, once it has finished (at most `timeoutMs`, or
 *  until a stop signal). With `warnUnserved`, `ctx` hears before the wait a warning when no
 *  live worker serves the run (the wait would go on for ever, silently); with `sayWaiting`,
 *  that it waits (said once a stop signal is listened for). */
export async function runOutcome(
  engine: Engine,
  id: string,
  wait: { timeoutMs?: number | undefined } | undefined,
  ctx: CliContext,
  options: { warnUnserved: boolean; sayWaiting?: boolean },
): Promise<RunOutcome> {
  let run = await engine.getRun(id);
  if (!run) throw runNotFound(id);
  let waitedMs: number | undefined;
  if (wait && !TERMINAL_STATUSES.has(run.status)) {
    // Listened for before anything is said: Ctrl+C killed the process with nothing printed.
    const stop = listenForStopSignal(ctx);
    if (options.warnUnserved) {
      const unserved = unservedWarning(run, await engine.listWorkers().catch(stopFirst(stop)));
      if (unserved) ctx.err(`${unserved}; waiting all the same (Ctrl+C stops waiting)`);
    }
    if (options.sayWaiting) {
      ctx.err("Waiting for it to finish (Ctrl+C stops waiting; the run goes on).");
    }
    // result() settles once the run ends (either way: its outcome is read again below, as a
    // view), or rejects when the engine closes under it after a timeout: nothing to hear.
    const ended = engine
      .handle(id)
      .result()
      .then(
        () => true,
        () => true,
      );
    // setLongTimeout: --timeout 30d in one setTimeout (past 2^31-1 ms, about 24.8 days)
    // gave up after 1 ms, with a TimeoutOverflowWarning, and exit 3.
    let cancel: (() => void) | undefined;
    const timedOut =
      wait.timeoutMs === undefined
        ? new Promise<boolean>(() => {})
        : new Promise<boolean>((resolve) => {
            cancel = setLongTimeout(() => resolve(false), wait.timeoutMs ?? 0);
          });
    const stopped = stop.stopped.then((signal) => ({ signal }));
    const done = await Promise.race([ended, timedOut, stopped]);
    cancel?.();
    // A second signal while the engine closes still exits at once.
    if (typeof done === "object") return { run, why: "", stopped: done.signal };
    stop.dispose();
    if (!done) waitedMs = wait.timeoutMs;
    run = await engine.getRun(id);
    if (!run)
      throw runNotFound(
        id,
        "it was deleted (retention, cairn gc) while this command waited for it",
      );
  }
  const why = TERMINAL_STATUSES.has(run.status)
    ? ""
    : explainRun(
        run,
        explainNeedsWorkers(run, new Date()) ? await engine.listWorkers() : [],
        new Date(),
        { throttled: await sleepingThrottle(engine, run) },
      );
  return { run, why, ...(waitedMs !== undefined ? { waitedMs } : {}) };
}

/** Removes the stop listener, then rethrows: the wait is not reached. */
function stopFirst(stop: { dispose(): void }): (err: unknown) => never {
  return (err) => {
    stop.dispose();
    throw err;
  };
}

/** Prints `outcome` and returns the exit code. `extra`: fields added to the JSON. */
export function printOutcome(
  outcome: RunOutcome,
  ctx: CliContext,
  options: { json: boolean; extra?: Record<string, unknown> },
): number {
  const { run, why } = outcome;
  if (outcome.stopped) {
    const arg = shellArg(run.id);
    ctx.err(
      `cairn: ${outcome.stopped}: stopped waiting; run ${quoted(run.id)} goes on (look again: cairn result ${arg} --wait)`,
    );
    return STOPPED_EXIT;
  }
  const unreadable = run.status === "completed" ? unreadableOutput(run) : undefined;
  const code =
    run.status === "completed"
      ? unreadable === undefined
        ? 0
        : 1
      : TERMINAL_STATUSES.has(run.status)
        ? 1
        : NOT_FINISHED_EXIT;
  if (options.json) {
    // The placeholder stays marked in "withheld" (as cairn show --json marks it), and the
    // exit code is 1, as without --json: exit 0 said that "output" was what the run returned.
    ctx.out(toJson({ ...options.extra, ...outcomeJson(outcome) }, 2));
    if (unreadable !== undefined) ctx.err(unreadable);
    return code;
  }
  const id = quoted(run.id);
  const arg = shellArg(run.id);
  switch (run.status) {
    case "completed": {
      const output = run.output;
      // A placeholder printed as the output would read as a string the run returned.
      if (unreadable !== undefined) {
        ctx.err(unreadable);
        return 1;
      }
      // A run that returned nothing (undefined) prints null: stdout is always JSON.
      ctx.out(output === undefined ? "null" : toJson(output, 2));
      return 0;
    }
    case "failed": {
      const error = run.error ? formatError(run.error) : (run.reason ?? "no error recorded");
      ctx.err(
        `cairn: run ${id} failed: ${error}\nIts steps and attempts: cairn show ${arg}; to run it again from its journal: cairn resume ${arg}`,
      );
      return 1;
    }
    case "canceled":
      ctx.err(`cairn: run ${id} was canceled: ${run.reason ?? "no reason given"}`);
      return 1;
    default: {
      const after =
        outcome.waitedMs === undefined ? "" : ` after waiting ${formatDuration(outcome.waitedMs)}`;
      const next =
        outcome.waitedMs === undefined
          ? `wait for it: cairn result ${arg} --wait`
          : `wait longer (--timeout), or follow it: cairn show ${arg}`;
      ctx.err(
        `cairn: run ${id} has not finished${after}: it is ${run.status}${why && why !== run.status ? ` (${why})` : ""}; ${next}`,
      );
      return NOT_FINISHED_EXIT;
    }
  }
}

/** Why a completed run's output cannot be printed (a placeholder: encrypted with a key not
 *  given, or undecodable), or undefined when it can. */
function unreadableOutput(run: RunView): string | undefined {
  const output = run.output;
  const id = quoted(run.id);
  if (output instanceof EncryptedValue) {
    return `cairn: the output of run ${id} is encrypted (key "${output.keyId}") and $CAIRN_ENCRYPTION_KEYS does not hold that key; set it as the workers have it`;
  }
  if (output instanceof UndecodableValue) {
    return `cairn: the output of run ${id} cannot be decoded: ${String(output)}`;
  }
  return undefined;
}

/** {"id", "status", then "output" (completed), "error" and "reason" (failed), "reason"
 *  (canceled) or "why" (not finished)}. */
function outcomeJson({ run, why }: RunOutcome): Record<string, unknown> {
  const json: Record<string, unknown> = { id: run.id, status: run.status };
  if (run.status === "completed") json.output = run.output ?? null;
  if (run.error) json.error = run.error;
  if ((run.status === "failed" || run.status === "canceled") && run.reason !== undefined) {
    json.reason = run.reason;
  }
  if (run.withheld && json.reason !== undefined) json.withheld = run.withheld;
  if (!TERMINAL_STATUSES.has(run.status)) json.why = why;
  return json;
}

/** --wait and --timeout as runOutcome takes them; --timeout alone is a usage error. */
export function waitOption(values: {
  wait?: boolean | undefined;
  timeout?: string | undefined;
}): { timeoutMs?: number } | undefined {
  if (values.timeout !== undefined && values.wait !== true) {
    throw new UsageError("--timeout bounds --wait; give --wait too (e.g. --wait --timeout 30s)");
  }
  if (values.wait !== true) return undefined;
  return values.timeout === undefined
    ? {}
    : { timeoutMs: parseDuration(values.timeout, "timeout", 1) };
}
