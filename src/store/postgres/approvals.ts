// Approvals on PostgreSQL (see ../approval-records.ts). Answering locks the run row first
// (as sendEvent does, so the event is ordered with the run's other events and a release to
// waiting cannot miss it), then the approval row; the decision, its time and the event's
// time are ONE reading of the store's now, so an answer accepted before the deadline is an
// event stored before the deadline, which the waiting run counts.

import {
  type AnswerApprovalOutcome,
  type ApprovalRecord,
  type ApprovalRow,
  type ApprovalVerbs,
  approvalFromRow,
  askingOf,
  type RequestApprovalOutcome,
} from "../approval-records.js";
import { type RunStatus, type StoreHint, TERMINAL_STATUSES } from "../store.js";
import { Rollback } from "./connection.js";
import { featureTables } from "./feature-tables.js";
import { nowSql, publish, type StoreContext } from "./sql.js";

const COLUMNS =
  "run_id, key, name, request, requested_at, deadline, on_timeout, status, answered_at, " +
  "answered_by, comment, answer, via, token_id";

export function requestApproval(
  ctx: StoreContext,
  p: Parameters<ApprovalVerbs["requestApproval"]>[0],
): Promise<RequestApprovalOutcome> {
  const f = featureTables(ctx.t);
  return ctx.db.transaction("requestApproval", "idempotent", async (tx) => {
    const run = await tx.query<{ epoch: string }>(
      `SELECT epoch FROM ${ctx.t.runs} WHERE id = $1 FOR SHARE`,
      [p.runId],
    );
    const epoch = run.rows[0]?.epoch;
    if (epoch === undefined || Number(epoch) !== p.epoch) {
      throw new Rollback<RequestApprovalOutcome>({ ok: false, reason: "lease-lost" });
    }
    const ins = await tx.query<ApprovalRow>(
      `INSERT INTO ${f.approvals} (run_id, key, name, request, requested_at, deadline,
          on_timeout, status)
        VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending')
        ON CONFLICT (run_id, key) DO NOTHING
        RETURNING ${COLUMNS}`,
      [p.runId, p.key, p.name, p.request, p.requestedAt, p.deadline, p.onTimeout],
    );
    const created = ins.rows[0];
    // A row this insert returned is this try's: an earlier try that committed would have
    // made it conflict instead.
    if (created) return { ok: true, approval: approvalFromRow(created), created: true };
    if (p.reopen) {
      // Asked again only once its answer was consumed (see the SQLite store).
      const reopened = await tx.query<ApprovalRow>(
        `UPDATE ${f.approvals} SET status = 'pending', answered_at = NULL, answered_by = NULL,
            comment = NULL, answer = NULL, via = NULL, token_id = NULL, requested_at = $4,
            deadline = $5
          WHERE run_id = $1 AND key = $2 AND status <> 'pending'
            AND NOT EXISTS (SELECT 1 FROM ${ctx.t.events} WHERE run_id = $1 AND name = $3
                              AND consumed_by IS NULL)
          RETURNING ${COLUMNS}`,
        [p.runId, p.key, `cairn.approval:${p.key}`, p.requestedAt, p.deadline],
      );
      const row = reopened.rows[0];
      if (row) return { ok: true, approval: approvalFromRow(row), created: false };
    }
    const existing = await tx.query<ApprovalRow>(
      `SELECT ${COLUMNS} FROM ${f.approvals} WHERE run_id = $1 AND key = $2`,
      [p.runId, p.key],
    );
    const row = existing.rows[0];
    if (!row) throw new Error(`approval "${p.key}" of run "${p.runId}" vanished mid-write`);
    return { ok: true, approval: approvalFromRow(row), created: false };
  });
}

export function answerApproval(
  ctx: StoreContext,
  p: Parameters<ApprovalVerbs["answerApproval"]>[0],
): Promise<AnswerApprovalOutcome> {
  const f = featureTables(ctx.t);
  const { t } = ctx;
  return ctx.db.transaction("answerApproval", "idempotent", async (tx) => {
    const runRows = await tx.query<{
      status: string;
      waiting_for: string[] | null;
      failed_calls: Array<{ key: string }> | null;
      created_at: string;
    }>(
      `SELECT r.status, r.waiting_for, r.failed_calls, r.created_at
         FROM ${t.runs} r
        WHERE r.id = $1 FOR NO KEY UPDATE OF r`,
      [p.runId],
    );
    const run = runRows.rows[0];
    // Now is read once the run's row is ours: read in the locking statement, it was the
    // time before a wait for the lock, and an answer that waited past the deadline was
    // accepted while the run recorded the timeout.
    const nowRows = await tx.query<{ now: string }>(`SELECT ${nowSql(1)} AS now`, [
      ctx.clockParam(),
    ]);
    const rows = await tx.query<ApprovalRow>(
      `SELECT ${COLUMNS} FROM ${f.approvals} WHERE run_id = $1 AND key = $2 FOR UPDATE`,
      [p.runId, p.key],
    );
    const row = rows.rows[0];
    if (!row || !run) return { ok: false, reason: "not-found" };
    if (p.runCreatedAt !== undefined && Math.floor(Number(run.created_at)) !== p.runCreatedAt) {
      return { ok: false, reason: "other-run" };
    }
    const approval = approvalFromRow(row);
    if (row.status !== "pending") {
      const ours =
        tx.mayHaveCommitted &&
        row.status === p.decision &&
        row.answered_by === p.answeredBy &&
        row.via === p.via &&
        row.token_id === p.tokenId;
      return ours ? { ok: true, approval } : { ok: false, reason: "decided", approval };
    }
    const status = run.status as RunStatus;
    if (TERMINAL_STATUSES.has(status)) return { ok: false, reason: "finished", status, approval };
    const now = Number(nowRows.rows[0]!.now);
    if (approval.deadline !== null && now >= approval.deadline) {
      return { ok: false, reason: "expired", approval };
    }
    const asking = askingOf(run.failed_calls ?? [], p.key);
    if (p.asking !== undefined && p.asking !== asking) {
      return { ok: false, reason: "other-asking", asking, approval };
    }
    const updated = await tx.query<ApprovalRow>(
      `UPDATE ${f.approvals} SET status = $3, answered_at = $4, answered_by = $5, comment = $6,
          answer = $7, via = $8, token_id = $9
        WHERE run_id = $1 AND key = $2
        RETURNING ${COLUMNS}`,
      [p.runId, p.key, p.decision, now, p.answeredBy, p.comment, p.answer, p.via, p.tokenId],
    );
    await tx.query(
      `INSERT INTO ${t.events} (run_id, name, payload, created_at) VALUES ($1, $2, $3, $4)`,
      [p.runId, p.event.name, p.event.payload, now],
    );
    const hints: StoreHint[] = [];
    if (status === "waiting" && (run.waiting_for ?? []).includes(p.event.name)) {
      await tx.query(
        `UPDATE ${t.runs} SET ready_at = CASE WHEN ready_at IS NOT NULL AND ready_at <= $2
            THEN ready_at ELSE $2 END, updated_at = $2
          WHERE id = $1`,
        [p.runId, now],
      );
      hints.push({ kind: "runnable", runId: p.runId });
    }
    await publish(tx, ctx.channel, hints);
    const answered = updated.rows[0];
    if (!answered) throw new Error(`approval "${p.key}" of run "${p.runId}" vanished mid-write`);
    return { ok: true, approval: approvalFromRow(answered) };
  });
}

export async function listApprovals(ctx: StoreContext, runId: string): Promise<ApprovalRecord[]> {
  const f = featureTables(ctx.t);
  const r = await ctx.db.statement<ApprovalRow>(
    "listApprovals",
    "idempotent",
    `SELECT ${COLUMNS} FROM ${f.approvals} WHERE run_id = $1 ORDER BY seq`,
    [runId],
  );
  return r.rows.map(approvalFromRow);
}
