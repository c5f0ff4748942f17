// Answering one approval, the one way every answer goes (approve, reject, an approval
// link): the answer's text is checked, its data encoded, and the store's answerApproval
// records the decision and the event that wakes the run in one transaction, or refuses
// with nothing changed, which the error explains.

import { encode } from "../codec/codec.js";
import { looksLikeEnvelope } from "../codec/stored-text.js";
import {
  ApprovalNotFoundError,
  ApprovalTokenError,
  RunConflictError,
  SerializationError,
} from "../errors.js";
import { unstorableText } from "../lib/text.js";
import type { AnswerApprovalOutcome } from "../store/approval-records.js";
import { APPROVAL_EVENT_PREFIX } from "../workflow/approval-calls.js";
import type { ApprovalAnswer } from "../workflow/approval-outcome.js";
import { toApprovalView } from "./approval-lookup.js";
import type { AnswerOptions, ApprovalsDeps, ApprovalView } from "./approvals.js";

/** How an answer came: AnswerOptions, and the link's token id, asking and run's creation
 *  time when a link gave it (a link answers only the asking, and run, it was made for). */
export type AnswerSource = AnswerOptions & {
  tokenId?: string;
  asking?: number;
  runCreatedAt?: number;
};

export async function answerApproval(
  deps: ApprovalsDeps,
  runId: string,
  key: string,
  decision: "approved" | "rejected",
  source: AnswerSource,
): Promise<ApprovalView> {
  const { store } = deps;
  // via first: by defaults to it, and a bad via given alone must be named as via.
  const via = checkAnswerText(source.via ?? "engine", "via", 40);
  const by = checkAnswerText(source.by ?? via, "The approver (by)", 200);
  const comment = source.comment === undefined ? null : checkComment(source.comment, runId, key);
  let answerText: string | null = null;
  const payload: ApprovalAnswer = { decision, by, comment, via };
  if (source.answer !== undefined) {
    try {
      answerText = encode(source.answer, deps.maxPayloadBytes);
    } catch (err) {
      throw new SerializationError(
        `The answer to approval "${key}" of run "${runId}" ${(err as Error).message}; nothing was recorded`,
        { cause: err },
      );
    }
    payload.answer = source.answer;
  }
  const res = await store.answerApproval({
    runId,
    key,
    decision,
    answeredBy: by,
    comment,
    answer: answerText,
    via,
    tokenId: source.tokenId ?? null,
    ...(source.asking !== undefined && { asking: source.asking }),
    ...(source.runCreatedAt !== undefined && { runCreatedAt: source.runCreatedAt }),
    // The answer in it was held to maxPayloadBytes above; the rest is bounded text (by,
    // comment, via). Not held to the codec's default 2 MiB: an answer an engine with a larger
    // limit accepts would fail here with a raw EncodeError, nothing recorded.
    event: {
      name: `${APPROVAL_EVENT_PREFIX}${key}`,
      payload: encode(payload, Number.POSITIVE_INFINITY),
    },
  });
  if (!res.ok) throw refusal(res, runId, key, source.tokenId);
  deps.answered(runId);
  const run = await store.getRun(runId);
  return toApprovalView(res.approval, run?.status, await store.now());
}

/** An answer's comment: free text that must not read back as an encrypted payload. */
export function checkComment(value: unknown, runId: string, key: string): string {
  const comment = checkAnswerText(value, "The comment", 4_000);
  if (looksLikeEnvelope(comment)) {
    throw new TypeError(
      `The comment on approval "${key}" of run "${runId}" begins with "cairn:enc:", which marks an encrypted payload in the store (it would be read back as one); reword it`,
    );
  }
  return comment;
}

/** Text of an answer (who, via, comment): 1-`max` characters that cairn can store exactly
 *  (no NUL, no emoji cut in two: lib/text.ts). */
export function checkAnswerText(value: unknown, what: string, max: number): string {
  if (typeof value !== "string") {
    const got = value === null ? "null" : Array.isArray(value) ? "an array" : typeof value;
    throw new TypeError(`${what} must be a string of 1-${max} characters, got ${got}`);
  }
  if (value.length === 0 || value.length > max) {
    throw new TypeError(`${what} must be 1-${max} characters`);
  }
  const why = unstorableText(value);
  if (why) throw new TypeError(`${what} ${why}; it cannot be stored as given`);
  return value;
}

/** Why the store refused an answer to approval `key` of `runId`, as the error to throw. */
function refusal(
  res: Extract<AnswerApprovalOutcome, { ok: false }>,
  runId: string,
  key: string,
  tokenId: string | undefined,
): Error {
  const what = `Approval "${key}" of run "${runId}"`;
  switch (res.reason) {
    case "not-found":
      return new ApprovalNotFoundError(`${what} does not exist; nothing was changed`);
    case "decided": {
      const a = res.approval;
      const when = a.answeredAt === null ? "" : ` at ${new Date(a.answeredAt).toISOString()}`;
      if (tokenId !== undefined && a.tokenId === tokenId) {
        return new RunConflictError(
          `This approval link was already used: ${what} was ${a.status}${when}; nothing was changed`,
        );
      }
      return new RunConflictError(
        `${what} was already ${a.status} by ${a.answeredBy ?? "someone"}${when}${a.via ? ` (via ${a.via})` : ""}; nothing was changed`,
      );
    }
    case "expired":
      return new RunConflictError(
        `${what} timed out at ${new Date(res.approval.deadline ?? 0).toISOString()}; the run takes its declared decision (${res.approval.onTimeout}); nothing was changed`,
      );
    case "finished":
      return new RunConflictError(
        `Run "${runId}" is ${res.status}: its approval "${key}" can no longer be answered; nothing was changed`,
      );
    case "other-asking":
      return earlierAskingError(runId, key);
    case "other-run":
      return earlierRunError(runId);
  }
}

/** A link made for a run that was deleted, whose id another run has taken since. */
export function earlierRunError(runId: string): ApprovalTokenError {
  return new ApprovalTokenError(
    `This approval link was made for an earlier run "${runId}", which no longer exists; nothing was changed`,
  );
}

/** A link made for an earlier asking of approval `key`, which ended by failing the run. */
export function earlierAskingError(runId: string, key: string): ApprovalTokenError {
  return new ApprovalTokenError(
    `This approval link was made for an earlier asking of approval "${key}" of run "${runId}", which ended by failing the run (a resume asks the approval anew); nothing was changed. Ask for a new link.`,
  );
}
