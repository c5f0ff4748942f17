// Records <-> SQLite rows. JSON columns are written in ONE canonical form (amounts with
// sorted names, errors with a fixed field order), so "the same record" means the same
// column values: an identical re-write is recognised by comparing columns, whatever order
// the writer's object had its keys in.

import { StoreError } from "../../errors.js";
import { roundAmountsRead } from "../../lib/amounts.js";
import { errorJson, parseError } from "../error-json.js";
import type {
  Amounts,
  AttemptRecord,
  EventRecord,
  IntentRecord,
  RunRecord,
  RunStatus,
  StepKind,
  StepRecord,
  WorkerRecord,
} from "../store.js";

type Value = string | number | null;

export interface RunRow {
  id: string;
  workflow: string;
  version: string;
  status: RunStatus;
  reason: string | null;
  paused_for: "version" | "budget" | null;
  input: string;
  output: string | null;
  error: string | null;
  budget_limit: string;
  budget_spent: string;
  parent_id: string | null;
  ready_at: number | null;
  wake_at: number | null;
  waiting_for: string;
  lease_owner: string | null;
  lease_until: number | null;
  epoch: number;
  generation: number;
  cancel_requested: number;
  created_at: number;
  updated_at: number;
  failed_calls: string;
  trace_context: string | null;
  handed_input_digest: string | null;
  /** Absent from rows a verb returns with NEW_RUN_COLUMNS (a new run holds nothing). */
  held_by?: string | null;
  held_until?: number | null;
}

/** The columns of a whole runs row, in the order `runRowFromValues` reads them. */
export const RUN_ROW_COLUMNS = [
  "id",
  "workflow",
  "version",
  "status",
  "reason",
  "paused_for",
  "input",
  "output",
  "error",
  "budget_limit",
  "budget_spent",
  "parent_id",
  "ready_at",
  "wake_at",
  "waiting_for",
  "lease_owner",
  "lease_until",
  "epoch",
  "generation",
  "cancel_requested",
  "created_at",
  "updated_at",
  "failed_calls",
  "trace_context",
  "handed_input_digest",
  "held_by",
  "held_until",
] as const;

/** A runs row read in raw mode (columns as RUN_ROW_COLUMNS lists them). better-sqlite3
 *  makes a row object property by property: a row of 27 columns as an object cost about
 *  twice its array, and a release read one and had one returned (rows.test.ts ties this
 *  to the list and to the migrated table). */
export function runRowFromValues(v: readonly Value[]): RunRow {
  return {
    id: v[0] as string,
    workflow: v[1] as string,
    version: v[2] as string,
    status: v[3] as RunStatus,
    reason: v[4] as string | null,
    paused_for: v[5] as RunRow["paused_for"],
    input: v[6] as string,
    output: v[7] as string | null,
    error: v[8] as string | null,
    budget_limit: v[9] as string,
    budget_spent: v[10] as string,
    parent_id: v[11] as string | null,
    ready_at: v[12] as number | null,
    wake_at: v[13] as number | null,
    waiting_for: v[14] as string,
    lease_owner: v[15] as string | null,
    lease_until: v[16] as number | null,
    epoch: v[17] as number,
    generation: v[18] as number,
    cancel_requested: v[19] as number,
    created_at: v[20] as number,
    updated_at: v[21] as number,
    failed_calls: v[22] as string,
    trace_context: v[23] as string | null,
    handed_input_digest: v[24] as string | null,
    held_by: v[25] as string | null,
    held_until: v[26] as number | null,
  };
}

/** Canonical JSON of named amounts; refuses what JSON would silently turn into null.
 *  `what` names them in that refusal (a function: most calls never need the text). */
export function amountsJson(amounts: Amounts, what: () => string): string {
  // Most records spend nothing.
  let empty = true;
  for (const name in amounts) {
    if (Object.hasOwn(amounts, name)) {
      empty = false;
      break;
    }
  }
  if (empty) return "{}";
  const out: Amounts = {};
  for (const name of Object.keys(amounts).sort()) {
    const v = amounts[name];
    if (typeof v !== "number" || !Number.isFinite(v)) {
      throw new StoreError(`${what()}: amount "${name}" is not a finite number.`);
    }
    out[name] = v;
  }
  return JSON.stringify(out);
}

export function parseAmounts(json: string): Amounts {
  // Most records spend nothing: no parse for them.
  return json === "{}" ? {} : (JSON.parse(json) as Amounts);
}

export function runFromRow(r: RunRow): RunRecord {
  return {
    id: r.id,
    workflow: r.workflow,
    version: r.version,
    status: r.status,
    reason: r.reason,
    pausedFor: r.paused_for,
    input: r.input,
    output: r.output,
    error: r.error === null ? null : parseError(r.error),
    budgetLimit: parseAmounts(r.budget_limit),
    // Rounded as amounts are summed (lib/amounts.ts): a run recorded before cairn rounded
    // sums kept their float noise (0.30000000000000004).
    budgetSpent: roundAmountsRead(parseAmounts(r.budget_spent)),
    parentId: r.parent_id,
    readyAt: r.ready_at,
    wakeAt: r.wake_at,
    waitingFor: JSON.parse(r.waiting_for) as string[],
    leaseOwner: r.lease_owner,
    leaseUntil: r.lease_until,
    epoch: r.epoch,
    generation: r.generation,
    cancelRequested: r.cancel_requested !== 0,
    failedCalls: JSON.parse(r.failed_calls) as RunRecord["failedCalls"],
    traceContext: r.trace_context ?? null,
    handedInputDigest: r.handed_input_digest ?? null,
    heldBy: r.held_by ?? null,
    heldUntil: r.held_until ?? null,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

export interface StepRow extends Record<string, Value> {
  run_id: string;
  key: string;
  generation: number;
  seq: number;
  name: string;
  kind: string;
  outcome: string;
  result: string | null;
  error: string | null;
  spend: string;
  attempt: number;
  started_at: number;
  completed_at: number;
  delivery: number | null;
  issued_after: number | null;
  issued_late: number;
  /** 1 reconciled, 0 performed, null: not an effect's value, or not recorded. */
  reconciled: number | null;
}

export function stepToRow(s: StepRecord): StepRow {
  return {
    run_id: s.runId,
    key: s.key,
    generation: s.generation,
    seq: s.seq,
    name: s.name,
    kind: s.kind,
    outcome: s.outcome,
    result: s.result,
    error: s.error === null ? null : errorJson(s.error),
    spend: amountsJson(s.spend, () => `Spend of step "${s.key}" of run "${s.runId}"`),
    attempt: s.attempt,
    started_at: s.startedAt,
    completed_at: s.completedAt,
    delivery: s.delivery,
    issued_after: s.issuedAfter,
    issued_late: s.issuedLate ? 1 : 0,
    reconciled: s.reconciled === undefined ? null : s.reconciled ? 1 : 0,
  };
}

/** The step columns in the order `stepFromValues` reads them. Replay reads a run's steps
 *  as arrays of these (better-sqlite3's raw mode): a 1,000-step journal comes back in about
 *  half the time rows as objects take, the larger part of loading it. A column of the table
 *  missing here would silently not reach replay: rows.test.ts compares this list with the
 *  migrated table and with stepToRow (StepRow's index signature lets any name type-check). */
export const STEP_COLUMNS = [
  "run_id",
  "key",
  "generation",
  "seq",
  "name",
  "kind",
  "outcome",
  "result",
  "error",
  "spend",
  "attempt",
  "started_at",
  "completed_at",
  "delivery",
  "issued_after",
  "issued_late",
  "reconciled",
] as const;

/** `SELECT ${STEP_SELECT} FROM steps ...` reads rows for `stepFromValues`. */
export const STEP_SELECT = STEP_COLUMNS.join(", ");

/** A step row read in raw mode (columns as STEP_SELECT lists them). */
export function stepFromValues(v: readonly Value[]): StepRecord {
  const error = v[8] as string | null;
  const reconciled = v[16] as number | null | undefined;
  const step: StepRecord = {
    runId: v[0] as string,
    key: v[1] as string,
    generation: v[2] as number,
    seq: v[3] as number,
    name: v[4] as string,
    kind: v[5] as StepKind,
    outcome: v[6] as StepRecord["outcome"],
    result: v[7] as string | null,
    error: error === null ? null : parseError(error),
    spend: parseAmounts(v[9] as string),
    attempt: v[10] as number,
    startedAt: v[11] as number,
    completedAt: v[12] as number,
    delivery: v[13] as number | null,
    issuedAfter: v[14] as number | null,
    issuedLate: v[15] !== 0,
  };
  if (reconciled !== null && reconciled !== undefined) step.reconciled = reconciled !== 0;
  return step;
}

export function stepFromRow(r: StepRow): StepRecord {
  return stepFromValues(STEP_COLUMNS.map((c) => r[c]));
}

export interface AttemptRow extends Record<string, Value> {
  run_id: string;
  key: string;
  attempt: number;
  generation: number;
  started_at: number;
  ended_at: number;
  error: string;
  spend: string;
  retry_at: number | null;
}

export function attemptToRow(a: AttemptRecord): AttemptRow {
  return {
    run_id: a.runId,
    key: a.key,
    attempt: a.attempt,
    generation: a.generation,
    started_at: a.startedAt,
    ended_at: a.endedAt,
    error: errorJson(a.error),
    spend: amountsJson(
      a.spend,
      () => `Spend of attempt ${a.attempt} of "${a.key}" of run "${a.runId}"`,
    ),
    retry_at: a.retryAt,
  };
}

export function attemptFromRow(r: AttemptRow): AttemptRecord {
  return {
    runId: r.run_id,
    key: r.key,
    attempt: r.attempt,
    generation: r.generation,
    startedAt: r.started_at,
    endedAt: r.ended_at,
    error: parseError(r.error),
    spend: parseAmounts(r.spend),
    retryAt: r.retry_at,
  };
}

export interface IntentRow extends Record<string, Value> {
  run_id: string;
  key: string;
  kind: string;
  name: string;
  data: string;
  created_at: number;
}

export function intentToRow(i: IntentRecord): IntentRow {
  return {
    run_id: i.runId,
    key: i.key,
    kind: i.kind,
    name: i.name,
    data: i.data,
    created_at: i.createdAt,
  };
}

export function intentFromRow(r: IntentRow): IntentRecord {
  return {
    runId: r.run_id,
    key: r.key,
    kind: r.kind as StepKind,
    name: r.name,
    data: r.data,
    createdAt: r.created_at,
  };
}

export interface EventRow {
  seq: number;
  run_id: string;
  name: string;
  payload: string;
  created_at: number;
  consumed_by: string | null;
  idempotency_key: string | null;
}

export function eventFromRow(r: EventRow): EventRecord {
  return {
    seq: r.seq,
    runId: r.run_id,
    name: r.name,
    payload: r.payload,
    createdAt: r.created_at,
    consumedBy: r.consumed_by,
    idempotencyKey: r.idempotency_key,
  };
}

export interface WorkerRow {
  id: string;
  host: string;
  pid: number;
  pid_namespace: string | null;
  workflows: string;
  lease_ms: number | null;
  started_at: number;
  heartbeat_at: number;
}

export function workerFromRow(r: WorkerRow): WorkerRecord {
  return {
    id: r.id,
    host: r.host,
    pid: r.pid,
    pidNamespace: r.pid_namespace ?? null,
    workflows: JSON.parse(r.workflows) as string[],
    leaseMs: r.lease_ms ?? null,
    startedAt: r.started_at,
    heartbeatAt: r.heartbeat_at,
  };
}

/** True when every column of `written` (but those in `ignore`) equals the stored row's. */
export function sameColumns(
  written: Record<string, Value>,
  stored: Record<string, unknown>,
  ignore: ReadonlySet<string> = new Set(),
) {
  return Object.keys(written).every((k) => ignore.has(k) || written[k] === stored[k]);
}
