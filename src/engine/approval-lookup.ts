// Reading a run's approvals: all of them as views, and the one a name given by a person
// (on the command line, in a URL) means.

import { ApprovalNotFoundError, RunConflictError, runNotFound } from "../errors.js";
import { quoteGiven } from "../lib/text.js";
import type { ApprovalRecord } from "../store/approval-records.js";
import { type Store, TERMINAL_STATUSES } from "../store/store.js";
import type { ApprovalView } from "./approvals.js";
import {
  decodeForView,
  shownText,
  UndecodableValue,
  type Withheld,
  withheldTexts,
} from "./views.js";

/** A run's approvals as stored and as views; RunNotFoundError if the run has neither. */
export async function loadApprovals(
  store: Store,
  runId: string,
): Promise<{ records: ApprovalRecord[]; views: ApprovalView[] }> {
  const [records, run, now] = await Promise.all([
    store.listApprovals(runId),
    store.getRun(runId),
    store.now(),
  ]);
  if (!run && records.length === 0) throw runNotFound(runId);
  return { records, views: records.map((r) => toApprovalView(r, run?.status, now)) };
}

/** The approval `name` names: the pending one whose key or name it is, else the one whose
 *  key it is, else the latest of that name. */
export async function findApproval(
  store: Store,
  runId: string,
  name: string,
): Promise<ApprovalRecord> {
  const { records, views } = await loadApprovals(store, runId);
  // Waiting as the views say: a timed-out asking stays "pending" in the store.
  const waits = new Set(records.filter((_, i) => views[i]!.status === "pending"));
  const exact = records.find((r) => r.key === name);
  if (exact && waits.has(exact)) return exact;
  // The first asking's key is its name: in a loop ("merge", then "merge#2"), the name means
  // the asking that waits, not the first one, long answered or timed out.
  const named = records.filter((r) => r.name === name);
  const pending = named.filter((r) => waits.has(r));
  if (pending.length > 1) {
    throw new RunConflictError(
      `Run ${quoteGiven(runId)} has ${pending.length} pending approvals named ${quoteGiven(name)} (${pending.map((r) => quoteGiven(r.key)).join(", ")}); give the key`,
    );
  }
  const found = pending[0] ?? exact ?? named.at(-1);
  if (!found) {
    const known = records.map((r) => quoteGiven(r.key)).join(", ");
    // Quoted as the run-id messages are: a NUL or lone surrogate given is escaped, not
    // printed raw (a terminal, a log line).
    throw new ApprovalNotFoundError(
      `Run ${quoteGiven(runId)} has no approval ${quoteGiven(name)}${known ? ` (its approvals: ${known})` : " (it has asked for none yet)"}`,
    );
  }
  return found;
}

/** The key of approval `name`, or `name` itself when the run has not asked for it yet: a
 *  link may be made before the run asks, and the first call of that name will have it. */
export function approvalKeyFor(store: Store, runId: string, name: string): Promise<string> {
  return findApproval(store, runId, name).then(
    (r) => r.key,
    (err: unknown) => {
      if (err instanceof ApprovalNotFoundError) return name;
      throw err;
    },
  );
}

export function toApprovalView(
  r: ApprovalRecord,
  runStatus: string | undefined,
  now: number,
): ApprovalView {
  const withheld: NonNullable<ApprovalView["withheld"]> = {};
  const view: ApprovalView = {
    runId: r.runId,
    key: r.key,
    name: r.name,
    request: decodeApprovalValue(r.request, "request", withheld),
    requestedAt: new Date(r.requestedAt),
    onTimeout: r.onTimeout,
    status: approvalStatus(r, runStatus, now),
  };
  if (r.deadline !== null) view.deadline = new Date(r.deadline);
  if (r.answeredAt !== null) view.answeredAt = new Date(r.answeredAt);
  if (r.answeredBy !== null) view.answeredBy = r.answeredBy;
  if (r.comment !== null) view.comment = shownText(r.comment);
  if (r.answer !== null) view.answer = decodeApprovalValue(r.answer, "answer", withheld);
  if (r.via !== null) view.via = r.via;
  if (r.tokenId !== null) view.linkId = r.tokenId;
  Object.assign(withheld, withheldTexts({ comment: r.comment }));
  if (Object.keys(withheld).length > 0) view.withheld = withheld;
  return view;
}

/** A pending approval past its deadline has timed out; one whose run is gone or finished
 *  is closed. */
function approvalStatus(
  r: ApprovalRecord,
  runStatus: string | undefined,
  now: number,
): ApprovalView["status"] {
  if (r.status !== "pending") return r.status;
  if (r.deadline !== null && now >= r.deadline) return "timed-out";
  if (runStatus === undefined || TERMINAL_STATUSES.has(runStatus as never)) return "closed";
  return "pending";
}

/** A stored request or answer as an approval view shows it. Unlike the other views, a
 *  value the codec cannot decode is shown as the text "[undecodable value]" itself rather
 *  than an UndecodableValue (as approvals always have been), named in `withheld`. */
function decodeApprovalValue(
  text: string | null,
  field: "request" | "answer",
  withheld: Partial<Record<typeof field, Withheld>>,
): unknown {
  const value = decodeForView(text);
  if (!(value instanceof UndecodableValue)) return value;
  // The text alone could be a person's own request: `withheld` says it is the placeholder.
  withheld[field] = { reason: "undecodable" };
  return String(value);
}
