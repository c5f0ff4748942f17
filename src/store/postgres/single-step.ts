// The write nearly every step of a run executed alone makes (a sequential agent run: one
// step's result, nothing else in its turn) as ONE plain fenced INSERT, instead of a call of
// append_records (journal-writes.ts). On a local server that call cost about 0.1 ms of
// server time more than the INSERT (a PL/pgSQL loop over a jsonb batch, each statement of
// it started anew): a third of a durable single-row commit.
//
// The INSERT keeps append_records's semantics for such a write:
// - Fencing: it selects the run row WHERE the epoch is the writer's, FOR NO KEY UPDATE, as
//   append_records locks it; a claim that took the run over either committed first (the
//   locked row is read again as committed, the epoch differs, nothing is inserted) or waits
//   for this commit and then sees the step.
//   The lock is kept on purpose. It is the fence's only write: one Heap/LOCK WAL record
//   (54 bytes) and a dirtied runs page a step, and at most about 10 us of the server's CPU
//   of the INSERT's 220-320 (the difference of medians of 1,500-3,000 statements
//   interleaved with the same INSERT without it, four sittings on a loaded 2-core machine,
//   bench/pg-fence-cost.ts: 8.7, 10.7, 11.2 and -1.5 us); the read of the epoch costs
//   another 15-25 us against INSERT ... VALUES. A fence that writes no WAL, a shared advisory lock here and an exclusive one in
//   every path that moves the epoch, costs about as little (adv in that bench), but in one
//   statement it is taken after the statement's snapshot: a claim that committed between
//   the two would go unseen and the stale write land. Only a row lock re-reads the row as
//   committed (EvalPlanQual); the advisory lock would need a statement (a round trip) of
//   its own before the INSERT, which costs more than the lock it saves.
// - It inserts exactly one row or none, so "a write that fails lands nothing" holds without
//   a rollback. None inserted (the lease lost), or the key taken (a retry of a write whose
//   answer was lost, or a conflict: the unique violation of steps_pkey, which lands
//   nothing), and the write goes to append_records, which tells those apart (an identical
//   stored row is "ok"). A plain INSERT, not ON CONFLICT DO NOTHING: that one's speculative
//   insertion probed steps_pkey before the insert and wrote a HEAP_CONFIRM record after it,
//   20 of 48-byte WAL records per 20-step run for a conflict that a run executed once never
//   meets (pg_walinspect).
// - Only a step without spend takes it (append_records would update the run's budget), and
//   only with numbers that the columns take exactly as append_records's jsonb would.
//
// It is a named (prepared) statement, parsed and planned once per connection, so it is used
// on the store's own pool only: unprepared, planning it took more of the server's time
// (0.56 ms of CPU against 0.48 for append_records and 0.28 for the raw floor's INSERT,
// measured on one loaded 2-core machine), and a pool the caller passed in keeps its
// sessions as they were.

import { errorJson } from "../error-json.js";
import type { RunWrite, StepRecord } from "../store.js";
import { normalizeStep } from "./rows.js";
import type { StoreContext } from "./sql.js";
import { serverError } from "./sql-state.js";

/** The step of `writes` if they are one write of one step that the INSERT may take. */
export function singleStepOf(writes: RunWrite[]): StepRecord | undefined {
  if (writes.length !== 1) return undefined;
  const w = writes[0]!;
  if (w.steps?.length !== 1 || w.attempts?.length || w.intents?.length || w.consume?.length) {
    return undefined;
  }
  const s = w.steps[0]!;
  if (!Number.isSafeInteger(w.epoch) || !Number.isSafeInteger(s.generation)) return undefined;
  if (!integerOrNull(s.delivery) || !integerOrNull(s.issuedAfter)) return undefined;
  for (const _ in s.spend ?? {}) return undefined;
  return s;
}

function integerOrNull(v: number | null | undefined): boolean {
  return v === null || v === undefined || Number.isSafeInteger(v);
}

/** Inserts the step if the run is still the writer's and its key is free: true when it
 *  did, false when append_records must decide (lease lost, or the key taken). */
export async function insertSingleStep(
  ctx: StoreContext,
  epoch: number,
  step: StepRecord,
): Promise<boolean> {
  const s = normalizeStep(step);
  const r = await ctx.db
    .statement(
      "appendRecords",
      "idempotent",
      insertSql(ctx),
      [
        s.runId,
        epoch,
        s.key,
        s.generation,
        s.seq,
        s.name,
        s.kind,
        s.outcome,
        s.result,
        s.error === null ? null : errorJson(s.error),
        s.attempt,
        s.startedAt,
        s.completedAt,
        s.delivery,
        s.issuedAfter,
        s.issuedLate,
        s.reconciled ?? null,
      ],
      "cairn_insert_single_step",
    )
    .catch((err: unknown) => {
      if (keyTaken(err)) return undefined;
      throw err;
    });
  return r?.rowCount === 1;
}

/** Whether `err` (or its cause) is the unique violation of the steps' primary key. */
function keyTaken(err: unknown): boolean {
  const e = serverError(err);
  return e?.code === "23505" && e.constraint === "steps_pkey";
}

const texts = new WeakMap<StoreContext["t"], string>();

function insertSql(ctx: StoreContext): string {
  const { t } = ctx;
  let sql = texts.get(t);
  if (sql === undefined) {
    sql = `INSERT INTO ${t.steps} (run_id, key, generation, seq, name, kind, outcome, result,
        error, attempt, started_at, completed_at, delivery, issued_after, issued_late,
        reconciled)
      SELECT r.id, $3::text, $4::integer, $5::integer, $6::text, $7::text, $8::text, $9::text,
          $10::text, $11::integer, $12::bigint, $13::bigint, $14::integer, $15::integer,
          $16::boolean, $17::boolean
        FROM ${t.runs} r WHERE r.id = $1::text AND r.epoch = $2::bigint FOR NO KEY UPDATE`;
    texts.set(t, sql);
  }
  return sql;
}
