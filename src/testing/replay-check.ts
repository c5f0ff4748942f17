// The replay check: runs recorded journals against workflow code — typically the code
// about to be deployed under the same version — without executing a single step body or
// writing anything, and reports which runs would hit non-determinism. Run it in CI or
// before a deploy (`cairn check-replay <module>`), the way Temporal's Replayer is used.

import { decode, encode, UndecodableError } from "../codec/codec.js";
import { sameStoredValue } from "../codec/same-stored-value.js";
import { realClock } from "../lib/clock.js";
import { setLongTimeout } from "../lib/timers.js";
import type { RunRecord, RunStatus, Store } from "../store/store.js";
import { Context, type ContextHost, type Outcome } from "../workflow/context.js";
import type { AnyWorkflow } from "../workflow/define.js";

export interface ReplayCheckResult {
  runId: string;
  /** "name@version" the run is pinned to. */
  workflow: string;
  status: RunStatus;
  /** ok: every recorded call matched; diverged: non-determinism (or a different output);
   *  error: the code threw something else, or the replay did not finish. */
  verdict: "ok" | "diverged" | "error";
  /** Recorded calls the code replayed before it stopped. */
  replayed: number;
  detail: string;
}

export interface ReplayCheckOptions {
  store: Store;
  /** The code to check. Runs of other name@version pairs are not checked. */
  workflows: AnyWorkflow[];
  /** Check only these runs (default: every run of the given workflows). */
  runIds?: string[];
  /** At most this many runs per workflow name (newest first). Default 1,000. */
  limit?: number;
  /** A replay that has not finished after this long is reported as an error. Default 10 s. */
  timeoutMs?: number;
}

export async function checkReplay(opts: ReplayCheckOptions): Promise<ReplayCheckResult[]> {
  checkOptions(opts);
  const { store } = opts;
  const timeoutMs = opts.timeoutMs ?? 10_000;
  // NaN, 0 or a negative timeout fired at once: every run reported as not finished.
  if (typeof timeoutMs !== "number" || !(timeoutMs > 0)) {
    throw new TypeError(
      `checkReplay: timeoutMs must be a positive number of milliseconds, got ${typeof timeoutMs === "number" ? timeoutMs : JSON.stringify(timeoutMs)}`,
    );
  }
  const byId = new Map(opts.workflows.map((w) => [w.id, w]));
  await store.open({ clock: realClock });
  try {
    let runs: RunRecord[];
    if (opts.runIds) {
      runs = [];
      for (const id of opts.runIds) {
        const r = await store.getRun(id);
        if (r) runs.push(r);
      }
    } else {
      runs = [];
      for (const name of new Set(opts.workflows.map((w) => w.name))) {
        const found = await store.listRuns({ workflow: name, limit: opts.limit ?? 1_000 });
        runs.push(...found);
      }
    }
    const results: ReplayCheckResult[] = [];
    for (const run of runs) {
      const wf = byId.get(`${run.workflow}@${run.version}`);
      if (!wf) continue;
      results.push(await checkOne(store, run, wf, timeoutMs));
    }
    return results;
  } finally {
    await store.close();
  }
}

/** What the check is handed, before it opens anything: a store it can open, workflows
 *  (a missing store failed as "Cannot read properties of undefined (reading 'open')"). */
function checkOptions(opts: ReplayCheckOptions): void {
  const given = (v: unknown) =>
    v === null
      ? "null"
      : Array.isArray(v)
        ? "an array"
        : typeof v === "object"
          ? "an object"
          : typeof v;
  if (typeof opts !== "object" || opts === null) {
    throw new TypeError(
      `checkReplay({ store, workflows }): options must be an object, got ${given(opts)}`,
    );
  }
  const store = opts.store as unknown;
  if (typeof (store as Partial<Store> | null | undefined)?.open !== "function") {
    const got =
      typeof store === "function"
        ? "a function (call it: a Store is what it returns)"
        : typeof store === "object" && store !== null && !Array.isArray(store)
          ? "an object without open()"
          : given(store);
    throw new TypeError(
      `checkReplay: store must be a Store (sqliteStore(path), postgresStore(url), or a test engine's t.store()), got ${got}`,
    );
  }
  if (!Array.isArray(opts.workflows)) {
    throw new TypeError(
      `checkReplay: workflows must be an array of workflow()s (the code to check), got ${given(opts.workflows)}`,
    );
  }
  if (
    opts.runIds !== undefined &&
    !(Array.isArray(opts.runIds) && opts.runIds.every((id) => typeof id === "string"))
  ) {
    throw new TypeError(
      `checkReplay: runIds must be an array of run ids (strings), got ${given(opts.runIds)}`,
    );
  }
}

async function checkOne(
  store: Store,
  run: RunRecord,
  wf: AnyWorkflow,
  timeoutMs: number,
): Promise<ReplayCheckResult> {
  const base = { runId: run.id, workflow: `${run.workflow}@${run.version}`, status: run.status };
  let input: unknown;
  try {
    input = decode(run.input);
  } catch (err) {
    // One run this code cannot read says nothing of the others: report it, check on.
    if (!(err instanceof UndecodableError)) throw err;
    return { ...base, verdict: "error", replayed: 0, detail: `its input ${err.message}` };
  }
  const journal = await store.loadJournal(run.id);
  const ctx = new Context(replayOnlyHost(run, wf, timeoutMs), journal);
  const { outcome, replayed } = await replayWithin(ctx, wf, input, timeoutMs);
  const { verdict, detail } = judgeReplay(run, outcome, timeoutMs);
  return { ...base, verdict, replayed, detail };
}

/** A host that lets the context replay and nothing more: every write or start refuses. */
function replayOnlyHost(run: RunRecord, wf: AnyWorkflow, timeoutMs: number): ContextHost {
  return {
    runId: run.id,
    workflow: run.workflow,
    version: run.version,
    generation: run.generation,
    recovered: false,
    replayOnly: true,
    budgetLimit: run.budgetLimit,
    budgetSpent: run.budgetSpent,
    failedCalls: run.failedCalls,
    clock: realClock,
    maxPayloadBytes: Number.POSITIVE_INFINITY,
    inProcessRetryMs: 0,
    abortGraceMs: 0,
    replayStallMs: timeoutMs,
    retry: wf.options.retry,
    commit: () => Promise.reject(new Error("replay check: nothing is written")),
    startChild: () => Promise.reject(new Error("replay check: no child is started")),
    childOutcome: async () => undefined,
    deletedChild: async () => undefined,
    loadEvents: async () => [],
    log: () => {},
  };
}

/** Replays the run's journal; a replay not finished within `timeoutMs` is canceled. */
async function replayWithin(
  ctx: Context,
  wf: AnyWorkflow,
  input: unknown,
  timeoutMs: number,
): Promise<{ outcome: Outcome | "timeout"; replayed: number }> {
  // setLongTimeout: one setTimeout past 2^31-1 ms (about 24.8 days) fired after 1 ms.
  let cancel: (() => void) | undefined;
  const timeout = new Promise<"timeout">((r) => {
    cancel = setLongTimeout(() => r("timeout"), timeoutMs);
  });
  const outcome = await Promise.race([ctx.start(wf.fn, input), timeout]);
  cancel?.();
  const replayed = ctx.replayed;
  if (outcome === "timeout") ctx.cancel("replay check timed out");
  return { outcome, replayed };
}

/** What a replay's end says about the code: it matches the run's journal (and its recorded
 *  end), it diverges, or the replay could not tell. */
function judgeReplay(
  run: RunRecord,
  outcome: Outcome | "timeout",
  timeoutMs: number,
): Pick<ReplayCheckResult, "verdict" | "detail"> {
  if (outcome === "timeout") {
    return {
      verdict: "error",
      detail: `the replay did not finish within ${timeoutMs} ms: the code awaits something that is not a recorded call`,
    };
  }
  switch (outcome.kind) {
    case "completed":
      if (run.status === "completed" && run.output !== null && !sameOutput(outcome.output, run)) {
        return {
          verdict: "diverged",
          detail: "the code returns a different output from the same journal",
        };
      }
      return { verdict: "ok", detail: "replayed to completion" };
    case "failed": {
      const e = outcome.error;
      if (e.name === "NonDeterminismError") return { verdict: "diverged", detail: e.message };
      if (run.status === "failed" && run.error?.message === e.message) {
        return { verdict: "ok", detail: `fails as recorded: ${e.name}` };
      }
      return { verdict: "error", detail: `${e.name}: ${e.message}` };
    }
    case "frontier":
      if (run.status === "failed") {
        // Every recorded call matched: a resume of the run continues here, as the code of a
        // fix is meant to; nothing in it would fail with NonDeterminismError.
        return {
          verdict: "ok",
          detail: `matches its journal; the run failed, and a resume would execute "${outcome.key}" next`,
        };
      }
      if (run.status === "completed") {
        return {
          verdict: "diverged",
          detail: `the run is ${run.status}, but this code calls "${outcome.key}" after everything it recorded`,
        };
      }
      return {
        verdict: "ok",
        detail: `matches its journal; next it would execute "${outcome.key}"`,
      };
    case "suspended":
    case "paused":
      return { verdict: "ok", detail: "matches its journal; it is waiting" };
    case "interrupted":
      // A recorded value it could not read (undecodable, or a key it was not given): the
      // replay stopped there, so it cannot tell whether the code matches.
      return { verdict: "error", detail: `${outcome.error.name}: ${outcome.error.message}` };
    default:
      return { verdict: "ok", detail: outcome.kind };
  }
}

/** Whether the replay's output is the run's recorded one (an unstorable output is not), as
 *  stored (same-stored-value.ts): an Error the code made counts without its stack, which
 *  names who called the code (this check, not a worker); a typed array showing part of its
 *  buffer by the bytes it shows (a run recorded when the codec stored the whole buffer). */
function sameOutput(output: unknown, run: RunRecord): boolean {
  try {
    return (
      run.output !== null && sameStoredValue(encode(output, Number.POSITIVE_INFINITY), run.output)
    );
  } catch {
    return false;
  }
}
