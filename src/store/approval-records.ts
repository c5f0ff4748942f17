// The store verbs behind typed approvals (ctx.approval).
//
// An approval is asked for by a run (requestApproval, fenced by the run's epoch, once per
// call key) and answered once (answerApproval): the answer and the event that wakes the
// run are written in one transaction, and only while the approval is pending, its
// deadline has not passed and its run has not finished. A second answer, whoever sends
// it and however (CLI, API, a signed link), finds the approval decided and changes
// nothing: that is what makes an approval link single-use.
//
// The store keeps no workflow semantics: the engine names the event and encodes payloads.
// Both backends read the approvals row through approvalFromRow (below).

export type ApprovalDecision = "approved" | "rejected";

export interface ApprovalRecord {
  runId: string;
  /** The call's key in the run's journal ("review", "review#2", ...). */
  key: string;
  name: string;
  /** Encoded (codec) request: what the run asks to have approved. */
  request: string;
  requestedAt: number;
  /** When the approval times out (ms), or null for never. */
  deadline: number | null;
  /** The decision the workflow takes when the deadline passes. */
  onTimeout: "approve" | "reject";
  status: "pending" | ApprovalDecision;
  answeredAt: number | null;
  /** Who answered, as the answering client stated it. */
  answeredBy: string | null;
  comment: string | null;
  /** Encoded (codec) structured answer, if one was given. */
  answer: string | null;
  /** How it was answered: "cli", "api", "link", "engine", ... */
  via: string | null;
  /** The id of the approval link used, if the answer came through one. */
  tokenId: string | null;
}

export type RequestApprovalOutcome =
  | { ok: true; approval: ApprovalRecord; created: boolean }
  | { ok: false; reason: "lease-lost" };

export type AnswerApprovalOutcome =
  | { ok: true; approval: ApprovalRecord }
  | { ok: false; reason: "not-found" }
  /** The approval was decided before (by anyone, through anything): nothing changed. */
  | { ok: false; reason: "decided"; approval: ApprovalRecord }
  /** Its deadline has passed: the run takes its onTimeout decision. */
  | { ok: false; reason: "expired"; approval: ApprovalRecord }
  /** The run has finished (completed, failed, canceled). */
  | { ok: false; reason: "finished"; status: string; approval: ApprovalRecord }
  /** The answer was for another asking (`asking`) than the one the approval is at. */
  | { ok: false; reason: "other-asking"; asking: number; approval: ApprovalRecord }
  /** The run under the id is not the one the answer was for (`runCreatedAt`): that one was
   *  deleted, and another started under its id. */
  | { ok: false; reason: "other-run" };

export interface ApprovalVerbs {
  /** Stores a pending approval for (runId, key) unless one exists (then nothing changes and
   *  created is false), fenced by `epoch`. */
  requestApproval(p: {
    runId: string;
    epoch: number;
    key: string;
    name: string;
    request: string;
    requestedAt: number;
    deadline: number | null;
    onTimeout: "approve" | "reject";
    /** The call executes again after a resume replaced the failure it ended with (an answer
     *  its schema refused): a decided approval whose answer was consumed is asked again
     *  (pending, its answer cleared, with this request's requestedAt and deadline). Without
     *  it, a decided approval stays as it is. */
    reopen?: boolean;
  }): Promise<RequestApprovalOutcome>;

  /** Answers a pending approval, in one transaction: records the decision with the store's
   *  now as answeredAt, and stores `event` for the run (waking it, as sendEvent does).
   *  Refused, with nothing changed, unless the approval is pending, the store's now is
   *  before its deadline, and the run has not finished (and, given `asking`, the approval is
   *  at that asking). An earlier try of the same call whose commit was lost is recognized
   *  (same decision, answeredBy, via and tokenId). */
  answerApproval(p: {
    runId: string;
    key: string;
    decision: ApprovalDecision;
    answeredBy: string;
    comment: string | null;
    answer: string | null;
    via: string;
    tokenId: string | null;
    event: { name: string; payload: string };
    /** Answer only this asking of the approval (askingOf: an approval link answers only the
     *  asking it was made for); absent, whichever asking is pending. */
    asking?: number;
    /** Answer only the run created at this time (whole ms): an approval link answers only
     *  the run it was made for, not one started later under its id. */
    runCreatedAt?: number;
  }): Promise<AnswerApprovalOutcome>;

  /** A run's approvals, in the order they were requested. */
  listApprovals(runId: string): Promise<ApprovalRecord[]>;
}

/** An approvals row as both backends store it (PostgreSQL's driver hands bigints over as
 *  text), and the record it reads as. */
export interface ApprovalRow {
  run_id: string;
  key: string;
  name: string;
  request: string;
  requested_at: string | number;
  deadline: string | number | null;
  on_timeout: "approve" | "reject";
  status: ApprovalRecord["status"];
  answered_at: string | number | null;
  answered_by: string | null;
  comment: string | null;
  answer: string | null;
  via: string | null;
  token_id: string | null;
}

/** Which asking of approval `key` a run is at: how many times the call's error (such as an
 *  answer its schema refused) failed the run. A resume of such a failure asks it anew
 *  (requestApproval with reopen), so each asking has its own number. */
export function askingOf(failedCalls: ReadonlyArray<{ key: string }>, key: string): number {
  let n = 0;
  for (const f of failedCalls) if (f.key === key) n++;
  return n;
}

const numOrNull = (v: string | number | null) => (v === null ? null : Number(v));

export function approvalFromRow(r: ApprovalRow): ApprovalRecord {
  return {
    runId: r.run_id,
    key: r.key,
    name: r.name,
    request: r.request,
    requestedAt: Number(r.requested_at),
    deadline: numOrNull(r.deadline),
    onTimeout: r.on_timeout,
    status: r.status,
    answeredAt: numOrNull(r.answered_at),
    answeredBy: r.answered_by,
    comment: r.comment,
    answer: r.answer,
    via: r.via,
    tokenId: r.token_id,
  };
}
