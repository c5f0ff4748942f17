// What inspection returns (getRun, listRuns, getSteps): decoded values, Dates, and a
// step's whole history (every attempt with its error and spend) in call order.

import { decode } from "../codec/codec.js";
import { addAmounts } from "../lib/amounts.js";
import type {
  Amounts,
  ErrorRecord,
  Journal,
  RunRecord,
  RunStatus,
  StepKind,
} from "../store/store.js";

export interface RunView {
  id: string;
  workflow: string;
  version: string;
  status: RunStatus;
  reason?: string;
  input: unknown;
  output?: unknown;
  error?: { name: string; code?: string; message: string };
  budget: { limit: Amounts; spent: Amounts };
  parentId?: string;
  wakeAt?: Date;
  waitingFor?: string[];
  createdAt: Date;
  updatedAt: Date;
}

export interface AttemptView {
  attempt: number;
  startedAt: Date;
  endedAt?: Date;
  error?: ErrorRecord;
  spend: Amounts;
  /** When the next attempt may start (failed attempts that will be retried). */
  retryAt?: Date;
}

export type StepStatus = "completed" | "failed" | "retrying" | "started" | "waiting";

export interface StepView {
  key: string;
  name: string;
  kind: StepKind;
  status: StepStatus;
  result?: unknown;
  error?: ErrorRecord;
  attempts: AttemptView[];
  /** Total spend of all attempts. */
  spend: Amounts;
  startedAt: Date;
  completedAt?: Date;
  /** When the call was begun durably (an effect's intent, a sleep or wait reached, a child
   *  started), if it records one; with completedAt it is the call's intent/completion history. */
  intentAt?: Date;
}

function safeDecode(text: string | null): unknown {
  if (text === null) return undefined;
  try {
    return decode(text);
  } catch {
    return undefined;
  }
}

export function toRunView(run: RunRecord): RunView {
  const view: RunView = {
    id: run.id,
    workflow: run.workflow,
    version: run.version,
    status: run.status,
    input: safeDecode(run.input),
    budget: { limit: { ...run.budgetLimit }, spent: { ...run.budgetSpent } },
    createdAt: new Date(run.createdAt),
    updatedAt: new Date(run.updatedAt),
  };
  if (run.reason) view.reason = run.reason;
  if (run.output !== null) view.output = safeDecode(run.output);
  if (run.error) {
    view.error = { name: run.error.name, message: run.error.message };
    if (run.error.code) view.error.code = run.error.code;
  }
  if (run.parentId) view.parentId = run.parentId;
  if (run.status === "waiting") {
    if (run.wakeAt !== null) view.wakeAt = new Date(run.wakeAt);
    if (run.waitingFor.length > 0) view.waitingFor = [...run.waitingFor];
  }
  return view;
}

/** Builds the step history of a run from its journal, in call order; calls begun but not
 *  completed (intents, failed attempts) follow the completed ones. */
export function stepViews(journal: Journal): StepView[] {
  const byKey = new Map<string, StepView>();
  const order: Array<{ key: string; seq: number }> = [];
  for (const s of [...journal.steps].sort((a, b) => a.seq - b.seq)) {
    const view: StepView = {
      key: s.key,
      name: s.name,
      kind: s.kind,
      status: s.outcome === "ok" ? "completed" : "failed",
      attempts: [],
      spend: {},
      startedAt: new Date(s.startedAt),
      completedAt: new Date(s.completedAt),
    };
    if (s.outcome === "ok") view.result = safeDecode(s.result);
    if (s.error) view.error = s.error;
    byKey.set(s.key, view);
    order.push({ key: s.key, seq: s.seq });
  }
  const intents = new Map(journal.intents.map((i) => [i.key, i]));
  let tail = Number.MAX_SAFE_INTEGER / 2;
  const attempts = [...journal.attempts].sort(
    (a, b) => a.generation - b.generation || a.attempt - b.attempt,
  );
  for (const a of attempts) {
    let view = byKey.get(a.key);
    if (!view) {
      view = {
        key: a.key,
        name: intents.get(a.key)?.name ?? a.key.replace(/#\d+$/, ""),
        kind: intents.get(a.key)?.kind ?? "step",
        status: a.retryAt === null ? "failed" : "retrying",
        attempts: [],
        spend: {},
        startedAt: new Date(a.startedAt),
      };
      byKey.set(a.key, view);
      order.push({ key: a.key, seq: tail++ });
    } else if (!view.completedAt) {
      view.status = a.retryAt === null ? "failed" : "retrying";
    }
    if (!view.completedAt && a.retryAt === null) view.error = a.error;
    const av: AttemptView = {
      attempt: a.attempt,
      startedAt: new Date(a.startedAt),
      endedAt: new Date(a.endedAt),
      error: a.error,
      spend: { ...a.spend },
    };
    if (a.retryAt !== null && !view.completedAt) av.retryAt = new Date(a.retryAt);
    view.attempts.push(av);
    addAmounts(view.spend, a.spend);
    if (a.startedAt < view.startedAt.getTime()) view.startedAt = new Date(a.startedAt);
  }
  for (const s of journal.steps) {
    const view = byKey.get(s.key);
    if (!view) continue;
    view.attempts.push({
      attempt: s.attempt,
      startedAt: new Date(s.startedAt),
      endedAt: new Date(s.completedAt),
      spend: { ...s.spend },
      ...(s.error ? { error: s.error } : {}),
    });
    addAmounts(view.spend, s.spend);
  }
  for (const i of journal.intents) {
    const known = byKey.get(i.key);
    if (known) {
      known.intentAt = new Date(i.createdAt);
      continue;
    }
    byKey.set(i.key, {
      key: i.key,
      name: i.name,
      kind: i.kind,
      status: i.kind === "sleep" || i.kind === "wait" || i.kind === "child" ? "waiting" : "started",
      attempts: [],
      spend: {},
      startedAt: new Date(i.createdAt),
      intentAt: new Date(i.createdAt),
    });
    order.push({ key: i.key, seq: tail++ });
  }
  return order.sort((a, b) => a.seq - b.seq).map((o) => byKey.get(o.key)!);
}
