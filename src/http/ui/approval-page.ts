// Approvals in the dashboard: how a request reads (each field of an object on its own line,
// a diff as text), and the page an approval link opens. That page needs no sign-in (the
// link's token is the credential, see security.ts): it shows the request and asks to
// confirm; nothing is answered by opening it (mail scanners open links), only by the
// button, which posts to the link's API route. After that the page shows the outcome, and
// the link is spent.

import type { Context } from "hono";
import { html } from "hono/html";
import { CairnError } from "../../index.js";
import { approvalJson } from "../api/approvals.js";
import { APPROVAL_LINK_API } from "../approval-link-paths.js";
import { errorAnswer } from "../errors.js";
import type { AppEnv } from "../security.js";
import { cut, pretty } from "./format.js";
import {
  ageTag,
  type Html,
  layout,
  recordText,
  runUrl,
  type UiDeps,
  withheldIn,
} from "./layout.js";
import { messagePage } from "./pages.js";

type Json = Record<string, unknown>;

/** A request as people read it. `request` is already JSON-safe (approvalJson). */
export function requestBlock(request: unknown): Html {
  const text = (v: unknown) =>
    typeof v === "string"
      ? html`<pre class="value">${cut(v, 100_000)}</pre>`
      : html`<pre class="value">${cut(pretty(v), 100_000)}</pre>`;
  if (request === null || typeof request !== "object" || Array.isArray(request)) {
    return text(request);
  }
  return html`<dl class="request">${Object.entries(request as Json).map(
    ([k, v]) => html`<dt>${cut(k, 80)}</dt><dd>${text(v)}</dd>`,
  )}</dl>`;
}

/** One approval: what is asked, its state, and the answer if there is one. */
export function approvalBlock(a: Json, now: number): Html {
  const status = a.status as string;
  return html`<div class="approval" data-key="${a.key as string}">
  <div class="approval-head"><strong>${cut(a.key as string, 80)}</strong> <span class="tag ${status === "approved" ? "ok" : status === "pending" ? "human" : status === "rejected" ? "err" : "warn"}">${status}</span>
  <span class="muted">asked ${ageTag(a.requestedAt as string, now)}${deadlineNote(a, now)}</span></div>
  ${withheldIn(a, "request") ? html`<p>${recordText("", withheldIn(a, "request"), 0)}</p>` : requestBlock(a.request)}
  ${a.answeredAt ? html`<p class="answered">${status} by <strong>${cut((a.answeredBy as string) ?? "?", 200)}</strong> ${ageTag(a.answeredAt as string, now)}${a.via ? html` <span class="muted">via ${a.via as string}</span>` : ""}${a.comment ? html`: “${recordText(a.comment as string, withheldIn(a, "comment"), 4000)}”` : ""}</p>` : ""}
</div>`;
}

/** The deadline while it matters: when a pending approval times out and what the run then
 *  takes, or that it did time out. An answered (or closed) approval's deadline is moot:
 *  "deadline in 1d (then reject)" under an approved badge read as if it still ran. */
function deadlineNote(a: Json, now: number): Html | "" {
  if (!a.deadline) return "";
  const status = a.status as string;
  const then = `(then ${a.onTimeout as string})`;
  if (status === "pending") return html` · times out ${ageTag(a.deadline as string, now)} ${then}`;
  if (status === "timed-out") {
    return html` · timed out ${ageTag(a.deadline as string, now)} (took ${a.onTimeout as string})`;
  }
  return "";
}

export async function approvalLinkPage(
  deps: UiDeps,
  c: Context<AppEnv>,
  token: string,
): Promise<Response> {
  let info: Awaited<ReturnType<UiDeps["engine"]["inspectApprovalLink"]>>;
  try {
    info = await deps.engine.inspectApprovalLink(token);
  } catch (err) {
    if (!(err instanceof CairnError)) throw err;
    const { status, body } = errorAnswer(err, () => {});
    const title =
      status === 403
        ? "This link does not work"
        : status >= 500
          ? "Unavailable"
          : "Nothing to approve";
    return messagePage(deps, c, status, title, body.error.message);
  }
  const a = approvalJson(info.approval);
  const now = deps.clock.now();
  const approve = info.decision === "approve";
  const pending = a.status === "pending";
  const spent = a.linkId !== undefined;
  const body = html`<section class="panel approval-link" data-region="link" id="region-link">
  <h1>${
    pending
      ? `${approve ? "Approve" : "Reject"} “${cut(a.name as string, 80)}”?`
      : `This link to ${approve ? "approve" : "reject"} “${cut(a.name as string, 80)}” can no longer be used`
  }</h1>
  <p class="muted">Run <a href="${runUrl(deps, a.runId as string)}" class="id">${cut(a.runId as string, 80)}</a> ${pending ? "asks" : "asked"}${info.by ? html` <strong>${cut(info.by, 200)}</strong>` : ""}.${pending ? html` This link works once, until ${ageTag(info.expiresAt.toISOString(), now)}.` : ""}</p>
  ${approvalBlock(a, now)}
  ${
    pending
      ? html`<form data-api="${deps.basePath}/api${APPROVAL_LINK_API}/${token}" class="link-form">
    <label>Comment <span class="muted">(optional)</span> <textarea name="body.comment" rows="3" maxlength="4000"></textarea></label>
    <p class="form-error" role="alert" hidden></p>
    <div class="buttons"><button type="submit" class="${approve ? "primary" : "danger"}">${approve ? "Approve" : "Reject"}</button></div>
  </form>`
      : html`<p class="notice${spent ? "" : " warn"}" role="status">${
          a.status === "approved" || a.status === "rejected"
            ? `This approval was ${a.status as string}${spent ? " through an approval link" : ""}.`
            : a.status === "timed-out"
              ? "This approval timed out; the run took its declared decision."
              : "The run has finished; this approval can no longer be answered."
        }</p>`
  }
</section>`;
  return c.html(
    layout(deps, c, {
      title: `${approve ? "Approve" : "Reject"} ${cut(a.name as string, 40)}`,
      nav: "none",
      body,
    }),
  );
}
