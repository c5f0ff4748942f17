// The journal on PostgreSQL: the group commit (appendRecords) and the one-query read
// (loadJournal). The journal is the durable truth, so this is where fencing and
// idempotency live.
//
// - Fencing (invariant 3, failure-modes.md row 2): each RunWrite first locks its run row
//   and compares the epoch, in the same transaction as its inserts. A claim increments the
//   epoch under the same row lock, so a zombie's write either commits before the claim or
//   finds the new epoch and lands nothing.
// - Isolation between writes: one transaction for the batch, a SAVEPOINT per RunWrite, so a
//   conflict or a lost lease undoes only that run's share.
// - Idempotency (row 9): inserts are ON CONFLICT DO NOTHING; a record that was not inserted
//   is compared with the row already there: identical is a no-op (ok), different is a
//   conflict. Spend is added only for rows actually inserted, and consuming an event that
//   the same key already consumed is ok. So a whole batch may be retried after a lost
//   COMMIT and lands exactly once.

import { StoreError } from "../../errors.js";
import { addAmounts } from "../../lib/amounts.js";
import type {
  Amounts,
  AttemptRecord,
  IntentRecord,
  Journal,
  RunWrite,
  StepRecord,
  WriteOutcome,
} from "../store.js";
import { Rollback, type Tx } from "./connection.js";
import {
  type AttemptRow,
  type EventRow,
  type IntentRow,
  normalizeAttempt,
  normalizeIntent,
  normalizeStep,
  type StepRow,
  sameRecord,
  toAttempt,
  toEvent,
  toIntent,
  toStep,
} from "./rows.js";
import { nowSql, type StoreContext, type Tables } from "./sql.js";

export async function appendRecords(
  ctx: StoreContext,
  writes: RunWrite[],
): Promise<WriteOutcome[]> {
  if (writes.length === 0) return [];
  for (const w of writes) checkRunIds(w);
  const multi = writes.length > 1;
  return ctx.db.transaction("appendRecords", "idempotent", async (tx) => {
    const outcomes: WriteOutcome[] = [];
    for (const w of writes) {
      if (multi) await tx.query("SAVEPOINT run_write");
      const outcome = await applyWrite(tx, ctx, w);
      if (multi) {
        await tx.query(
          outcome.ok
            ? "RELEASE SAVEPOINT run_write"
            : "ROLLBACK TO SAVEPOINT run_write; RELEASE SAVEPOINT run_write",
        );
      } else if (!outcome.ok) {
        throw new Rollback([outcome]);
      }
      outcomes.push(outcome);
    }
    return outcomes;
  });
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

async function applyWrite(tx: Tx, ctx: StoreContext, w: RunWrite): Promise<WriteOutcome> {
  const { t } = ctx;
  // FOR NO KEY UPDATE: conflicts with a claim, a release and other writers of this run, but
  // not with the FOR KEY SHARE our own foreign-key checks take.
  const fence = await tx.query<{ epoch: string; budget_spent: Amounts }>(
    `SELECT epoch, budget_spent FROM ${t.runs} WHERE id = $1 FOR NO KEY UPDATE`,
    [w.runId],
  );
  const run = fence.rows[0];
  if (!run || Number(run.epoch) !== w.epoch) return { ok: false, reason: "lease-lost" };

  let spent: Amounts = {};
  const steps = await insertSteps(tx, t, w.runId, (w.steps ?? []).map(normalizeStep));
  if (!steps.ok) return steps.outcome;
  for (const s of steps.inserted) spent = addAmounts(spent, s.spend);

  const attempts = await insertAttempts(tx, t, w.runId, (w.attempts ?? []).map(normalizeAttempt));
  if (!attempts.ok) return attempts.outcome;
  for (const a of attempts.inserted) spent = addAmounts(spent, a.spend);

  const intents = await insertIntents(tx, t, w.runId, (w.intents ?? []).map(normalizeIntent));
  if (!intents.ok) return intents.outcome;

  const consumed = await consumeEvents(tx, t, w.runId, w.consume ?? []);
  if (!consumed.ok) return consumed;

  if (Object.keys(spent).length > 0) {
    await tx.query(
      `UPDATE ${t.runs} SET budget_spent = $2::jsonb, updated_at = ${nowSql(3)} WHERE id = $1`,
      [w.runId, JSON.stringify(addAmounts(run.budget_spent ?? {}, spent)), ctx.clockParam()],
    );
  }
  return { ok: true };
}

type InsertResult<T> =
  | { ok: true; inserted: T[] }
  | { ok: false; outcome: { ok: false; reason: "conflict"; key: string } };

/**
 * Inserts `records` with ON CONFLICT DO NOTHING and sorts them into the rows this statement
 * inserted and the ones that met an existing row, which must be identical.
 * `identity` is the unique key; `returned` names the RETURNING identity of each new row.
 */
async function insertOrCompare<T extends { key: string }>(
  records: T[],
  identity: (r: T) => string,
  insert: () => Promise<string[]>,
  readExisting: () => Promise<T[]>,
): Promise<InsertResult<T>> {
  if (records.length === 0) return { ok: true, inserted: [] };
  const newIds = new Set(await insert());
  const inserted: T[] = [];
  const rest: T[] = [];
  for (const r of records) {
    const id = identity(r);
    // The first record of a key in the batch is the one inserted; repeats compare with it.
    if (newIds.delete(id)) inserted.push(r);
    else rest.push(r);
  }
  if (rest.length > 0) {
    const existing = new Map((await readExisting()).map((r) => [identity(r), r]));
    for (const r of rest) {
      const row = existing.get(identity(r));
      if (!row || !sameRecord(row, r)) {
        return { ok: false, outcome: { ok: false, reason: "conflict", key: r.key } };
      }
    }
  }
  return { ok: true, inserted };
}

function insertSteps(
  tx: Tx,
  t: Tables,
  runId: string,
  steps: StepRecord[],
): Promise<InsertResult<StepRecord>> {
  return insertOrCompare(
    steps,
    (s) => s.key,
    async () => {
      const rows = steps.map((s) => ({
        run_id: runId,
        key: s.key,
        seq: s.seq,
        name: s.name,
        kind: s.kind,
        outcome: s.outcome,
        result: s.result,
        error: s.error,
        spend: s.spend,
        attempt: s.attempt,
        started_at: s.startedAt,
        completed_at: s.completedAt,
      }));
      const r = await tx.query<{ key: string }>(
        `INSERT INTO ${t.steps} (run_id, key, seq, name, kind, outcome, result, error, spend,
            attempt, started_at, completed_at)
          SELECT run_id, key, seq, name, kind, outcome, result, error, spend,
            attempt, started_at, completed_at
          FROM jsonb_to_recordset($1::jsonb) AS x(run_id text, key text, seq integer,
            name text, kind text, outcome text, result text, error jsonb, spend jsonb,
            attempt integer, started_at bigint, completed_at bigint)
          ON CONFLICT (run_id, key) DO NOTHING
          RETURNING key`,
        [JSON.stringify(rows)],
      );
      return r.rows.map((row) => row.key);
    },
    async () => {
      const r = await tx.query<StepRow>(
        `SELECT * FROM ${t.steps} WHERE run_id = $1 AND key = ANY($2::text[])`,
        [runId, steps.map((s) => s.key)],
      );
      return r.rows.map(toStep);
    },
  );
}

function attemptId(a: { key: string; generation: number; attempt: number }): string {
  return JSON.stringify([a.key, a.generation, a.attempt]);
}

function insertAttempts(
  tx: Tx,
  t: Tables,
  runId: string,
  attempts: AttemptRecord[],
): Promise<InsertResult<AttemptRecord>> {
  return insertOrCompare(
    attempts,
    attemptId,
    async () => {
      const rows = attempts.map((a) => ({
        run_id: runId,
        key: a.key,
        generation: a.generation,
        attempt: a.attempt,
        started_at: a.startedAt,
        ended_at: a.endedAt,
        error: a.error,
        spend: a.spend,
        retry_at: a.retryAt,
      }));
      const r = await tx.query<{ key: string; generation: number; attempt: number }>(
        `INSERT INTO ${t.attempts} (run_id, key, generation, attempt, started_at, ended_at,
            error, spend, retry_at)
          SELECT run_id, key, generation, attempt, started_at, ended_at, error, spend, retry_at
          FROM jsonb_to_recordset($1::jsonb) AS x(run_id text, key text, generation integer,
            attempt integer, started_at bigint, ended_at bigint, error jsonb, spend jsonb,
            retry_at bigint)
          ON CONFLICT (run_id, key, generation, attempt) DO NOTHING
          RETURNING key, generation, attempt`,
        [JSON.stringify(rows)],
      );
      return r.rows.map(attemptId);
    },
    async () => {
      const r = await tx.query<AttemptRow>(
        `SELECT * FROM ${t.attempts} WHERE run_id = $1 AND key = ANY($2::text[])`,
        [runId, attempts.map((a) => a.key)],
      );
      return r.rows.map(toAttempt);
    },
  );
}

function insertIntents(
  tx: Tx,
  t: Tables,
  runId: string,
  intents: IntentRecord[],
): Promise<InsertResult<IntentRecord>> {
  return insertOrCompare(
    intents,
    (i) => i.key,
    async () => {
      const rows = intents.map((i) => ({
        run_id: runId,
        key: i.key,
        kind: i.kind,
        name: i.name,
        data: i.data,
        created_at: i.createdAt,
      }));
      const r = await tx.query<{ key: string }>(
        `INSERT INTO ${t.intents} (run_id, key, kind, name, data, created_at)
          SELECT run_id, key, kind, name, data, created_at
          FROM jsonb_to_recordset($1::jsonb) AS x(run_id text, key text, kind text, name text,
            data text, created_at bigint)
          ON CONFLICT (run_id, key) DO NOTHING
          RETURNING key`,
        [JSON.stringify(rows)],
      );
      return r.rows.map((row) => row.key);
    },
    async () => {
      const r = await tx.query<IntentRow>(
        `SELECT * FROM ${t.intents} WHERE run_id = $1 AND key = ANY($2::text[])`,
        [runId, intents.map((i) => i.key)],
      );
      return r.rows.map(toIntent);
    },
  );
}

/** Each event must be this run's and unconsumed, or already consumed by the same key (a
 *  retried write); anything else is a conflict on the consuming wait's key. */
async function consumeEvents(
  tx: Tx,
  t: Tables,
  runId: string,
  consume: Array<{ eventSeq: number; key: string }>,
): Promise<WriteOutcome> {
  if (consume.length === 0) return { ok: true };
  await tx.query(
    `UPDATE ${t.events} e SET consumed_by = u.key
      FROM unnest($2::bigint[], $3::text[]) AS u(seq, key)
      WHERE e.seq = u.seq AND e.run_id = $1 AND e.consumed_by IS NULL`,
    [runId, consume.map((c) => c.eventSeq), consume.map((c) => c.key)],
  );
  const after = await tx.query<{ seq: string; consumed_by: string | null }>(
    `SELECT seq, consumed_by FROM ${t.events} WHERE run_id = $1 AND seq = ANY($2::bigint[])`,
    [runId, consume.map((c) => c.eventSeq)],
  );
  const consumedBy = new Map(after.rows.map((r) => [Number(r.seq), r.consumed_by]));
  for (const c of consume) {
    if (consumedBy.get(c.eventSeq) !== c.key) return { ok: false, reason: "conflict", key: c.key };
  }
  return { ok: true };
}

/** Everything replay needs, in ONE statement (one snapshot, one round trip). */
export async function loadJournal(ctx: StoreContext, runId: string): Promise<Journal> {
  const { t } = ctx;
  const r = await ctx.db.statement<{
    steps: StepRow[];
    attempts: AttemptRow[];
    intents: IntentRow[];
    events: EventRow[];
  }>(
    "loadJournal",
    "idempotent",
    `SELECT
      (SELECT coalesce(json_agg(s ORDER BY s.seq, s.key), '[]'::json)
        FROM ${t.steps} s WHERE s.run_id = $1) AS steps,
      (SELECT coalesce(json_agg(a ORDER BY a.generation, a.started_at, a.key, a.attempt), '[]'::json)
        FROM ${t.attempts} a WHERE a.run_id = $1) AS attempts,
      (SELECT coalesce(json_agg(i ORDER BY i.created_at, i.key), '[]'::json)
        FROM ${t.intents} i WHERE i.run_id = $1) AS intents,
      (SELECT coalesce(json_agg(e ORDER BY e.seq), '[]'::json)
        FROM ${t.events} e WHERE e.run_id = $1 AND e.consumed_by IS NULL) AS events`,
    [runId],
  );
  const row = r.rows[0];
  return {
    steps: (row?.steps ?? []).map(toStep),
    attempts: (row?.attempts ?? []).map(toAttempt),
    intents: (row?.intents ?? []).map(toIntent),
    events: (row?.events ?? []).map(toEvent),
  };
}
