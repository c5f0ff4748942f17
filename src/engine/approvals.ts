// The engine's side of approvals (ctx.approval): listing a run's approvals, answering one
// (as the CLI, the API or the dashboard does), and approval links (approval-tokens.ts).
// Every answer goes through the store's answerApproval, which decides exactly once: a
// second answer, a replayed link, an answer after the deadline or to a finished run is
// refused with nothing changed, and the error says which and why.
//
// This file holds the types and composes the verbs: reading approvals is approval-lookup.ts,
// answering approval-answer.ts, links approval-links.ts.

import type { Clock } from "../lib/clock.js";
import type { Duration } from "../lib/duration.js";
import { unknownOptionNames, unknownOptionsText } from "../lib/option-names.js";
import type { Store } from "../store/store.js";
import { answerApproval } from "./approval-answer.js";
import {
  answerApprovalLink,
  approvalLinks,
  approvalToken,
  inspectApprovalLink,
} from "./approval-links.js";
import { findApproval, loadApprovals } from "./approval-lookup.js";
import type { ApprovalKey } from "./approval-tokens.js";
import type { Withheld } from "./views.js";

export interface ApprovalView {
  runId: string;
  /** The call's key in the run ("review", "review#2"). */
  key: string;
  name: string;
  request: unknown;
  requestedAt: Date;
  /** When it times out, if it does. */
  deadline?: Date;
  onTimeout: "approve" | "reject";
  /** pending: waiting for an answer; timed-out: its deadline passed unanswered (the run
   *  takes onTimeout); closed: its run finished unanswered (canceled, failed). */
  status: "pending" | "approved" | "rejected" | "timed-out" | "closed";
  answeredAt?: Date;
  answeredBy?: string;
  comment?: string;
  answer?: unknown;
  via?: string;
  /** The answer came through an approval link (its token id). */
  linkId?: string;
  /** Its text shown as a placeholder that a person's own text may read as too: a comment
   *  encrypted with a key this process lacks, a request or answer the codec cannot decode
   *  (shown as the text "[undecodable value]"). A request or answer encrypted with such a
   *  key is an EncryptedValue, which says so itself. */
  withheld?: { request?: Withheld; answer?: Withheld; comment?: Withheld };
}

export interface AnswerOptions {
  /** Who answers (1-200 characters). Default: what the client is ("cli", "api", ...). */
  by?: string;
  comment?: string;
  /** Structured answer data, checked by the approval's answer schema when the run reads it. */
  answer?: unknown;
  /** How the answer comes (default "engine"). */
  via?: string;
}

export interface ApprovalLinks {
  approve: string;
  reject: string;
  expiresAt: Date;
}

/** What inspecting a link shows (the confirmation page), without answering. */
export interface ApprovalLinkInfo {
  decision: "approve" | "reject";
  expiresAt: Date;
  by?: string;
  approval: ApprovalView;
}

export interface ApprovalsApi {
  listApprovals(runId: string): Promise<ApprovalView[]>;
  approve(runId: string, name: string, options?: AnswerOptions): Promise<ApprovalView>;
  reject(runId: string, name: string, options?: AnswerOptions): Promise<ApprovalView>;
  /** A token that answers approval `name` of `runId` one way (needs approvalKeys). */
  approvalToken(
    runId: string,
    name: string,
    decision: "approve" | "reject",
    options?: { expiresIn?: Duration; by?: string },
  ): Promise<string>;
  /** Both links, as URLs of the dashboard's confirmation page under `baseUrl`. */
  approvalLinks(
    runId: string,
    name: string,
    options: { baseUrl: string; expiresIn?: Duration; by?: string },
  ): Promise<ApprovalLinks>;
  inspectApprovalLink(token: string): Promise<ApprovalLinkInfo>;
  /** Answers with a link's token: its decision, recorded as given by its `by`. */
  answerApprovalLink(token: string, options?: { comment?: string }): Promise<ApprovalView>;
}

export interface ApprovalsDeps {
  store: Store;
  clock: Clock;
  maxPayloadBytes: number;
  /** The keys that sign (the first) and verify (all) approval links. */
  approvalKeys: readonly ApprovalKey[];
  /** Refuses once the engine is closed; otherwise resolves once the store is open. */
  ready(): Promise<void>;
  /** The run may have an answer to read now (wake it in this process, or claim it). */
  answered(runId: string): void;
}

export function createApprovalsApi(deps: ApprovalsDeps): ApprovalsApi {
  const answerByName = async (
    runId: string,
    name: string,
    decision: "approved" | "rejected",
    options: AnswerOptions,
  ): Promise<ApprovalView> => {
    checkAnswerOptions(decision === "approved" ? "approve" : "reject", runId, name, options);
    await deps.ready();
    const found = await findApproval(deps.store, runId, name);
    return answerApproval(deps, runId, found.key, decision, options);
  };
  return {
    async listApprovals(runId) {
      await deps.ready();
      return (await loadApprovals(deps.store, runId)).views;
    },
    approve: (runId, name, options = {}) => answerByName(runId, name, "approved", options),
    reject: (runId, name, options = {}) => answerByName(runId, name, "rejected", options),
    approvalToken: (runId, name, decision, options = {}) =>
      approvalToken(deps, runId, name, decision, options),
    approvalLinks: (runId, name, options) => approvalLinks(deps, runId, name, options),
    inspectApprovalLink: (token) => inspectApprovalLink(deps, token),
    answerApprovalLink: (token, options = {}) => answerApprovalLink(deps, token, options),
  };
}

const ANSWER_OPTIONS = ["by", "comment", "answer", "via"];

/** `engine.approve(id, name, options)` is handed `{ by?, comment?, answer?, via? }`: a
 *  comment passed as the options (`reject(id, "merge", "needs tests")`) or a misspelt option
 *  (`{ comments: ... }`) answered without it, silently. Refused, nothing answered. */
function checkAnswerOptions(verb: string, runId: string, name: string, options: unknown): void {
  const call = `engine.${verb}(${JSON.stringify(runId)}, ${JSON.stringify(name)}, options)`;
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    const got =
      typeof options === "string"
        ? `a string (for a comment, pass { comment: ${JSON.stringify(options.slice(0, 40))} })`
        : options === null
          ? "null"
          : Array.isArray(options)
            ? "an array"
            : typeof options;
    throw new TypeError(
      `${call}: options must be an object { by?, comment?, answer?, via? }, got ${got}; nothing was answered`,
    );
  }
  const unknown = unknownOptionNames(options, ANSWER_OPTIONS);
  if (unknown.length > 0) {
    throw new TypeError(
      `${call}: ${unknownOptionsText(unknown, ANSWER_OPTIONS)}; nothing was answered`,
    );
  }
}
