// One run: status and why, budget, the timeline, what its streamed model calls say (live),
// every step with its attempts, errors, spend and result, its workspaces (checkpoints,
// files, diffs), the events sent to it, its input and output, and the actions its status
// allows (send an event, cancel, resume with a new budget, fork from a step).

import type { Context } from "hono";
import { html } from "hono/html";
import { EncryptedValue, UndecodableValue } from "../../index.js";
import { amountOf } from "../../lib/amounts.js";
import { leadingText } from "../../lib/text.js";
import { type ParamSpec, readQuery } from "../api/route.js";
import { eventJson, runJson, stepJson } from "../json.js";
import { runIdSegment } from "../run-id-segment.js";
import { s } from "../schema.js";
import type { AppEnv } from "../security.js";
import { amounts, cut, duration, isFinished, number, pretty } from "./format.js";
import { heldMeta } from "./held.js";
import {
  ageTag,
  canAct,
  type Html,
  layout,
  recordText,
  runUrl,
  STATUS_LABEL,
  statusBadge,
  type UiDeps,
  withheldIn,
} from "./layout.js";
import { modelStreamPanel } from "./model-stream-panel.js";
import { notFoundPage } from "./pages.js";
import { actionDialogs, offeredActions, type RunFacts, waitsForApproval } from "./run-actions.js";
import { reasonCell } from "./runs-page.js";
import { timeline } from "./timeline.js";
import { workspacePanel } from "./workspace-panel.js";

type Json = Record<string, unknown>;

/** Values longer than this (as pretty JSON) are folded. */
const FOLD_CHARS = 400;
/** Values longer than this are cut in the page (the API has them whole). */
const SHOW_CHARS = 100_000;
/** What the page shows of all its values together: past it, a value is summarized (its
 *  start and size) and left to the API, so a run of thousands of large results or events
 *  still makes a page of bounded size (the live refresh fetches it again on each change). */
const PAGE_SHOW_CHARS = 1_000_000;

/** The room left on the page for values, spent in the order they are drawn. */
interface ShowRoom {
  chars: number;
}

/** Steps and events the page shows at once: a run of thousands of steps (an agent's tool
 *  calls) made a page of megabytes, drawn again on every live refresh. The rest are a link
 *  away, read from the store a page at a time (engine.readSteps, readEvents). */
export const UI_STEPS_PAGE = 100;
export const UI_EVENTS_PAGE = 100;

/** Where the page's steps and events start: the `next` of the page before. */
const PAGE_QUERY: Record<string, ParamSpec> = {
  stepsFrom: {
    schema: s.integer({ minimum: 0 }),
    description: "The first call position of the steps shown.",
  },
  eventsAfter: {
    schema: s.integer({ minimum: 0 }),
    description: "The events shown have a greater seq.",
  },
};

/** Which page of steps and events this is, and where the next ones start. */
interface Paging {
  id: string;
  at: { stepsFrom?: number; eventsAfter?: number };
  stepsNext: number | undefined;
  eventsNext: number | undefined;
}

/** The page's URL with `change` applied to where its steps and events start. */
function pageUrl(deps: UiDeps, p: Paging, change: Paging["at"]): string {
  const at = { ...p.at, ...change };
  const q = new URLSearchParams();
  if (at.stepsFrom) q.set("stepsFrom", String(at.stepsFrom));
  if (at.eventsAfter) q.set("eventsAfter", String(at.eventsAfter));
  const query = q.toString();
  return `${runUrl(deps, p.id)}${query ? `?${query}` : ""}`;
}

/** The count of steps shown: all of them, unless the run has more pages. */
function stepCount(steps: Json[], p: Paging): string {
  const shown = steps.filter((s) => !(s.key as string).startsWith("@")).length;
  if (p.stepsNext === undefined && !p.at.stepsFrom) return String(shown);
  return `${shown} shown of more`;
}

/** One list's pager: what tells it apart is its name, its query field, its next start and its page size. */
interface PagerOf {
  list: "steps" | "events";
  field: "stepsFrom" | "eventsAfter";
  next: number | undefined;
  size: number;
}

function pager(deps: UiDeps, p: Paging, of: PagerOf): Html {
  const at = p.at[of.field];
  if (of.next === undefined && !at) return html``;
  const region = `#region-${of.list}`;
  return html`<nav class="pager" aria-label="${of.list} pages">${
    at ? html`<a href="${pageUrl(deps, p, { [of.field]: 0 })}${region}">First ${of.list}</a>` : ""
  }${
    of.next !== undefined
      ? html` <a rel="next" href="${pageUrl(deps, p, { [of.field]: of.next })}${region}">Next ${String(of.size)} ${of.list}</a>`
      : ""
  }</nav>`;
}

export async function runPage(deps: UiDeps, c: Context<AppEnv>, id: string): Promise<Response> {
  const at = readQuery(c, PAGE_QUERY) as { stepsFrom?: number; eventsAfter?: number };
  const view = await deps.engine.getRun(id);
  if (!view) return notFoundPage(deps, c, `Run "${cut(id, 80)}" does not exist.`);
  const [stepsPage, eventsPage, workspace, stream] = await Promise.all([
    deps.engine.readSteps(id, { from: at.stepsFrom ?? 0, limit: UI_STEPS_PAGE }),
    deps.engine.readEvents(id, { after: at.eventsAfter ?? 0, limit: UI_EVENTS_PAGE }),
    workspacePanel(deps, c, id),
    // A live refresh swaps only the data-regions; the stream panel is the script's by then.
    c.req.header("x-cairn-refresh") === "1" ? undefined : modelStreamPanel(deps, view),
  ]);
  const run = runJson(view);
  if ("input" in run) run.input = pageValue(view.input, run.input);
  if ("output" in run) run.output = pageValue(view.output, run.output);
  const paging = { id, at, stepsNext: stepsPage.next, eventsNext: eventsPage.next };
  const steps = stepsPage.steps.map((s) => {
    const json = stepJson(s);
    if ("result" in json) json.result = pageValue(s.result, json.result);
    return json;
  });
  const events = eventsPage.events.map((e) => {
    const json = eventJson(e);
    json.payload = pageValue(e.payload, json.payload);
    return json;
  });
  const now = deps.clock.now();
  const b = deps.basePath;
  const live = `${b}/api/live/runs/${runIdSegment(id)}`;
  const act = canAct(c);
  // The input and output first: they are what a look at a run is most often for.
  const room: ShowRoom = { chars: PAGE_SHOW_CHARS };
  const ioHtml = io(run, room);
  const stepsHtml = html`${stepList(steps, now, room)}${pager(deps, paging, { list: "steps", field: "stepsFrom", next: paging.stepsNext, size: UI_STEPS_PAGE })}`;
  const eventsHtml = html`${eventList(events, now, room)}${pager(deps, paging, { list: "events", field: "eventsAfter", next: paging.eventsNext, size: UI_EVENTS_PAGE })}`;
  const facts = act ? await runFacts(deps, run, view) : {};

  const body = html`
<nav class="crumbs"><a href="${b}/">Runs</a> <span aria-hidden="true">/</span> <span class="id">${cut(id, 120)}</span></nav>
<section data-region="head" id="region-head">${head(deps, run, steps, paging, act, facts, now)}</section>
<section class="panel">
  <h2>Timeline</h2>
  <div data-region="timeline" id="region-timeline">${timeline(run, steps, events, now)}</div>
</section>
${stream ?? ""}
<section class="panel">
  <h2>Steps</h2>
  <div data-region="steps" id="region-steps">${stepsHtml}</div>
</section>
${
  workspace
    ? html`<section class="panel" id="workspace">
  <h2>Workspace</h2>
  <div data-region="workspace" id="region-workspace">${workspace}</div>
</section>`
    : ""
}
<div class="two">
  <section class="panel">
    <h2>Input and output</h2>
    <div data-region="io" id="region-io">${ioHtml}</div>
  </section>
  <section class="panel">
    <h2>Events</h2>
    <div data-region="events" id="region-events">${eventsHtml}</div>
  </section>
</div>
<div data-region="dialogs" id="region-dialogs">${act ? actionDialogs(deps, run, steps, facts) : ""}</div>`;
  return c.html(layout(deps, c, { title: `Run ${cut(id, 40)}`, nav: "runs", live, body }));
}

/** What the actions need to know besides the run: a failed or paused child's parent's
 *  status (a child of a canceled parent is not resumed), and whether any approval the run
 *  waits for can still be answered. */
async function runFacts(
  deps: UiDeps,
  run: Json,
  view: { id: string; parentId?: string | undefined; status: string },
): Promise<RunFacts> {
  const facts: RunFacts = {};
  if (view.parentId !== undefined && (view.status === "failed" || view.status === "paused")) {
    const parent = await deps.engine.getRun(view.parentId);
    if (parent) facts.parentStatus = parent.status;
  }
  if (waitsForApproval(run)) {
    facts.approvals = await deps.engine.listApprovals(view.id);
    facts.pendingApprovals = facts.approvals.filter((a) => a.status === "pending");
  }
  return facts;
}

function head(
  deps: UiDeps,
  run: Json,
  steps: Json[],
  paging: Paging,
  act: boolean,
  facts: RunFacts,
  now: number,
): Html {
  const status = run.status as string;
  const terminal = isFinished(status);
  const budget = run.budget as { limit: Record<string, number>; spent: Record<string, number> };
  const created = Date.parse(run.createdAt as string);
  const updated = Date.parse(run.updatedAt as string);
  const offered = act ? offeredActions(run, steps, facts) : [];
  const actions = offered.map(({ action: a, refusal }) =>
    refusal === undefined
      ? html`<button type="button" class="${a.style?.(run) ?? ""}" data-open="dialog-${a.id}">${a.label}</button>`
      : html`<button type="button" disabled title="${refusal}">${a.label}</button>`,
  );
  const refusals = offered.flatMap((o) => (o.refusal === undefined ? [] : [o.refusal]));
  const error = run.error as { name: string; code?: string; message: string } | undefined;
  return html`<div class="run-head">
  <div class="title">
    <h1 class="id" title="${run.id as string}">${cut(run.id as string, 80)}</h1>
    ${statusBadge(status)}
  </div>
  <div class="actions">${actions}${!act ? html`<span class="muted">read-only access</span>` : ""}</div>
</div>
${refusals.map((r) => html`<p class="muted action-refusal">${r}</p>`)}
${status !== "failed" && (status === "waiting" || status === "paused" || run.reason) ? html`<p class="why s-${status}">${reasonCell(run, now)}${status === "paused" && run.pausedFor === "version" ? html` · <a href="${deps.basePath}/workers">workers</a>` : ""}</p>` : ""}
${error ? html`<p class="why s-failed"><strong>${error.name}${error.code ? ` [${error.code}]` : ""}:</strong> ${recordText(error.message, withheldIn(error, "message"), 1000)}</p>` : ""}
<dl class="meta">
  <div><dt>Workflow</dt><dd>${run.workflow as string}<span class="ver">@${run.version as string}</span></dd></div>
  <div><dt>Created</dt><dd>${ageTag(run.createdAt as string, now)}</dd></div>
  <div><dt>${terminal ? "Took" : "Age"}</dt><dd>${duration((terminal ? updated : now) - created)}</dd></div>
  <div><dt>Updated</dt><dd>${ageTag(run.updatedAt as string, now)}</dd></div>
  ${run.parentId ? html`<div><dt>Parent</dt><dd><a href="${runUrl(deps, run.parentId as string)}">${cut(run.parentId as string, 60)}</a></dd></div>` : ""}
  <div><dt>Steps</dt><dd>${stepCount(steps, paging)}</dd></div>
  ${heldMeta(run, now)}
</dl>
${budgetBlock(budget)}`;
}

function budgetBlock(budget: {
  limit: Record<string, number>;
  spent: Record<string, number>;
}): Html {
  const limited = Object.keys(budget.limit).sort();
  const free = Object.keys(budget.spent)
    .filter((n) => budget.limit[n] === undefined)
    .sort();
  if (limited.length === 0 && free.length === 0) return html``;
  return html`<div class="budget" aria-label="budget">
${limited.map((n) => {
  const spent = amountOf(budget.spent, n);
  const limit = budget.limit[n]!;
  const over = spent > limit;
  return html`<div class="budget-row${over ? " over" : ""}">
  <span class="name">${n}</span>
  <progress value="${String(Math.min(spent, limit))}" max="${String(limit || 1)}"></progress>
  <span class="figures">${number(spent)} of ${number(limit)}${over ? " · over budget" : ""}</span>
</div>`;
})}
${free.length > 0 ? html`<div class="spent-free"><span class="name">Spent</span> ${free.map((n, i) => html`${i > 0 ? " · " : ""}${n} <strong>${number(amountOf(budget.spent, n))}</strong>`)} <span class="muted">(no limit)</span></div>` : ""}
</div>`;
}

/** A stored value the page does not show: the codec cannot decode it, or it is encrypted
 *  with a key this server was not given. Told apart by the view's own value, not by its JSON
 *  text: a user's string "[undecodable value]" is shown as the string it is. */
class Withheld {
  constructor(
    readonly title: string,
    readonly label: string,
  ) {}
}

/** A value of the page: `json`, or a Withheld for what `view` could not show. */
function pageValue(view: unknown, json: unknown): unknown {
  if (view instanceof UndecodableValue) {
    return new Withheld("The stored value cannot be decoded; it is not shown", "undecodable value");
  }
  if (view instanceof EncryptedValue) {
    return new Withheld(
      "This server is not given the key; the value is not shown",
      `encrypted with key "${view.keyId}"`,
    );
  }
  return json;
}

function valueBlock(value: unknown, room: ShowRoom): Html {
  if (value instanceof Withheld) {
    return html`<span class="tag warn" title="${value.title}">${value.label}</span>`;
  }
  const text = pretty(value);
  const limit = Math.min(SHOW_CHARS, room.chars);
  room.chars = Math.max(0, room.chars - Math.min(text.length, limit));
  if (text.length <= FOLD_CHARS && text.length <= limit) {
    return html`<pre class="value">${text}</pre>`;
  }
  const kb = (Buffer.byteLength(text) / 1024).toFixed(1);
  const summary = html`<summary><code>${cut(text.replace(/\s+/g, " "), 120)}</code> <span class="muted">${kb} KB</span></summary>`;
  if (limit < FOLD_CHARS) {
    return html`<details class="value">${summary}<p class="muted">The page has shown as much as it holds of values, so this one is not shown here; the API has it.</p></details>`;
  }
  const shown =
    text.length > limit ? `${leadingText(text, limit)}\n… (cut; the API has all of it)` : text;
  return html`<details class="value">${summary}<pre class="value">${shown}</pre></details>`;
}

function stepList(steps: Json[], now: number, room: ShowRoom): Html {
  if (steps.length === 0) return html`<p class="empty">No steps recorded yet.</p>`;
  return html`<ol class="steps">${steps.map((s, index) => {
    const attempts = s.attempts as Array<Json & { error?: Json }>;
    const first = Date.parse((s.intentAt ?? s.startedAt) as string);
    const done = s.completedAt ? Date.parse(s.completedAt as string) : undefined;
    const internal = (s.key as string).startsWith("@");
    const lost = attempts.filter(
      (a) => (a.error as Json | undefined)?.code === "WORKER_LOST",
    ).length;
    const failures = attempts.filter((a) => a.error).length - lost;
    const spend = amounts(s.spend as Record<string, number>);
    const error = s.error as
      | { name: string; code?: string; message: string; stack?: string }
      | undefined;
    return html`<li id="step-${index}" class="step st-${s.status as string}${internal ? " internal" : ""}">
<details data-key="${s.key as string}">
  <summary>
    <span class="dot" title="${s.status as string}"></span>
    <span class="key">${cut(s.key as string, 80)}</span>
    <span class="kind">${s.kind as string}</span>
    <span class="st">${s.status as string}</span>
    ${failures > 0 ? html`<span class="tag err">${String(failures)} failed attempt${failures > 1 ? "s" : ""}</span>` : ""}
    ${lost > 0 ? html`<span class="tag warn" title="the worker executing it stopped; another took the run over">worker lost${lost > 1 ? ` ×${lost}` : ""}</span>` : ""}
    <span class="grow"></span>
    ${spend ? html`<span class="spend">${spend}</span>` : ""}
    <span class="dur">${done !== undefined ? duration(done - first) : ageTag((s.intentAt ?? s.startedAt) as string, now)}</span>
  </summary>
  <div class="step-body">
    ${error ? html`<div class="error-block"><strong>${error.name}${error.code ? ` [${error.code}]` : ""}:</strong> ${recordText(error.message, withheldIn(error, "message"), 2000)}${error.stack ? html`<details><summary>stack</summary><pre>${recordText(error.stack, withheldIn(error, "stack"), 8000)}</pre></details>` : ""}</div>` : ""}
    ${s.status === "completed" ? html`<div class="label">Result</div>${valueBlock(s.result, room)}` : ""}
    ${
      attempts.length > 0
        ? html`<table class="attempts"><thead><tr><th>#</th><th>Started</th><th>Took</th><th>Outcome</th><th>Spend</th></tr></thead><tbody>${attempts.map(
            (a) => {
              const aErr = a.error as { name: string; code?: string; message: string } | undefined;
              const started = Date.parse(a.startedAt as string);
              const ended = a.endedAt ? Date.parse(a.endedAt as string) : undefined;
              return html`<tr class="${aErr ? (aErr.code === "WORKER_LOST" ? "lost" : "failed") : "ok"}">
<td>${String(a.attempt)}</td>
<td><time datetime="${a.startedAt as string}" data-local>${a.startedAt as string}</time></td>
<td>${ended !== undefined ? duration(ended - started) : "-"}</td>
<td>${aErr ? html`<span class="${aErr.code === "WORKER_LOST" ? "lost" : "err"}">${aErr.code === "WORKER_LOST" ? "worker lost" : aErr.name}</span> ${recordText(aErr.message, withheldIn(aErr, "message"), 300)}${a.retryAt ? html` <span class="muted">· retry at <time datetime="${a.retryAt as string}" data-local>${a.retryAt as string}</time></span>` : ""}` : "ok"}</td>
<td>${amounts(a.spend as Record<string, number>) || "-"}</td>
</tr>`;
            },
          )}</tbody></table>`
        : ""
    }
  </div>
</details>
</li>`;
  })}</ol>`;
}

function io(run: Json, room: ShowRoom): Html {
  const status = run.status as string;
  return html`<div class="label">Input</div>
${run.input === undefined ? html`<p class="muted">none</p>` : valueBlock(run.input, room)}
<div class="label">Output</div>
${status === "completed" ? valueBlock(run.output, room) : html`<p class="muted">${status === "failed" ? "none: the run failed" : `none yet (${STATUS_LABEL[status] ?? status})`}</p>`}`;
}

function eventList(events: Json[], now: number, room: ShowRoom): Html {
  if (events.length === 0) return html`<p class="empty">No events sent to this run.</p>`;
  return html`<ul class="events">${events.map(
    (e) => html`<li>
  <div class="ev-head"><code>${cut(e.name as string, 80)}</code> ${ageTag(e.sentAt as string, now)}
  ${e.consumedBy ? html`<span class="tag ok">consumed by ${cut(e.consumedBy as string, 60)}</span>` : html`<span class="tag">not consumed yet</span>`}
  ${e.idempotencyKey ? html`<span class="muted" title="idempotency key">key ${cut(e.idempotencyKey as string, 40)}</span>` : ""}</div>
  ${valueBlock(e.payload, room)}
</li>`,
  )}</ul>`;
}
