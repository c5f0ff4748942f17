// Approvals on SQLite (see ../approval-records.ts). Each verb is one transaction;
// answering writes the decision and the run's wake-up event together.

import {
  type AnswerApprovalOutcome,
  type ApprovalRecord,
  type ApprovalRow,
  type ApprovalVerbs,
  approvalFromRow,
  askingOf,
  type RequestApprovalOutcome,
} from "../approval-records.js";
import { TERMINAL_STATUSES } from "../store.js";
import { findRow, type Prepare, type StoreContext, storeEvent } from "./sql.js";

function find(prepare: Prepare, runId: string, key: string): ApprovalRow | undefined {
  return prepare("SELECT * FROM approvals WHERE run_id = ? AND key = ?").get(runId, key) as
    | ApprovalRow
    | undefined;
}

export function requestApproval(
  ctx: StoreContext,
  p: Parameters<ApprovalVerbs["requestApproval"]>[0],
): Promise<RequestApprovalOutcome> {
  return ctx.write("requestApproval", ({ prepare }): RequestApprovalOutcome => {
    const run = prepare("SELECT epoch FROM runs WHERE id = ?").get(p.runId) as
      | { epoch: number }
      | undefined;
    if (!run || run.epoch !== p.epoch) return { ok: false, reason: "lease-lost" };
    const inserted = prepare(
      `INSERT INTO approvals (run_id, key, name, request, requested_at, deadline, on_timeout,
       status) VALUES (?, ?, ?, ?, ?, ?, ?, 'pending')
     ON CONFLICT (run_id, key) DO NOTHING`,
    ).run(p.runId, p.key, p.name, p.request, p.requestedAt, p.deadline, p.onTimeout);
    if (p.reopen && inserted.changes === 0) {
      // Asked again only once its answer was consumed: an answer given since (its event
      // still unconsumed) is not wiped by a repeat of this request after a crash.
      // The new asking's time and deadline are the ones its first request gives.
      prepare(
        `UPDATE approvals SET status = 'pending', answered_at = NULL, answered_by = NULL,
           comment = NULL, answer = NULL, via = NULL, token_id = NULL, requested_at = ?,
           deadline = ?
         WHERE run_id = ? AND key = ? AND status <> 'pending'
           AND NOT EXISTS (SELECT 1 FROM events WHERE run_id = ? AND name = ?
                             AND consumed_by IS NULL)`,
      ).run(p.requestedAt, p.deadline, p.runId, p.key, p.runId, `cairn.approval:${p.key}`);
    }
    const row = find(prepare, p.runId, p.key);
    if (!row) throw new Error(`approval "${p.key}" of run "${p.runId}" vanished mid-write`);
    return { ok: true, approval: approvalFromRow(row), created: inserted.changes === 1 };
  });
}

export function answerApproval(
  ctx: StoreContext,
  p: Parameters<ApprovalVerbs["answerApproval"]>[0],
): Promise<AnswerApprovalOutcome> {
  return ctx.write("answerApproval", (tx): AnswerApprovalOutcome => {
    const { prepare, now } = tx;
    const run = findRow(tx, p.runId);
    const row = find(prepare, p.runId, p.key);
    if (!row || !run) return { ok: false, reason: "not-found" };
    if (p.runCreatedAt !== undefined && Math.floor(run.created_at) !== p.runCreatedAt) {
      return { ok: false, reason: "other-run" };
    }
    const approval = approvalFromRow(row);
    if (row.status !== "pending") return { ok: false, reason: "decided", approval };
    if (TERMINAL_STATUSES.has(run.status)) {
      return { ok: false, reason: "finished", status: run.status, approval };
    }
    if (approval.deadline !== null && now >= approval.deadline) {
      return { ok: false, reason: "expired", approval };
    }
    const asking = askingOf(JSON.parse(run.failed_calls) as Array<{ key: string }>, p.key);
    if (p.asking !== undefined && p.asking !== asking) {
      return { ok: false, reason: "other-asking", asking, approval };
    }
    prepare(
      `UPDATE approvals SET status = ?, answered_at = ?, answered_by = ?, comment = ?, answer = ?,
       via = ?, token_id = ?
     WHERE run_id = ? AND key = ?`,
    ).run(p.decision, now, p.answeredBy, p.comment, p.answer, p.via, p.tokenId, p.runId, p.key);
    storeEvent(tx, { runId: p.runId, name: p.event.name, payload: p.event.payload });
    return { ok: true, approval: approvalFromRow(find(prepare, p.runId, p.key)!) };
  });
}

export function listApprovals(ctx: StoreContext, runId: string): Promise<ApprovalRecord[]> {
  return ctx.read("listApprovals", ({ prepare }) =>
    (
      prepare("SELECT * FROM approvals WHERE run_id = ? ORDER BY id").all(runId) as ApprovalRow[]
    ).map(approvalFromRow),
  );
}
