// What ctx.approval hands the workflow: built from the answer event (answerApproval stores
// it) or from the workflow's own onTimeout once the deadline passed. Pure: the context
// records the value these return.

import type { ApprovalResult } from "./context-types.js";

/** What an approval's answer event carries (encoded by the engine). */
export interface ApprovalAnswer {
  decision: "approved" | "rejected";
  by: string;
  comment: string | null;
  answer?: unknown;
  via: string;
}

/** The result of an answered approval; `answer` is the answer data as checked by the
 *  approval's schema (or as sent, without one). */
export function answeredApproval<A>(
  sent: ApprovalAnswer,
  answer: unknown,
  answeredAt: number,
): ApprovalResult<A> {
  // Field order is part of the recorded value's text: keep it.
  const result: ApprovalResult<A> = {
    approved: sent.decision === "approved",
    decision: sent.decision,
    timedOut: false,
    by: sent.by,
    at: new Date(answeredAt),
    via: sent.via,
  };
  if (sent.comment !== null) result.comment = sent.comment;
  if (answer !== undefined) result.answer = answer as A;
  return result;
}

/** The result of an approval nobody answered by its deadline: the workflow's onTimeout. */
export function timedOutApproval<A>(
  onTimeout: "approve" | "reject",
  deadline: number,
): ApprovalResult<A> {
  return {
    approved: onTimeout === "approve",
    decision: onTimeout === "approve" ? "approved" : "rejected",
    timedOut: true,
    at: new Date(deadline),
  };
}
