// What a run page offers to do, in one list: each action says when the run's state allows
// it, how its button looks, and the dialog whose form posts to the API (the form field
// conventions are in assets/app.js). A feature that adds an action on runs adds an entry
// here; the page shows its button and dialog to callers who may act.

import { html } from "hono/html";
import { APPROVAL_EVENT_PREFIX, type ApprovalView } from "../../index.js";
import { approvalKeys } from "../../workflow/approval-calls.js";
import { approvalJson } from "../api/approvals.js";
import { runIdSegment } from "../run-id-segment.js";
import { approvalBlock } from "./approval-page.js";
import { cut, isFinished } from "./format.js";
import type { Html, UiDeps } from "./layout.js";

type Json = Record<string, unknown>;

/** What the page read besides the run and its steps, for actions the API refuses on more
 *  than the run's own status. */
export interface RunFacts {
  /** The status of the run's parent run (a child run of a failed or paused run only). */
  parentStatus?: string;
  /** Its approvals that can be answered now (a run waiting for an approval only). */
  pendingApprovals?: ApprovalView[];
  /** All its approvals, as read with pendingApprovals. */
  approvals?: ApprovalView[];
}

export interface RunAction {
  /** The dialog is "dialog-<id>". */
  id: string;
  label: string;
  applies(run: Json, steps: Json[]): boolean;
  /** Why the API would refuse the action although `applies` holds: the button is shown
   *  disabled with this reason, and no dialog is offered. */
  refusal?(run: Json, facts: RunFacts): string | undefined;
  style?(run: Json): "primary" | "danger" | "";
  dialog(o: { deps: UiDeps; run: Json; steps: Json[]; facts: RunFacts; api: string }): Html;
}

const live = (run: Json) => !isFinished(run.status);

const FORM_END = (submit: string, cls = "primary", close = "Close") =>
  html`<p class="form-error" role="alert" hidden></p>
  <div class="buttons"><button type="button" data-close>${close}</button><button type="submit" class="${cls}">${submit}</button></div>`;

/** Keys a fork may start from: completed calls, and calls that failed or never finished
 *  (not the internal records of ctx.now/random/uuid). */
export function forkableSteps(steps: Json[]): Json[] {
  return steps.filter(
    (s) =>
      !(s.key as string).startsWith("@") &&
      (s.completedAt !== undefined || (s.attempts as unknown[]).length > 0 || s.intentAt),
  );
}

/** Events a user may send (names starting with "cairn." are the engine's own). */
const userEvents = (run: Json) =>
  ((run.waitingFor as string[] | undefined) ?? []).filter((n) => !n.startsWith("cairn."));

const sendEvent: RunAction = {
  id: "event",
  label: "Send event",
  applies: live,
  style: (run) => (userEvents(run).length ? "primary" : ""),
  dialog({ run, api }) {
    const waitingFor = userEvents(run);
    return html`<form data-api="${api}/events/{name}" data-then="reload">
  <h2>Send an event</h2>
  <label>Event name <input name="path.name" required maxlength="200" list="waiting-for" value="${waitingFor[0] ?? ""}" autocomplete="off"></label>
  <datalist id="waiting-for">${waitingFor.map((n) => html`<option value="${n}"></option>`)}</datalist>
  <label>Payload <span class="muted">(JSON, optional)</span>
    <textarea name="body" data-json rows="6" spellcheck="false" placeholder='{"ok": true}'></textarea>
  </label>
  <label>Idempotency key <span class="muted">(optional: the same key twice stores one event)</span> <input name="header.idempotency-key" maxlength="256" autocomplete="off"></label>
  ${FORM_END("Send")}
</form>`;
  },
};

const resume: RunAction = {
  id: "resume",
  label: "Resume",
  applies: (run) => run.status === "paused" || run.status === "failed",
  style: (run) => (run.status === "paused" ? "primary" : ""),
  // As the engine's resume(): a child of a canceled parent would work for nobody.
  refusal: (run, facts) =>
    facts.parentStatus === "canceled"
      ? `Cannot be resumed: its parent run "${cut(run.parentId as string, 80)}" was canceled, so it would work for nobody. Start the work as a new run, or fork the parent.`
      : undefined,
  dialog({ run, api }) {
    const limit = (run.budget as { limit: Record<string, number> }).limit;
    const names = Object.keys(limit).sort();
    return html`<form data-api="${api}/resume" data-then="reload">
  <h2>Resume</h2>
  <p>The run continues from its first unfinished step${run.status === "failed" ? "; the failed step gets fresh attempts" : ""}.</p>
  ${names.map(
    (n) =>
      html`<label>Budget limit: ${n} <input name="body.budget" data-key="${n}" data-number type="number" min="0" step="any" value="${String(limit[n])}"></label>`,
  )}
  <label>${names.length > 0 ? "Other limits" : "Budget limits"} <span class="muted">(optional, e.g. usd=10)</span> <input name="body.budget" data-amounts autocomplete="off"></label>
  ${FORM_END("Resume")}
</form>`;
  },
};

const fork: RunAction = {
  id: "fork",
  label: "Fork",
  applies: (_run, steps) => forkableSteps(steps).length > 0,
  dialog({ deps, run, steps, api }) {
    const forkable = forkableSteps(steps);
    const failed = forkable.find((s) => s.status === "failed");
    const versions = [
      ...new Set([
        run.version as string,
        ...deps.engine.workflows.filter((w) => w.name === run.workflow).map((w) => w.version),
      ]),
    ];
    return html`<form data-api="${api}/fork" data-then="open-run">
  <h2>Fork from a step</h2>
  <p>A new run reuses everything recorded before the chosen step and executes from there. This run is not touched.</p>
  <label>From step <select name="body.fromStep" required>${forkable.map(
    (s) =>
      html`<option value="${s.key as string}"${s === failed ? " selected" : ""}>${cut(s.key as string, 80)} (${s.status as string})</option>`,
  )}</select></label>
  <label>On version <input name="body.version" list="fork-versions" value="${run.version as string}" maxlength="128" autocomplete="off"></label>
  <datalist id="fork-versions">${versions.map((v) => html`<option value="${v}"></option>`)}</datalist>
  <label>New run id <span class="muted">(optional)</span> <input name="body.id" maxlength="256" autocomplete="off"></label>
  ${FORM_END("Fork")}
</form>`;
  },
};

const cancel: RunAction = {
  id: "cancel",
  label: "Cancel run",
  applies: live,
  style: () => "danger",
  dialog({ run, api }) {
    // A cancel asked already keeps its reason (the API answers another with a 409): the
    // dialog says so before a reason is typed; the answer's message is shown either way.
    const asked =
      run.cancelRequested === true
        ? html`<p class="muted">Its cancel was requested already${run.reason === undefined ? "" : html` (reason “${cut(run.reason as string, 200)}”)`}, waiting for its worker to stop it: canceling again changes nothing, and another reason is not recorded.</p>`
        : "";
    return html`<form data-api="${api}/cancel" data-then="reload">
  <h2>Cancel this run?</h2>
  <p>Its running step's signal aborts and no further step starts. This cannot be undone (a fork can redo it).</p>
  ${asked}
  <label>Reason <span class="muted">(optional)</span> <input name="body.reason" maxlength="500" autocomplete="off"></label>
  ${FORM_END("Cancel run", "danger", "Keep running")}
</form>`;
  },
};

export const waitsForApproval = (run: Json) =>
  ((run.waitingFor as string[] | undefined) ?? []).some((n) => n.startsWith(APPROVAL_EVENT_PREFIX));

/** The run's approvals that can be answered now, as the page read them. */
export async function pendingApprovals(
  deps: UiDeps,
  run: Json,
  facts: RunFacts,
): Promise<ApprovalView[]> {
  if (facts.pendingApprovals) return facts.pendingApprovals;
  const all = await deps.engine.listApprovals(run.id as string);
  return all.filter((a) => a.status === "pending");
}

/** Why none of the approvals a waiting run waits for can be answered, from what the page
 *  read: one was answered (the run goes on once a worker wakes it), or deadlines passed. */
function noAnswerableApproval(run: Json, facts: RunFacts): string {
  const awaited = new Set(approvalKeys((run.waitingFor as string[] | undefined) ?? []));
  const answered = (facts.approvals ?? []).find(
    (a) => awaited.has(a.key) && (a.status === "approved" || a.status === "rejected"),
  );
  if (answered) {
    const by = answered.answeredBy === undefined ? "" : ` by ${cut(answered.answeredBy, 80)}`;
    return `No approval can be answered now: "${cut(answered.key, 80)}" was already answered (${answered.status}${by}); the run goes on when a worker wakes it.`;
  }
  return "No approval can be answered now: its deadline passed, and the run takes its onTimeout answer when a worker wakes it.";
}

/** Approve or reject an approval the run waits for (ctx.approval), showing its request. */
function approvalAction(decision: "approve" | "reject"): RunAction {
  const approve = decision === "approve";
  return {
    id: decision,
    label: approve ? "Approve" : "Reject",
    applies: waitsForApproval,
    style: () => (approve ? "primary" : "danger"),
    // The run still waits, but no asking can be answered (the API answers 409): it was
    // answered, or its deadline passed, and no worker has woken the run since.
    refusal: (run, facts) =>
      facts.pendingApprovals?.length === 0 ? noAnswerableApproval(run, facts) : undefined,
    async dialog({ deps, run, facts, api }) {
      const pending = (await pendingApprovals(deps, run, facts)).map(approvalJson);
      const now = deps.clock.now();
      const only = pending.length === 1 ? pending[0] : undefined;
      return html`<form data-api="${api}/approvals/{name}/${decision}" data-then="reload">
  <h2>${approve ? "Approve" : "Reject"}</h2>
  ${
    only
      ? html`<input type="hidden" name="path.name" value="${only.key as string}">`
      : html`<label>Approval <select name="path.name" required>${pending.map(
          (a) => html`<option value="${a.key as string}">${cut(a.key as string, 80)}</option>`,
        )}</select></label>`
  }
  ${pending.map((a) => approvalBlock(a, now))}
  <label>Your name <span class="muted">(recorded as who ${approve ? "approved" : "rejected"})</span> <input name="body.by" maxlength="200" autocomplete="name"></label>
  <label>Comment <span class="muted">(optional)</span> <textarea name="body.comment" rows="3" maxlength="4000"></textarea></label>
  <input type="hidden" name="body.via" value="dashboard">
  ${FORM_END(approve ? "Approve" : "Reject", approve ? "primary" : "danger")}
</form>`;
    },
  };
}

export const RUN_ACTIONS: readonly RunAction[] = [
  approvalAction("approve"),
  approvalAction("reject"),
  sendEvent,
  resume,
  fork,
  cancel,
];

/** The actions the run's page offers, each with the reason it is refused, if it is. */
export function offeredActions(
  run: Json,
  steps: Json[],
  facts: RunFacts,
): Array<{ action: RunAction; refusal: string | undefined }> {
  return RUN_ACTIONS.filter((a) => a.applies(run, steps)).map((action) => ({
    action,
    refusal: action.refusal?.(run, facts),
  }));
}

export function actionDialogs(deps: UiDeps, run: Json, steps: Json[], facts: RunFacts): Html {
  const api = `${deps.basePath}/api/runs/${runIdSegment(run.id as string)}`;
  const usable = offeredActions(run, steps, facts).filter((o) => o.refusal === undefined);
  return html`${usable.map(
    ({ action: a }) =>
      html`<dialog id="dialog-${a.id}" class="form-dialog">${a.dialog({ deps, run, steps, facts, api })}</dialog>`,
  )}`;
}
