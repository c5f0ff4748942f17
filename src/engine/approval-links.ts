// Approval links as the engine offers them: making a link's token (and both links as URLs
// of the dashboard's confirmation page), showing what a link would do, and answering with
// one. Signing and verifying are approval-tokens.ts; the answer is approval-answer.ts.

import { ApprovalNotFoundError, RunConflictError, RunNotFoundError } from "../errors.js";
import { type Duration, toMs } from "../lib/duration.js";
import { quoteGiven } from "../lib/text.js";
import { askingOf } from "../store/approval-records.js";
import { type RunRecord, TERMINAL_STATUSES } from "../store/store.js";
import {
  answerApproval,
  checkAnswerText,
  earlierAskingError,
  earlierRunError,
} from "./approval-answer.js";
import { approvalKeyFor, loadApprovals } from "./approval-lookup.js";
import {
  type ApprovalClaims,
  createApprovalToken,
  verifyApprovalToken,
} from "./approval-tokens.js";
import type { ApprovalLinkInfo, ApprovalLinks, ApprovalsDeps, ApprovalView } from "./approvals.js";

const DEFAULT_LINK_LIFETIME = "7d";
const MIN_LINK_LIFETIME_MS = 1_000;

/** A token that answers approval `name` of `runId` one way. */
export async function approvalToken(
  deps: ApprovalsDeps,
  runId: string,
  name: string,
  decision: "approve" | "reject",
  options: { expiresIn?: Duration; by?: string },
): Promise<string> {
  await deps.ready();
  if (decision !== "approve" && decision !== "reject") {
    throw new TypeError('approvalToken(): decision must be "approve" or "reject"');
  }
  const lifetime = toMs(options.expiresIn ?? DEFAULT_LINK_LIFETIME, "approval link expiresIn");
  // A link that has expired by the time it is sent answers nothing: refused here by name, not
  // handed out (approvalToken) or refused as "This approval link expired" (approvalLinks).
  if (lifetime < MIN_LINK_LIFETIME_MS) {
    throw new TypeError(
      `approval link expiresIn must be at least 1s, e.g. "30m" or "2d" (got ${lifetime} ms)`,
    );
  }
  const key = await approvalKeyFor(deps.store, runId, name);
  const run = await deps.store.getRun(runId);
  await refuseNotPending(deps, runId, key, run);
  return createApprovalToken(deps.approvalKeys, {
    runId,
    key,
    ...(run ? { runCreatedAt: run.createdAt, asking: askingOf(run.failedCalls, key) } : {}),
    decision,
    expiresAt: deps.clock.now() + lifetime,
    ...(options.by !== undefined ? { by: checkAnswerText(options.by, "by", 200) } : {}),
  });
}

/** A link to an approval that is not pending would answer nothing: one answered, timed out
 *  or closed (its run ended), or, not asked yet, of a run that has ended (nothing will ask
 *  it). Refused naming the run, the approval and its state, as `cairn approval-link` says
 *  it; a link to an approval its unfinished run has not asked for yet is made (the first
 *  call of that name will have it). */
async function refuseNotPending(
  deps: ApprovalsDeps,
  runId: string,
  key: string,
  run: RunRecord | undefined,
): Promise<void> {
  const { views } = await loadApprovals(deps.store, runId);
  const approval = views.find((a) => a.key === key);
  const what = `Approval ${quoteGiven(key)} of run ${quoteGiven(runId)}`;
  const none = "a link to it would answer nothing, so none was made";
  if (!approval) {
    if (run && TERMINAL_STATUSES.has(run.status)) {
      throw new RunConflictError(
        `${what} was never asked, and the run has ended (${run.status}); ${none}`,
      );
    }
    return;
  }
  if (approval.status === "pending") return;
  const iso = (d: Date | undefined) => (d ? ` at ${d.toISOString()}` : "");
  const state =
    approval.status === "approved" || approval.status === "rejected"
      ? `was already ${approval.status}${approval.answeredBy !== undefined ? ` by ${quoteGiven(approval.answeredBy)}` : ""}${iso(approval.answeredAt)}`
      : approval.status === "timed-out"
        ? `timed out${iso(approval.deadline)} (the run took its onTimeout decision)`
        : "was closed: its run finished without an answer";
  throw new RunConflictError(`${what} ${state}; ${none}`);
}

/** Both links, as URLs of the dashboard's confirmation page under `baseUrl`. */
export async function approvalLinks(
  deps: ApprovalsDeps,
  runId: string,
  name: string,
  options: { baseUrl: string; expiresIn?: Duration; by?: string },
): Promise<ApprovalLinks> {
  const base = options.baseUrl.replace(/\/+$/, "");
  if (!/^https?:\/\/[^\s]+$/i.test(base)) {
    throw new TypeError(
      `approvalLinks(): baseUrl must be an http(s) URL (got "${options.baseUrl}")`,
    );
  }
  const tokenOptions = {
    ...(options.expiresIn !== undefined ? { expiresIn: options.expiresIn } : {}),
    ...(options.by !== undefined ? { by: options.by } : {}),
  };
  const approve = await approvalToken(deps, runId, name, "approve", tokenOptions);
  const reject = await approvalToken(deps, runId, name, "reject", tokenOptions);
  const { expiresAt } = verify(deps, approve);
  return {
    approve: `${base}/approvals/${approve}`,
    reject: `${base}/approvals/${reject}`,
    expiresAt: new Date(expiresAt),
  };
}

/** What a link would do (its decision, its expiry, the approval), without answering. */
export async function inspectApprovalLink(
  deps: ApprovalsDeps,
  token: string,
): Promise<ApprovalLinkInfo> {
  await deps.ready();
  const claims = verify(deps, token);
  await checkSameAsking(deps, claims);
  const approval = await linkedApproval(deps, claims);
  const info: ApprovalLinkInfo = {
    decision: claims.decision,
    expiresAt: new Date(claims.expiresAt),
    approval,
  };
  if (claims.by !== undefined) info.by = claims.by;
  return info;
}

/** Answers with a link's token: its decision, recorded as given by its `by`. */
export async function answerApprovalLink(
  deps: ApprovalsDeps,
  token: string,
  options: { comment?: string },
): Promise<ApprovalView> {
  await deps.ready();
  const claims = verify(deps, token);
  await checkSameAsking(deps, claims);
  const decision = claims.decision === "approve" ? "approved" : "rejected";
  return answerApproval(deps, claims.runId, claims.key, decision, {
    by: claims.by ?? "approval link",
    via: "link",
    tokenId: claims.id,
    // Checked again in the answer's transaction: a resume may ask anew meanwhile, and the
    // run may be deleted and its id taken by another that asks the same approval.
    asking: claims.asking ?? 0,
    ...(claims.runCreatedAt !== undefined && { runCreatedAt: claims.runCreatedAt }),
    ...(options.comment !== undefined ? { comment: options.comment } : {}),
  });
}

/** A link answers only the asking it was made for: not a run started later under the same
 *  id (after retention deleted the one it was made for), nor the approval asked again by a
 *  resume after an answer to it failed the run. */
async function checkSameAsking(deps: ApprovalsDeps, claims: ApprovalClaims): Promise<void> {
  const run = await deps.store.getRun(claims.runId);
  if (!run) return; // linkedApproval and the answer say the run is gone
  // Tokens carry whole ms (approval-tokens.ts): a clock may read fractions (SQLite keeps them).
  if (claims.runCreatedAt !== undefined && Math.floor(run.createdAt) !== claims.runCreatedAt) {
    throw earlierRunError(claims.runId);
  }
  if (askingOf(run.failedCalls, claims.key) !== (claims.asking ?? 0)) {
    throw earlierAskingError(claims.runId, claims.key);
  }
}

function verify(deps: ApprovalsDeps, token: string): ApprovalClaims {
  return verifyApprovalToken(deps.approvalKeys, token, deps.clock.now());
}

/** The approval a link's claims name, as a view; ApprovalNotFoundError if there is none. */
async function linkedApproval(deps: ApprovalsDeps, claims: ApprovalClaims): Promise<ApprovalView> {
  const { views } = await loadApprovals(deps.store, claims.runId).catch((err: unknown) => {
    if (err instanceof RunNotFoundError) {
      throw new ApprovalNotFoundError(
        `This approval link's run "${claims.runId}" no longer exists`,
      );
    }
    throw err;
  });
  const approval = views.find((a) => a.key === claims.key);
  if (!approval) {
    throw new ApprovalNotFoundError(
      `Run "${claims.runId}" has not asked for approval "${claims.key}" (yet); nothing to answer`,
    );
  }
  return approval;
}
