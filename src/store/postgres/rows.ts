// Row <-> record mapping for the PostgreSQL store, and the normalization that makes
// journal writes idempotent. Kept apart so the verbs read as SQL + decisions, and so the
// one place that turns driver values (int8 as string, jsonb as parsed JSON) into plain
// records is easy to audit: no driver type may cross the Store interface.

import { roundAmountsRead } from "../../lib/amounts.js";
import { parseError } from "../error-json.js";
import type {
  Amounts,
  AttemptRecord,
  ErrorRecord,
  EventHead,
  EventRecord,
  IntentRecord,
  ReleasedRun,
  RunRecord,
  RunStatus,
  StepKind,
  StepRecord,
  WorkerRecord,
} from "../store.js";

/** Every column of `runs`, as node-postgres returns it (int8 arrives as a string). */
export interface RunRow {
  id: string;
  workflow: string;
  version: string;
  status: string;
  reason: string | null;
  paused_for: string | null;
  input: string;
  output: string | null;
  /** errorJson text (migration 5). */
  error: string | null;
  budget_limit: Amounts;
  budget_spent: Amounts;
  parent_id: string | null;
  ready_at: string | number | null;
  wake_at: string | number | null;
  waiting_for: string[];
  lease_owner: string | null;
  lease_until: string | number | null;
  epoch: string | number;
  generation: number;
  cancel_requested: boolean;
  created_at: string | number;
  updated_at: string | number;
  failed_calls: RunRecord["failedCalls"];
  trace_context: string | null;
  handed_input_digest: string | null;
  /** Absent from rows a verb returns with only some columns. */
  held_by?: string | null;
  held_until?: string | number | null;
}

function num(v: string | number): number {
  return typeof v === "number" ? v : Number(v);
}

function numOrNull(v: string | number | null): number | null {
  return v === null ? null : num(v);
}

export function toRun(row: RunRow): RunRecord {
  return toRunWith(row, row.input, row.output);
}

/**
 * The columns of `runs` toRun reads but for the payloads, input and output: what a create
 * and a release send back (RETURNING, unqualified). The caller has both: the create's input
 * is what it inserted, the release's output what it wrote, and no release changes the input
 * (ReleasedRun). Returned whole, a 1 MB input came back over the wire with the create and
 * again with the release. A created run's output is null; a release's, when it may be
 * another than the one sent (a retry that finds its earlier try's release), comes back.
 */
export const RUN_COLUMNS_BUT_PAYLOADS = `id, workflow, version, status, reason, paused_for, error,
  budget_limit, budget_spent, parent_id, ready_at, wake_at, waiting_for, lease_owner,
  lease_until, epoch, generation, cancel_requested, created_at, updated_at, failed_calls,
  trace_context, handed_input_digest, held_by, held_until`;

/** A row of RUN_COLUMNS_BUT_PAYLOADS. */
export type RunRowButPayloads = Omit<RunRow, "input" | "output">;

/** A run from a row of RUN_COLUMNS_BUT_PAYLOADS and the input the caller created it with. */
export function toCreatedRun(row: RunRowButPayloads, input: string): RunRecord {
  return toRunWith(row, input, null);
}

/** A released run from a row of RUN_COLUMNS_BUT_PAYLOADS and its output. */
export function toReleasedRun(row: RunRowButPayloads, output: string | null): ReleasedRun {
  const { input: _none, ...run } = toRunWith(row, "", output);
  return run;
}

function toRunWith(row: RunRowButPayloads, input: string, output: string | null): RunRecord {
  return {
    id: row.id,
    workflow: row.workflow,
    version: row.version,
    status: row.status as RunStatus,
    reason: row.reason,
    pausedFor: row.paused_for as RunRecord["pausedFor"],
    input,
    output,
    error: row.error === null ? null : parseError(row.error),
    budgetLimit: row.budget_limit ?? {},
    // Rounded as amounts are summed (lib/amounts.ts): add_amounts (SQL) sums in plain
    // float8, and a run recorded before cairn rounded sums kept their float noise.
    budgetSpent: roundAmountsRead(row.budget_spent ?? {}),
    parentId: row.parent_id,
    readyAt: numOrNull(row.ready_at),
    wakeAt: numOrNull(row.wake_at),
    waitingFor: row.waiting_for ?? [],
    leaseOwner: row.lease_owner,
    leaseUntil: numOrNull(row.lease_until),
    epoch: num(row.epoch),
    generation: row.generation,
    cancelRequested: row.cancel_requested,
    failedCalls: row.failed_calls ?? [],
    traceContext: row.trace_context ?? null,
    handedInputDigest: row.handed_input_digest ?? null,
    heldBy: row.held_by ?? null,
    heldUntil: numOrNull(row.held_until ?? null),
    createdAt: num(row.created_at),
    updatedAt: num(row.updated_at),
  };
}

/** Only the keys that are present: a recorded error never grows `undefined` members. */
function toErrorRecord(e: ErrorRecord): ErrorRecord {
  const out: ErrorRecord = { name: e.name, message: e.message };
  if (e.code !== undefined && e.code !== null) out.code = e.code;
  if (e.stack !== undefined && e.stack !== null) out.stack = e.stack;
  return out;
}

function errorOrNull(e: ErrorRecord | null | undefined): ErrorRecord | null {
  return e === null || e === undefined ? null : toErrorRecord(e);
}

/** Journal rows come out of json_agg, so int8 columns are already JSON numbers. */
export interface StepRow {
  run_id: string;
  key: string;
  generation: number;
  seq: number;
  name: string;
  kind: string;
  outcome: string;
  result: string | null;
  error: string | null;
  spend: Amounts;
  attempt: number;
  started_at: string | number;
  completed_at: string | number;
  delivery: number | null;
  issued_after: number | null;
  issued_late: boolean;
  reconciled: boolean | null;
}

export function toStep(r: StepRow): StepRecord {
  return {
    runId: r.run_id,
    key: r.key,
    generation: r.generation,
    seq: r.seq,
    name: r.name,
    kind: r.kind as StepKind,
    outcome: r.outcome as StepRecord["outcome"],
    result: r.result,
    error: r.error === null ? null : parseError(r.error),
    spend: r.spend ?? {},
    attempt: r.attempt,
    startedAt: num(r.started_at),
    completedAt: num(r.completed_at),
    delivery: r.delivery ?? null,
    issuedAfter: r.issued_after ?? null,
    issuedLate: r.issued_late === true,
    ...(r.reconciled === null || r.reconciled === undefined ? {} : { reconciled: r.reconciled }),
  };
}

/** A step's whole-number columns as loadJournal's statement reads them: one text, the
 *  numbers of attempt, started_at, completed_at, delivery, issued_after, issued_late (0 or
 *  1) and reconciled (0 or 1) in that order, each followed by a comma but the last, empty
 *  where the column is NULL. stepFromValues reads it without a string a number. */
export const STEP_NUMBERS_SQL =
  "x.attempt || ',' || x.started_at || ',' || x.completed_at || ',' || " +
  "coalesce(x.delivery::text, '') || ',' || coalesce(x.issued_after::text, '') || ',' || " +
  "x.issued_late::int || ',' || coalesce(x.reconciled::int::text, '')";

/** Where numberAt stopped: just past the comma after the number it read. */
let numbersAt = 0;

/** The whole number of STEP_NUMBERS_SQL's text `s` from numbersAt (null where it is empty),
 *  moving numbersAt past it and its comma. Digit by digit, with no string made; a number of
 *  more than 15 digits (past what a double holds exactly when summed so) is read by Number
 *  from its text, as num() reads an int8 column's. */
function numberAt(s: string): number | null {
  const start = numbersAt;
  let i = start;
  const negative = s.charCodeAt(i) === 45; // "-"
  if (negative) i++;
  const digits = i;
  let n = 0;
  for (; i < s.length; i++) {
    const d = s.charCodeAt(i) - 48;
    if (d < 0 || d > 9) break;
    n = n * 10 + d;
  }
  const end = i;
  if (end < s.length && s.charCodeAt(end) !== 44) {
    throw new Error(`loadJournal: a step's numbers text is not whole numbers: "${s}"`);
  }
  numbersAt = end + 1;
  if (end === start) return null;
  if (end === digits) {
    throw new Error(`loadJournal: a step's numbers text is not whole numbers: "${s}"`);
  }
  if (end - digits > 15) return Number(s.slice(start, end));
  return negative ? 0 - n : n;
}

/** A step of `runId` as loadJournal's statement reads it: an array of its columns in
 *  journal-load.ts's STEP_VALUES order (all but run_id; spend as text, NULL when empty; the
 *  whole numbers as STEP_NUMBERS_SQL's one text). The record toStep makes of the same row,
 *  field for field (test/postgres-journal-step-arrays.test.ts). */
export function stepFromValues(runId: string, v: readonly unknown[]): StepRecord {
  const error = v[7] as StepRow["error"];
  const spend = v[8] as string | null;
  const numbers = v[9] as string;
  numbersAt = 0;
  const attempt = numberAt(numbers)!;
  const startedAt = numberAt(numbers)!;
  const completedAt = numberAt(numbers)!;
  const delivery = numberAt(numbers);
  const issuedAfter = numberAt(numbers);
  const issuedLate = numberAt(numbers) === 1;
  const reconciled = numberAt(numbers);
  if (numbersAt !== numbers.length + 1) {
    throw new Error(`loadJournal: a step's numbers text holds more than 7 numbers: "${numbers}"`);
  }
  const step: StepRecord = {
    runId,
    key: v[0] as string,
    generation: v[1] as number,
    seq: v[2] as number,
    name: v[3] as string,
    kind: v[4] as StepKind,
    outcome: v[5] as StepRecord["outcome"],
    result: v[6] as string | null,
    error: error === null ? null : parseError(error),
    spend: spend === null ? {} : (JSON.parse(spend) as Amounts),
    attempt,
    startedAt,
    completedAt,
    delivery,
    issuedAfter,
    issuedLate,
  };
  if (reconciled !== null) step.reconciled = reconciled === 1;
  return step;
}

export interface AttemptRow {
  run_id: string;
  key: string;
  attempt: number;
  generation: number;
  started_at: string | number;
  ended_at: string | number;
  error: string;
  spend: Amounts;
  retry_at: string | number | null;
}

export function toAttempt(r: AttemptRow): AttemptRecord {
  return {
    runId: r.run_id,
    key: r.key,
    attempt: r.attempt,
    generation: r.generation,
    startedAt: num(r.started_at),
    endedAt: num(r.ended_at),
    error: parseError(r.error),
    spend: r.spend ?? {},
    retryAt: numOrNull(r.retry_at),
  };
}

export interface IntentRow {
  run_id: string;
  key: string;
  kind: string;
  name: string;
  data: string;
  created_at: string | number;
}

export function toIntent(r: IntentRow): IntentRecord {
  return {
    runId: r.run_id,
    key: r.key,
    kind: r.kind as StepKind,
    name: r.name,
    data: r.data,
    createdAt: num(r.created_at),
  };
}

export interface EventRow {
  seq: string | number;
  run_id: string;
  name: string;
  payload: string;
  created_at: string | number;
  consumed_by: string | null;
  idempotency_key: string | null;
}

export function toEvent(r: EventRow): EventRecord {
  return {
    seq: num(r.seq),
    runId: r.run_id,
    name: r.name,
    payload: r.payload,
    createdAt: num(r.created_at),
    consumedBy: r.consumed_by,
    idempotencyKey: r.idempotency_key ?? null,
  };
}

export function toEventHead(r: Omit<EventRow, "payload">): EventHead {
  return {
    seq: num(r.seq),
    runId: r.run_id,
    name: r.name,
    createdAt: num(r.created_at),
    consumedBy: r.consumed_by,
    idempotencyKey: r.idempotency_key ?? null,
  };
}

/** A head read by its run and name (Store.pendingEventHeadsNamed, pendingEventHeadsOfNames):
 *  unconsumed, of the run and name the read asked for, so neither is read back. */
export interface NamedEventHeadRow {
  seq: string | number;
  created_at: string | number;
  idempotency_key: string | null;
}

export function toNamedEventHead(runId: string, name: string, r: NamedEventHeadRow): EventHead {
  return {
    seq: num(r.seq),
    runId,
    name,
    createdAt: num(r.created_at),
    consumedBy: null,
    idempotencyKey: r.idempotency_key,
  };
}

export interface WorkerRow {
  id: string;
  host: string;
  pid: number;
  pid_namespace: string | null;
  workflows: string[];
  lease_ms: string | number | null;
  started_at: string | number;
  heartbeat_at: string | number;
}

export function toWorker(r: WorkerRow): WorkerRecord {
  return {
    id: r.id,
    host: r.host,
    pid: r.pid,
    pidNamespace: r.pid_namespace ?? null,
    workflows: r.workflows,
    leaseMs: r.lease_ms == null ? null : num(r.lease_ms),
    startedAt: num(r.started_at),
    heartbeatAt: num(r.heartbeat_at),
  };
}

// ---- idempotent writes ----
// A journal write that finds a row under its key is a no-op when the row is the same record,
// and a conflict otherwise. "The same" is judged on the record as it reads back (JSON drops
// undefined members, times are stored as whole ms): records are normalized to that form
// before they are sent, and append_records compares them with the stored rows column by
// column, jsonb by jsonb equality (which ignores key order). So a retry after an unknown
// commit outcome compares equal to what the first try stored.

/** Whole milliseconds, as a bigint column stores them. */
export function ms(v: number): number {
  return Math.round(v);
}

// Built field by field: extra members a caller's object may carry are not part of the
// record, and `undefined` reads back as null.
export function normalizeStep(s: StepRecord): StepRecord {
  return {
    runId: s.runId,
    key: s.key,
    generation: s.generation,
    seq: s.seq,
    name: s.name,
    kind: s.kind,
    outcome: s.outcome,
    result: s.result ?? null,
    error: errorOrNull(s.error),
    spend: s.spend ?? {},
    attempt: s.attempt,
    startedAt: ms(s.startedAt),
    completedAt: ms(s.completedAt),
    delivery: s.delivery ?? null,
    issuedAfter: s.issuedAfter ?? null,
    issuedLate: s.issuedLate === true,
    ...(typeof s.reconciled === "boolean" ? { reconciled: s.reconciled } : {}),
  };
}

export function normalizeAttempt(a: AttemptRecord): AttemptRecord {
  return {
    runId: a.runId,
    key: a.key,
    attempt: a.attempt,
    generation: a.generation,
    startedAt: ms(a.startedAt),
    endedAt: ms(a.endedAt),
    error: toErrorRecord(a.error),
    spend: a.spend ?? {},
    retryAt: a.retryAt === null || a.retryAt === undefined ? null : ms(a.retryAt),
  };
}

export function normalizeIntent(i: IntentRecord): IntentRecord {
  return {
    runId: i.runId,
    key: i.key,
    kind: i.kind,
    name: i.name,
    data: i.data,
    createdAt: ms(i.createdAt),
  };
}
