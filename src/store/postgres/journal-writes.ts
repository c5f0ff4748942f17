// The journal on PostgreSQL: the group commit (appendRecords; its read, loadJournal, is
// journal-load.ts). The journal is the durable truth, so this is where fencing and
// idempotency live.
//
// appendRecords is ONE round trip whatever the batch size (a write of one step alone, on the
// store's own pool, is a prepared fenced INSERT instead, single-step.ts: a second round trip
// only when it lands nothing). The batch travels as one jsonb
// parameter to the store's append_records function (made by migration 2, last replaced by
// migration 14; its SQL is in migrations/append-records.ts), called as a single autocommit
// statement, and the outcomes come back as jsonb.
// - Fencing (invariant 3 of docs/ARCHITECTURE.md): each RunWrite first locks its run row
//   and compares the epoch, in the same transaction as its inserts. A claim increments the
//   epoch under the same row lock, so a zombie's write either commits before the claim or
//   finds the new epoch and lands nothing.
// - Isolation between writes: a RunWrite is checked in full (epoch, every record, every
//   event to consume) before any of it is written, under its run's row lock, which every
//   writer of that run's journal takes first; so a lost lease or a conflict lands nothing
//   of its write while the other writes commit, without a subtransaction per write. A write
//   with a record no backend can store (storable.ts) is answered "unstorable" and never
//   sent; should PostgreSQL still refuse a value (valueRefused), the writes are sent one
//   by one so that only the bad one fails (appendBatchIsolated).
// - Idempotency (a COMMIT whose answer is lost): a record that finds a row under its key
//   must be identical to it
//   (a no-op), else it is a conflict; inserts are ON CONFLICT DO NOTHING and spend is added
//   only for rows actually inserted; consuming an event that the same key already consumed
//   is ok. So a whole batch may be retried after a lost answer and lands exactly once,
//   which is why the statement is retried even when its outcome is unknown.
// - Records are normalized here (rows.ts) to the form loadJournal reads back, and the
//   function compares them column by column (jsonb equality ignores key order), so "the
//   same record" means equal as read back, whatever the key order or undefined members.

import { StoreError } from "../../errors.js";
import { errorJson } from "../error-json.js";
import { findUnstorable, refuseUnstorable } from "../storable.js";
import type {
  AttemptRecord,
  EventHead,
  EventHeadsPage,
  EventPayload,
  EventRecord,
  IntentRecord,
  RunWrite,
  StepRecord,
  WriteOutcome,
} from "../store.js";
import {
  type EventRow,
  type NamedEventHeadRow,
  normalizeAttempt,
  normalizeIntent,
  normalizeStep,
  toEvent,
  toEventHead,
  toNamedEventHead,
} from "./rows.js";
import { insertSingleStep, singleStepOf } from "./single-step.js";
import type { StoreContext, Tables } from "./sql.js";
import { serverError } from "./sql-state.js";

export async function appendRecords(
  ctx: StoreContext,
  writes: RunWrite[],
): Promise<WriteOutcome[]> {
  if (writes.length === 0) return [];
  for (const w of writes) checkRunIds(w);
  const single = ctx.db.prepares ? singleStepOf(writes) : undefined;
  if (single !== undefined && findUnstorable(writes[0]!) === undefined) {
    return appendSingleStep(ctx, writes, single);
  }
  // A write that no backend can store fails alone, before the batch is sent (storable.ts).
  return refuseUnstorable(writes, (storable) => appendBatchIsolated(ctx, storable));
}

/**
 * One step alone (a run executing by itself), storable: a prepared fenced INSERT
 * (single-step.ts), called from here with no layer of the batch path between (each was
 * an async function of its own: promises and microtask hops on every step of such a run).
 * Inserting nothing leaves the decision to append_records; a value PostgreSQL refuses
 * fails the write as "unstorable", as appendBatchIsolated answers it. Unprepared (a
 * caller's pool) its planning cost more than append_records's cached plans, so it is
 * taken on the store's own pool only.
 */
async function appendSingleStep(
  ctx: StoreContext,
  writes: RunWrite[],
  step: StepRecord,
): Promise<WriteOutcome[]> {
  const w = writes[0]!;
  try {
    if (await insertSingleStep(ctx, w.epoch, step)) return [{ ok: true }];
  } catch (err) {
    const refused = valueRefused(err);
    if (refused === undefined) throw err;
    return [unstorableByDatabase(w, refused)];
  }
  return appendBatchIsolated(ctx, writes);
}

/**
 * The batch as one statement; if PostgreSQL refuses a value in it (valueRefused: say a
 * number too large for its column, a value a CHECK refuses, or a key too long to index)
 * the statement rolled back as a whole, so each write is sent again on its own to find the
 * one it cannot store. That write fails as "unstorable"; the others land, as they would
 * have in a batch without it.
 */
async function appendBatchIsolated(ctx: StoreContext, writes: RunWrite[]): Promise<WriteOutcome[]> {
  if (writes.length === 0) return [];
  try {
    return await appendBatch(ctx, writes);
  } catch (err) {
    const refused = valueRefused(err);
    if (refused === undefined) throw err;
    if (writes.length === 1) return [unstorableByDatabase(writes[0]!, refused)];
    const out: WriteOutcome[] = [];
    for (const w of writes) out.push(...(await appendBatchIsolated(ctx, [w])));
    return out;
  }
}

async function appendBatch(ctx: StoreContext, writes: RunWrite[]): Promise<WriteOutcome[]> {
  const batch = JSON.stringify(writes.map(toBatchEntry));
  const r = await ctx.db.statement<{ outcomes: unknown }>(
    "appendRecords",
    "idempotent",
    `SELECT ${ctx.t.appendRecords}($1::jsonb, $2::bigint) AS outcomes`,
    [batch, ctx.clockParam()],
    "cairn_append_records",
  );
  const outcomes = r.rows[0]?.outcomes;
  if (!Array.isArray(outcomes) || outcomes.length !== writes.length) {
    throw new StoreError(
      `appendRecords: PostgreSQL answered ${JSON.stringify(outcomes)?.slice(0, 200)} for a ` +
        `batch of ${writes.length} writes; expected one outcome per write. Is the schema's ` +
        "append_records function the one this cairn created?",
    );
  }
  return outcomes.map(toOutcome);
}

/** The driver error of a data exception (SQLSTATE class 22: a value its column cannot
 *  hold), an integrity constraint (class 23: a value a CHECK or NOT NULL refuses) or a
 *  program limit (class 54: e.g. a key too long to index), as thrown or as the cause of
 *  the StoreError the connection layer made of it; undefined otherwise. Each is a value
 *  of one write or run refused, so a batch is sent again one by one to find it. */
export function valueRefused(err: unknown): { code: string; message: string } | undefined {
  const e = serverError(err);
  return e && /^(22|23|54)/.test(e.code) ? { code: e.code, message: e.message } : undefined;
}

function unstorableByDatabase(w: RunWrite, refused: { code: string }): WriteOutcome {
  const key =
    w.steps?.[0]?.key ?? w.attempts?.[0]?.key ?? w.intents?.[0]?.key ?? w.consume?.[0]?.key ?? "";
  return {
    ok: false,
    reason: "unstorable",
    key,
    message: `PostgreSQL refused a value of this write (SQLSTATE ${refused.code})`,
  };
}

/** A record filed under another run would escape that run's fence: refuse the batch. */
function checkRunIds(w: RunWrite): void {
  const records: Array<{ runId: string; key: string }> = [
    ...(w.steps ?? []),
    ...(w.attempts ?? []),
    ...(w.intents ?? []),
  ];
  for (const r of records) {
    if (r.runId !== w.runId) {
      throw new StoreError(
        `appendRecords: the record "${r.key}" names run "${r.runId}" but is part of the ` +
          `write for run "${w.runId}"; every record of a RunWrite must belong to its run.`,
      );
    }
  }
}

/** One write as append_records takes it: records in their tables' column names (the run
 *  id once, for the write), each list only when it is not empty. */
function toBatchEntry(w: RunWrite): Record<string, unknown> {
  const entry: Record<string, unknown> = { run_id: w.runId, epoch: w.epoch };
  if (w.steps?.length) entry.steps = w.steps.map((s) => stepColumns(normalizeStep(s)));
  if (w.attempts?.length) {
    entry.attempts = w.attempts.map((a) => attemptColumns(normalizeAttempt(a)));
  }
  if (w.intents?.length) entry.intents = w.intents.map((i) => intentColumns(normalizeIntent(i)));
  if (w.consume?.length) {
    entry.consume = w.consume.map((c) => ({ seq: c.eventSeq, consumed_by: c.key }));
  }
  return entry;
}

function stepColumns(s: StepRecord): Record<string, unknown> {
  return {
    key: s.key,
    generation: s.generation,
    seq: s.seq,
    name: s.name,
    kind: s.kind,
    outcome: s.outcome,
    result: s.result,
    error: s.error === null ? null : errorJson(s.error),
    spend: s.spend,
    attempt: s.attempt,
    started_at: s.startedAt,
    completed_at: s.completedAt,
    delivery: s.delivery,
    issued_after: s.issuedAfter,
    issued_late: s.issuedLate,
    reconciled: s.reconciled ?? null,
  };
}

function attemptColumns(a: AttemptRecord): Record<string, unknown> {
  return {
    key: a.key,
    generation: a.generation,
    attempt: a.attempt,
    started_at: a.startedAt,
    ended_at: a.endedAt,
    error: errorJson(a.error),
    spend: a.spend,
    retry_at: a.retryAt,
  };
}

function intentColumns(i: IntentRecord): Record<string, unknown> {
  return {
    key: i.key,
    kind: i.kind,
    name: i.name,
    data: i.data,
    created_at: i.createdAt,
  };
}

function toOutcome(o: unknown): WriteOutcome {
  const v = (o ?? {}) as { ok?: unknown; reason?: unknown; key?: unknown };
  if (v.ok === true) return { ok: true };
  if (v.reason === "lease-lost") return { ok: false, reason: "lease-lost" };
  if (v.reason === "conflict" && typeof v.key === "string") {
    return { ok: false, reason: "conflict", key: v.key };
  }
  throw new StoreError(
    `appendRecords: PostgreSQL answered the outcome ${JSON.stringify(o)?.slice(0, 200)}, ` +
      "which is none of ok, lease-lost or conflict.",
  );
}

/** A run's unconsumed events, oldest first. */
export function pendingEvents(
  ctx: StoreContext,
  runId: string,
  settled: boolean,
): Promise<EventRecord[]> {
  return unconsumed<EventRow, EventRecord>(ctx, runId, settled, "*", "pendingEvents", toEvent);
}

/** The columns of an event other than its payload (Store.pendingEventHeads). */
export const EVENT_HEAD_COLUMNS = "seq, run_id, name, created_at, consumed_by, idempotency_key";

/** A run's unconsumed events without their payloads, oldest first. */
export function pendingEventHeads(
  ctx: StoreContext,
  runId: string,
  settled: boolean,
): Promise<EventHead[]> {
  return unconsumed(ctx, runId, settled, EVENT_HEAD_COLUMNS, "pendingEventHeads", toEventHead);
}

/** pendingEventHeadsNamed's statement: run $1, name $2, seq above $3, $4 rows (an index
 *  search of events_unconsumed_by_name, migration 25). */
export function eventHeadsNamedSql(t: Tables): string {
  return `SELECT seq, created_at, idempotency_key FROM ${t.events}
    WHERE run_id = $1 AND name = $2 AND consumed_by IS NULL AND seq > $3
    ORDER BY seq LIMIT $4`;
}

/** A page of the heads of the run's unconsumed events of one name, oldest first
 *  (Store.pendingEventHeadsNamed). Prepared: an execution asks it at its first wait for a
 *  name, and again whenever it learns events may have come. */
export async function pendingEventHeadsNamed(
  ctx: StoreContext,
  runId: string,
  page: EventHeadsPage,
  settled: boolean,
): Promise<EventHead[]> {
  const sql = eventHeadsNamedSql(ctx.t);
  const params = [runId, page.name, String(page.after), page.limit];
  type Row = NamedEventHeadRow;
  const toHead = (r: Row): EventHead => toNamedEventHead(runId, page.name, r);
  const verb = "pendingEventHeadsNamed";
  if (!settled) {
    const r = await ctx.db.statement<Row>(
      verb,
      "idempotent",
      sql,
      params,
      "cairn_event_heads_named",
    );
    return r.rows.map(toHead);
  }
  return ctx.db.transaction(verb, "idempotent", async (tx) => {
    // As unconsumed (below): wait for an event write under way, then read.
    await tx.query(`SELECT 1 FROM ${ctx.t.runs} WHERE id = $1 FOR SHARE`, [runId]);
    return (await tx.query<Row>(sql, params)).rows.map(toHead);
  });
}

/** The payloads of the run's events with these seqs (Store.eventPayloads). */
export async function eventPayloads(
  ctx: StoreContext,
  runId: string,
  seqs: readonly number[],
): Promise<EventPayload[]> {
  const r = await ctx.db.statement<{ seq: string | number; payload: string }>(
    "eventPayloads",
    "idempotent",
    `SELECT seq, payload FROM ${ctx.t.events} WHERE run_id = $1 AND seq = ANY($2::bigint[])`,
    [runId, seqs.map(String)],
  );
  return r.rows.map((row) => ({ seq: Number(row.seq), payload: row.payload }));
}

async function unconsumed<R, T>(
  ctx: StoreContext,
  runId: string,
  settled: boolean,
  columns: string,
  verb: string,
  toRecord: (row: R) => T,
): Promise<T[]> {
  const sql = `SELECT ${columns} FROM ${ctx.t.events} WHERE run_id = $1 AND consumed_by IS NULL ORDER BY seq`;
  if (!settled) {
    const r = await ctx.db.statement(verb, "idempotent", sql, [runId]);
    return (r.rows as R[]).map(toRecord);
  }
  return ctx.db.transaction(verb, "idempotent", async (tx) => {
    // FOR SHARE first: an event or approval answer being written holds the run's row (FOR
    // NO KEY UPDATE, its time read after the lock), so this read waits for it to commit and
    // then sees it. A run looking once more after a wait's deadline would otherwise miss an
    // answer the store had accepted before the deadline, and record the timeout.
    await tx.query(`SELECT 1 FROM ${ctx.t.runs} WHERE id = $1 FOR SHARE`, [runId]);
    const r = await tx.query(sql, [runId]);
    return (r.rows as R[]).map(toRecord);
  });
}
