// A run's step history as getSteps returns it, built from its journal: one view per call
// key, in call order, with every attempt (its error and spend) and the spend in total.
// Completed calls come first in the order they were made; calls begun but not completed
// (failed attempts, intents) follow in the order they are met.

import { addAmounts } from "../lib/amounts.js";
import type { AttemptRecord, IntentRecord, Journal, StepRecord } from "../store/store.js";
import { type AttemptView, decodeForView, type StepView, shownError } from "./views.js";

/** Builds the step history of a run from its journal (see the file header). */
export function stepViews(journal: Journal): StepView[] {
  const history = new StepHistory();
  const outcomes = latestOutcomes(journal);
  for (const s of outcomes) history.add(outcomeView(s), s.seq);
  const intents = new Map(journal.intents.map((i) => [i.key, i]));
  const attempts = [...journal.attempts].sort(
    (a, b) => a.generation - b.generation || a.attempt - b.attempt,
  );
  for (const a of attempts) addFailedAttempt(history, a, intents.get(a.key));
  const attempted = new Set(journal.attempts.map((a) => a.key));
  for (const s of outcomes) addOutcomeAttempt(history, s, attempted);
  for (const i of journal.intents) addIntent(history, i);
  return history.list();
}

/** The views being built, by key, each with its place in the list. */
class StepHistory {
  private readonly byKey = new Map<string, StepView>();
  private readonly places: Array<{ key: string; place: number }> = [];
  /** Places after every completed call's (places there are their seq numbers). */
  private nextTailPlace = Number.MAX_SAFE_INTEGER / 2;

  get(key: string): StepView | undefined {
    return this.byKey.get(key);
  }

  /** Adds `view` at `place`, or after everything added so far without one. */
  add(view: StepView, place?: number): void {
    this.byKey.set(view.key, view);
    this.places.push({ key: view.key, place: place ?? this.nextTailPlace++ });
  }

  list(): StepView[] {
    return this.places.sort((a, b) => a.place - b.place).map((p) => this.byKey.get(p.key)!);
  }
}

/** Each key's latest outcome, in call order: after a resume, a key may hold a failure and a
 *  later generation's outcome; the history shows the latest. Calls that share a seq (one
 *  generation's and the next's) come in key order, whatever order the store returned them
 *  in: the whole history (getSteps) and its pages (readSteps) then list them alike. */
function latestOutcomes(journal: Journal): StepRecord[] {
  const latest = new Map<string, StepRecord>();
  for (const s of journal.steps) {
    const held = latest.get(s.key);
    if (!held || s.generation > held.generation) latest.set(s.key, s);
  }
  return [...latest.values()].sort(
    (a, b) => a.seq - b.seq || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0),
  );
}

function outcomeView(record: StepRecord): StepView {
  const view: StepView = {
    key: record.key,
    name: record.name,
    kind: record.kind,
    status: record.outcome === "ok" ? "completed" : "failed",
    attempts: [],
    spend: {},
    startedAt: new Date(record.startedAt),
    completedAt: new Date(record.completedAt),
  };
  if (record.outcome === "ok") view.result = decodeForView(record.result);
  if (record.error) view.error = shownError(record.error);
  if (record.kind === "effect" && record.outcome === "ok" && record.reconciled !== undefined) {
    view.effect = record.reconciled ? "reconciled" : "performed";
  }
  return view;
}

/** An attempt that did not complete its call: listed under its call, whose status (unless
 *  it completed) and error it sets; a call known only by such attempts is added. */
function addFailedAttempt(
  history: StepHistory,
  failed: AttemptRecord,
  intent: IntentRecord | undefined,
): void {
  const status = failed.retryAt === null ? "failed" : "retrying";
  let view = history.get(failed.key);
  if (!view) {
    view = {
      key: failed.key,
      name: intent?.name ?? failed.key.replace(/#\d+$/, ""),
      kind: intent?.kind ?? "step",
      status,
      attempts: [],
      spend: {},
      startedAt: new Date(failed.startedAt),
    };
    history.add(view);
  } else if (!view.completedAt) {
    view.status = status;
  }
  if (!view.completedAt && failed.retryAt === null) view.error = shownError(failed.error);
  const attempt: AttemptView = {
    attempt: failed.attempt,
    startedAt: new Date(failed.startedAt),
    endedAt: new Date(failed.endedAt),
    error: shownError(failed.error),
    spend: { ...failed.spend },
  };
  if (failed.retryAt !== null && !view.completedAt) attempt.retryAt = new Date(failed.retryAt);
  view.attempts.push(attempt);
  addAmounts(view.spend, failed.spend);
  if (failed.startedAt < view.startedAt.getTime()) view.startedAt = new Date(failed.startedAt);
}

/** The attempt that ended a call (its outcome), after its failed ones. */
function addOutcomeAttempt(history: StepHistory, record: StepRecord, attempted: Set<string>): void {
  const view = history.get(record.key);
  if (!view) return;
  // A failure's last attempt is already listed (a child's failure has none).
  if (record.outcome === "error" && attempted.has(record.key)) return;
  view.attempts.push({
    attempt: record.attempt,
    startedAt: new Date(record.startedAt),
    endedAt: new Date(record.completedAt),
    spend: { ...record.spend },
    ...(record.error ? { error: shownError(record.error) } : {}),
  });
  addAmounts(view.spend, record.spend);
}

/** When a listed call was begun durably; a call known only by its intent is added as
 *  waiting (a sleep, wait, child or approval) or started. */
function addIntent(history: StepHistory, intent: IntentRecord): void {
  const known = history.get(intent.key);
  if (known) {
    known.intentAt = new Date(intent.createdAt);
    return;
  }
  history.add({
    key: intent.key,
    name: intent.name,
    kind: intent.kind,
    status:
      intent.kind === "sleep" ||
      intent.kind === "wait" ||
      intent.kind === "child" ||
      intent.kind === "approval"
        ? "waiting"
        : "started",
    attempts: [],
    spend: {},
    startedAt: new Date(intent.createdAt),
    intentAt: new Date(intent.createdAt),
  });
}
