// The runs list: tabs by status and named view (the runs waiting for a human first),
// filters, a live table (status, reason, spend, age), paging, and starting a run.

import type { Context } from "hono";
import { html } from "hono/html";
import { isRetryBackoffReason } from "../../engine/views.js";
import { APPROVAL_EVENT_PREFIX } from "../../index.js";
import { amountOf } from "../../lib/amounts.js";
import { approvalKeys } from "../../workflow/approval-calls.js";
import { CHILD_EVENT_PREFIX } from "../../workflow/child-calls.js";
import { readQuery } from "../api/route.js";
import { listRunPage, RUN_LIST_QUERY, RUN_LIST_VIEWS, type RunListQuery } from "../api/run-list.js";
import { HttpError } from "../errors.js";
import type { AppEnv } from "../security.js";
import { cut, number } from "./format.js";
import { heldTag } from "./held.js";
import {
  ageTag,
  canAct,
  type Html,
  layout,
  recordText,
  runUrl,
  statusBadge,
  type UiDeps,
  withheldIn,
} from "./layout.js";

type Json = Record<string, unknown>;

const TAB_STATUSES = ["running", "waiting", "paused", "failed", "completed", "canceled", "pending"];

/** How many runs a view tab counts before it says "99+". */
const COUNT_CAP = 99;

function queryString(q: Record<string, unknown>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v === undefined || v === "") continue;
    p.set(k, Array.isArray(v) ? v.join(",") : String(v));
  }
  const s = p.toString();
  return s === "" ? "" : `?${s}`;
}

export async function runsPage(deps: UiDeps, c: Context<AppEnv>): Promise<Response> {
  let q: RunListQuery;
  let problem: string | undefined;
  try {
    q = readQuery(c, RUN_LIST_QUERY) as RunListQuery;
  } catch (err) {
    if (!(err instanceof HttpError)) throw err;
    problem = err.message;
    q = {};
  }
  const [page, counts] = await Promise.all([
    listRunPage(deps.engine, q).catch((err: unknown) => {
      if (!(err instanceof HttpError)) throw err;
      problem = err.message;
      return { runs: [] } as { runs: Json[]; next?: string };
    }),
    countViews(deps),
  ]);
  const b = deps.basePath;
  const filters = { workflow: q.workflow, version: q.version, q: q.q };
  const selection = { view: q.view, status: q.status };
  const live = `${b}/api/live/runs${queryString({ ...selection, ...filters, limit: q.limit, before: q.before })}`;
  const now = deps.clock.now();
  const registered = deps.engine.workflows;
  const act = canAct(c);

  const tab = (label: string, target: Record<string, unknown>, active: boolean, extra?: Html) =>
    html`<a href="${b}/${queryString({ ...target, ...filters })}"${active ? html` aria-current="page"` : ""}>${label}${extra ?? ""}</a>`;
  const single = q.status?.length === 1 ? q.status[0] : undefined;

  const body = html`
<div class="page-head">
  <h1>Runs</h1>
  ${
    act && registered.length > 0
      ? html`<button type="button" class="primary" data-open="dialog-start">Start a run</button>`
      : ""
  }
</div>
<div data-region="tabs" id="region-tabs">
<nav class="tabs" aria-label="Run status">
  ${tab("All", {}, !q.view && !q.status)}
  ${Object.entries(RUN_LIST_VIEWS).map(([name, v]) =>
    tab(
      v.label,
      { view: name },
      q.view === name,
      html` <span class="count${counts[name] ? " hot" : ""}">${counts[name] !== undefined && counts[name] > COUNT_CAP ? `${COUNT_CAP}+` : String(counts[name] ?? 0)}</span>`,
    ),
  )}
  <span class="sep" aria-hidden="true"></span>
  ${TAB_STATUSES.map((st) => tab(st[0]!.toUpperCase() + st.slice(1), { status: st }, !q.view && single === st))}
</nav>
</div>
<form class="filters" method="get" action="${b}/">
  ${q.view ? html`<input type="hidden" name="view" value="${q.view}">` : ""}
  ${q.status ? html`<input type="hidden" name="status" value="${q.status.join(",")}">` : ""}
  <label>Workflow <input name="workflow" value="${q.workflow ?? ""}" list="workflow-names" maxlength="128" autocomplete="off"></label>
  <datalist id="workflow-names">${[...new Set(registered.map((w) => w.name))].map((n) => html`<option value="${n}"></option>`)}</datalist>
  <label>Version <input name="version" value="${q.version ?? ""}" maxlength="128" size="6" autocomplete="off"></label>
  <label class="grow">Run id contains <input type="search" name="q" value="${q.q ?? ""}" maxlength="256" placeholder="fix-42" autocomplete="off"></label>
  <button type="submit">Filter</button>
  ${filters.workflow || filters.version || filters.q ? html`<a class="button subtle" href="${b}/${queryString(selection)}">Clear</a>` : ""}
</form>
${problem ? html`<p class="notice error" role="alert">${problem}</p>` : ""}
<section data-region="runs" id="region-runs">
${runsTable(deps, page.runs, now, Boolean(q.view || q.status || q.workflow || q.version || q.q))}
<nav class="pager">
  ${q.before ? html`<a href="${b}/${queryString({ ...selection, ...filters, limit: q.limit })}">← Newest</a>` : ""}
  ${page.next ? html`<a href="${b}/${queryString({ ...selection, ...filters, limit: q.limit, before: page.next })}">Older →</a>` : ""}
</nav>
</section>
${act && registered.length > 0 ? startDialog(deps) : ""}`;
  return c.html(layout(deps, c, { title: "Runs", nav: "runs", live, body }), problem ? 400 : 200);
}

async function countViews(deps: UiDeps): Promise<Record<string, number>> {
  const entries = await Promise.all(
    Object.entries(RUN_LIST_VIEWS).map(async ([name, v]) => {
      const runs = await deps.engine.listRuns({ ...v.filter, limit: COUNT_CAP + 1 });
      return [name, runs.length] as const;
    }),
  );
  return Object.fromEntries(entries);
}

function spendCell(run: Json): Html {
  const budget = run.budget as { limit: Record<string, number>; spent: Record<string, number> };
  const names = Object.keys(budget.spent).sort();
  if (names.length === 0) return html`<span class="muted">-</span>`;
  return html`${names.map((n) => {
    const limit = budget.limit[n];
    const spent = amountOf(budget.spent, n);
    const over = limit !== undefined && spent > limit;
    return html`<span class="amount${over ? " over" : ""}">${n} ${number(spent)}${limit !== undefined ? html`<span class="muted"> / ${number(limit)}</span>` : ""}</span> `;
  })}`;
}

export function reasonCell(run: Json, now: number): Html {
  const status = run.status as string;
  const reason = run.reason as string | undefined;
  if (status === "waiting") {
    const events = (run.waitingFor as string[] | undefined) ?? [];
    const wake = run.wakeAt as string | undefined;
    // An approval (ctx.approval) waits for the event "cairn.approval:<key>".
    const approvals = approvalKeys(events);
    // A parent awaiting ctx.child waits for "cairn.child:<child id>", cairn's own event
    // that nobody sends: it read as "needs input", an event to send.
    const children = events
      .filter((e) => e.startsWith(CHILD_EVENT_PREFIX))
      .map((e) => e.slice(CHILD_EVENT_PREFIX.length));
    const others = events.filter(
      (e) => !e.startsWith(APPROVAL_EVENT_PREFIX) && !e.startsWith(CHILD_EVENT_PREFIX),
    );
    const codes = (names: string[]) =>
      names.map((e, i) => html`${i > 0 ? ", " : ""}<code>${cut(e, 40)}</code>`);
    const what =
      approvals.length > 0
        ? html`<span class="tag human">approval</span> waits for ${codes(approvals)}${others.length > 0 ? html` and ${codes(others)}` : ""}`
        : others.length > 0
          ? html`<span class="tag human">needs input</span> waits for ${codes(others)}`
          : children.length > 0
            ? html`<span class="tag">child</span> waits for child run ${codes(children)}`
            : isRetryBackoffReason(reason)
              ? html`<span class="tag warn">retry backoff</span> ${cut(reason!.replace(/ at [^ ]*$/, ""), 120)}`
              : html`<span class="tag">sleeping</span>`;
    const until = approvals.length > 0 ? "until" : events.length > 0 ? "times out" : "wakes";
    return html`${what}${wake ? html` <span class="muted">· ${until} ${ageTag(wake, now)}</span>` : ""}`;
  }
  if (status === "paused") {
    const tag =
      run.pausedFor === "budget"
        ? html`<span class="tag warn">budget</span> `
        : run.pausedFor === "version"
          ? html`<span class="tag warn">no worker</span> `
          : "";
    return html`${tag}${recordText(reason ?? "", withheldIn(run, "reason"), 120)}`;
  }
  if (status === "running" && run.cancelRequested === true) {
    // Stored by the request (engine.cancel); its worker stops the run within a heartbeat.
    const why =
      reason === undefined ? "" : html` ${recordText(reason, withheldIn(run, "reason"), 120)}`;
    return html`<span class="tag warn">cancel requested</span>${why} <span class="muted">· waiting for its worker to stop it</span>`;
  }
  if (status === "failed") {
    const err = run.error as { message?: string; code?: string } | undefined;
    const shown =
      err?.message !== undefined
        ? recordText(err.message, withheldIn(err, "message"), 140)
        : recordText(reason ?? "failed", withheldIn(run, "reason"), 140);
    return html`<span class="err">${shown}</span>`;
  }
  if (reason) return recordText(reason, withheldIn(run, "reason"), 120);
  return html``;
}

function runsTable(deps: UiDeps, runs: Json[], now: number, filtered: boolean): Html {
  if (runs.length === 0) {
    return html`<div class="empty">${
      filtered
        ? "No runs match."
        : html`No runs yet. Start one from your code, or run a worker: <code>npx cairn worker ./workflows.js</code>`
    }</div>`;
  }
  return html`<table class="runs">
<thead><tr><th>Status</th><th>Run</th><th>Workflow</th><th>Why</th><th class="num">Spend</th><th>Created</th><th>Updated</th></tr></thead>
<tbody>
${runs.map(
  (
    r,
  ) => html`<tr data-run="${r.id as string}" data-sig="${`${r.status as string}|${r.updatedAt as string}`}">
  <td>${statusBadge(r.status as string)}</td>
  <td class="id"><a href="${runUrl(deps, r.id as string)}">${cut(r.id as string, 64)}</a>${r.parentId ? html` <span class="muted" title="child or fork">↳</span>` : ""}</td>
  <td class="wf">${r.workflow as string}<span class="ver">@${r.version as string}</span></td>
  <td class="reason">${reasonCell(r, now)}${heldTag(r, now)}</td>
  <td class="num">${spendCell(r)}</td>
  <td>${ageTag(r.createdAt as string, now)}</td>
  <td>${ageTag(r.updatedAt as string, now)}</td>
</tr>`,
)}
</tbody>
</table>`;
}

function startDialog(deps: UiDeps): Html {
  const b = deps.basePath;
  return html`<dialog id="dialog-start" class="form-dialog">
<form data-api="${b}/api/runs" data-then="open-run">
  <h2>Start a run</h2>
  <label>Workflow
    <select name="body.workflow" data-with-version required>
      ${deps.engine.workflows.map((w) => html`<option value="${w.id}">${w.id}</option>`)}
    </select>
  </label>
  <label>Input <span class="muted">(JSON)</span>
    <textarea name="body.input" data-json rows="6" spellcheck="false" placeholder='{"issue": 42}'></textarea>
  </label>
  <label>Run id <span class="muted">(optional)</span> <input name="body.id" maxlength="256" autocomplete="off"></label>
  <label>Budget <span class="muted">(optional, e.g. usd=5, tokens=100000)</span> <input name="body.budget" data-amounts autocomplete="off"></label>
  <p class="form-error" role="alert" hidden></p>
  <div class="buttons"><button type="button" data-close>Cancel</button><button type="submit" class="primary">Start</button></div>
</form>
</dialog>`;
}
