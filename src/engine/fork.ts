// engine.fork(): a new run that reuses a run's records up to a step and executes from
// there, on the same or another version. The source's journal is read, never changed
// (forks copy; they never rewrite).

import { RunConflictError, runNotFound } from "../errors.js";
import { newId } from "../lib/ids.js";
import { displayText, quoteGiven } from "../lib/text.js";
import type { StepRecord } from "../store/store.js";
import { isWorkflowName } from "../workflow/define.js";
import { JournalIndex } from "../workflow/journal-index.js";
import type { RunHandle } from "./engine.js";
import { type EngineInternals, ready } from "./engine-internals.js";
import { runHandle } from "./run-handle.js";
import { withStartSpan } from "./tracing.js";
import { checkRunId } from "./validate.js";

export interface ForkOptions {
  fromStep: string;
  version?: string;
  id?: string;
}

export async function forkRun(
  internals: EngineInternals,
  id: string,
  options: ForkOptions,
): Promise<RunHandle> {
  await ready(internals);
  const { store } = internals.config;
  if (typeof options?.fromStep !== "string") {
    throw new TypeError(
      `fork(): fromStep must be the key of a step of run ${JSON.stringify(String(id).slice(0, 300))} to fork from, e.g. fork(id, { fromStep: "plan" }) (got ${options === null || typeof options !== "object" ? String(options) : JSON.stringify(String(options.fromStep).slice(0, 100))})`,
    );
  }
  if (options.id !== undefined) checkRunId(options.id, "fork()");
  if (options.version !== undefined && !isWorkflowName(options.version)) {
    // A fork pinned to a version no workflow can have would never be executed.
    throw new TypeError(
      `fork(): version ${JSON.stringify(String(options.version).slice(0, 300))} of the fork of run "${id}" is invalid; versions are 1-128 letters, digits and . _ : / - (not starting with a symbol)`,
    );
  }
  const source = await store.getRun(id);
  if (!source) throw runNotFound(id, "nothing to fork");
  // A fork copies no event: none is read.
  const recorded = await store.loadJournal(id, { eventPayloads: false, pendingEvents: false });
  const journal = new JournalIndex(recorded, source.generation, source.failedCalls);
  const failedBy =
    source.status === "failed"
      ? source.failedCalls.filter((f) => f.generation === source.generation).map((f) => f.key)
      : [];
  // The source as a resume would read it: its failure replaced, and what followed that
  // failure handed over when called (a handler's calls), not required of the fork.
  const resumed =
    failedBy.length > 0
      ? new JournalIndex(recorded, source.generation + 1, source.failedCalls)
      : journal;
  const copy = forkCopy(journal, options.fromStep, failedBy, resumed);
  if (!copy) throw noSuchStep(id, options.fromStep, journal);
  const newRunId = options.id ?? newId("run");
  const version = options.version ?? source.version;
  const res = await withStartSpan(
    { workflow: source.workflow, version, runId: newRunId },
    (traceContext) =>
      store.forkRun({
        sourceId: id,
        copy,
        // The run read above: another under its id since (retention) is not copied from.
        sourceCreatedAt: source.createdAt,
        run: {
          id: newRunId,
          workflow: source.workflow,
          version,
          input: source.input,
          budgetLimit: source.budgetLimit,
          parentId: null,
          traceContext,
        },
      }),
  );
  if (!res.created) {
    throw new RunConflictError(
      `Run id "${newRunId}" already exists; choose another id for the fork`,
    );
  }
  internals.worker?.requestClaimRound();
  return runHandle(internals, newRunId);
}

/** The records a fork from `fromStep` reuses: every outcome handed over before that step's,
 *  and the values drawn (ctx.now/random/uuid) by then; undefined if the step has no record.
 *  `failedBy`: the keys of the calls whose failure failed the source (its current generation). */
function forkCopy(
  journal: JournalIndex,
  fromStep: string,
  failedBy: string[] = [],
  resumed: JournalIndex = journal,
): Array<{ key: string; generation: number; unordered?: boolean; since?: number }> | undefined {
  const from = journal.outcomes.get(fromStep);
  if (!from && journal.unfinished.includes(fromStep)) {
    // A call begun but never finished (cut off in flight, or waiting): the fork keeps every
    // outcome and executes that call afresh; but not the failure that failed the source (it
    // is no caught failure: the fork would only fail again), nor what followed it: as a fork
    // from the failing call does.
    const failing = firstHandedOver(journal, failedBy);
    if (failing) return forkCopy(journal, failing, failedBy, resumed);
    return [...journal.outcomes.values()]
      .filter((s) => !drawnInReplacedHistory(s, journal))
      .map((s) => recordRef(s, journal));
  }
  if (!from || from.key.startsWith("@")) return undefined;
  // A value drawn (no delivery) is before `fromStep` when it was drawn in a window (a count
  // of outcomes handed over) no later than the one `fromStep`'s outcome was handed over in.
  // Positions are not counts: a resume leaves a gap where the replaced failure was.
  const fromDelivery = from.delivery;
  const handedBeforeFrom =
    fromDelivery === null
      ? 0
      : [...journal.outcomes.values()].filter(
          (s) => s.delivery !== null && s.delivery < fromDelivery,
        ).length;
  const before = (s: StepRecord): boolean => {
    if (fromDelivery === null || s.issuedAfter === null) return s.seq < from.seq;
    if (s.delivery !== null) return s.delivery < fromDelivery;
    return s.issuedAfter <= handedBeforeFrom;
  };
  // The failure that failed the source is no caught failure: the fork executes that call
  // again (as a resume would), also when `fromStep` was recorded after it (in the grace);
  // what followed that failure is read as the resume reads it.
  const follows = followsFailure(journal, failedBy);
  const view = (s: StepRecord) => (follows(s) ? resumed : journal);
  const failed = new Set(failedBy);
  return [...journal.outcomes.values()]
    .filter(
      (s) =>
        s.key !== fromStep &&
        !failed.has(s.key) &&
        before(s) &&
        !drawnInReplacedHistory(s, view(s)),
    )
    .map((s) => recordRef(s, view(s)));
}

/** Whether a record came after the first of `failedBy`'s failures was handed over: handed
 *  over later, or drawn in a window after it. */
function followsFailure(journal: JournalIndex, failedBy: string[]): (s: StepRecord) => boolean {
  const failing = firstHandedOver(journal, failedBy);
  const at = failing === undefined ? null : (journal.outcomes.get(failing)?.delivery ?? null);
  if (at === null) return () => false;
  const handedThrough = [...journal.outcomes.values()].filter(
    (s) => s.delivery !== null && s.delivery <= at,
  ).length;
  return (s) =>
    s.delivery !== null
      ? s.delivery > at
      : s.issuedAfter !== null && s.issuedAfter >= handedThrough;
}

/** Of `keys`, the one whose outcome was handed over first, if any holds one. */
function firstHandedOver(journal: JournalIndex, keys: string[]): string | undefined {
  const held = keys
    .map((k) => journal.outcomes.get(k))
    .filter((s): s is StepRecord => s !== undefined && s.outcome === "error");
  held.sort((a, b) => (a.delivery ?? a.seq) - (b.delivery ?? b.seq));
  return held[0]?.key;
}

/** A value (ctx.now/random/uuid) drawn in a history a resume replaced: the source's replay
 *  neither orders nor requires it, and a fork has no such history. Copied with its window
 *  it would be a call the fork must make again, which the source's history never made. */
function drawnInReplacedHistory(s: StepRecord, journal: JournalIndex): boolean {
  return s.delivery === null && s.issuedAfter !== null && journal.isFree(s.key);
}

/** A copy; one the source hands over outside the order (its place is in a history a
 *  resume replaced) is handed over when called in the fork too, and before the outcomes
 *  of the generations after the one whose failure replaced it (`since`), as in the source. */
function recordRef(
  s: StepRecord,
  journal: JournalIndex,
): { key: string; generation: number; unordered?: boolean; since?: number } {
  const unordered = journal.isFree(s.key) && s.delivery !== null;
  if (!unordered) return { key: s.key, generation: s.generation };
  const since = journal.freeSince.get(s.key);
  return { key: s.key, generation: s.generation, unordered, ...(since !== undefined && { since }) };
}

/** The run has no step `fromStep` to fork from: the error lists the ones it has. */
function noSuchStep(id: string, fromStep: string, journal: JournalIndex): RunConflictError {
  const keys = [...journal.outcomes.values()]
    .filter((s) => !s.key.startsWith("@"))
    .sort((a, b) => (a.delivery ?? a.seq) - (b.delivery ?? b.seq))
    .map((s) => s.key);
  return new RunConflictError(
    `Run ${quoteGiven(id)} has no recorded step ${quoteGiven(fromStep)}; fork from one of: ${[...keys, ...journal.unfinished].map(displayText).join(", ") || "(none)"}`,
  );
}
