// The smaller pages: workers, login, and the pages for errors (not found, refused).

import type { Context } from "hono";
import { html } from "hono/html";
import { workersState } from "../api/system.js";
import type { AppEnv } from "../security.js";
import { cut, duration } from "./format.js";
import { ageTag, type Html, layout, runUrl, type UiDeps } from "./layout.js";
import { reasonCell } from "./runs-page.js";

type Json = Record<string, unknown>;

export async function workersPage(deps: UiDeps, c: Context<AppEnv>): Promise<Response> {
  const state = await workersState(deps.engine);
  const live = `${deps.basePath}/api/live/workers`;
  const body = html`<div class="page-head"><h1>Workers</h1></div>
<div data-region="workers" id="region-workers">${workersBody(deps, state, deps.clock.now())}</div>`;
  return c.html(layout(deps, c, { title: "Workers", nav: "workers", live, body }));
}

function workersBody(deps: UiDeps, state: Json, now: number): Html {
  const workers = state.workers as Json[];
  const unserved = state.unserved as Json[];
  const served = new Map<string, number>();
  for (const w of workers) {
    if (!w.live) continue;
    for (const id of w.workflows as string[]) served.set(id, (served.get(id) ?? 0) + 1);
  }
  const missing = [
    ...new Set(unserved.map((r) => `${r.workflow as string}@${r.version as string}`)),
  ];
  return html`
${
  missing.length > 0
    ? html`<p class="notice warn" role="alert"><strong>No live worker has ${missing.map((m, i) => html`${i > 0 ? ", " : ""}<code>${m}</code>`)}.</strong> ${String(unserved.length)} run${unserved.length === 1 ? " is" : "s are"} paused until a worker with that version starts (e.g. <code>npx cairn worker ./workflows.js</code> built from that version's code).</p>`
    : ""
}
<section class="panel">
<h2>Live workers and what they serve</h2>
${
  workers.length === 0
    ? html`<p class="empty">No worker is registered in this store. Start one: <code>npx cairn worker ./workflows.js</code></p>`
    : html`<table class="workers">
<thead><tr><th>State</th><th>Worker</th><th>Host</th><th>PID</th><th>Serves</th><th>Started</th><th>Heartbeat</th></tr></thead>
<tbody>${workers.map(
        (w) => html`<tr class="${w.live ? "w-live" : "w-stale"}">
  <td><span class="badge ${w.live ? "s-running" : "s-canceled"}">${w.live ? "live" : "stale"}</span></td>
  <td class="id">${cut(w.id as string, 40)}</td>
  <td>${cut(w.host as string, 40)}</td>
  <td class="num">${String(w.pid)}</td>
  <td>${(w.workflows as string[]).map((id) => html`<code class="chip">${cut(id, 60)}</code> `)}</td>
  <td>${ageTag(w.startedAt as string, now)}</td>
  <td>${ageTag(w.heartbeatAt as string, now)} <span class="muted">(${duration(Math.max(0, now - Date.parse(w.heartbeatAt as string)))})</span></td>
</tr>`,
      )}</tbody>
</table>`
}
${
  served.size > 0
    ? html`<p class="muted">Served now: ${[...served.entries()]
        .sort()
        .map(([id, n]) => html`<code class="chip">${cut(id, 60)}</code> ×${String(n)} `)}</p>`
    : ""
}
</section>
<section class="panel">
<h2>Runs no live worker serves</h2>
${
  unserved.length === 0
    ? html`<p class="empty">None: every ready run's workflow@version has a live worker.</p>`
    : html`<table class="runs"><thead><tr><th>Run</th><th>Workflow</th><th>Why</th><th>Updated</th></tr></thead><tbody>${unserved.map(
        (r) => html`<tr data-run="${r.id as string}">
  <td class="id"><a href="${runUrl(deps, r.id as string)}">${cut(r.id as string, 64)}</a></td>
  <td class="wf">${r.workflow as string}<span class="ver">@${r.version as string}</span></td>
  <td class="reason">${reasonCell(r, now)}</td>
  <td>${ageTag(r.updatedAt as string, now)}</td>
</tr>`,
      )}</tbody></table>`
}
</section>`;
}

export function loginPage(
  deps: UiDeps,
  c: Context<AppEnv>,
  o: { status: 200 | 401 | 429; message?: string; next?: string },
): Response | Promise<Response> {
  const b = deps.basePath;
  const next = safeNext(o.next ?? c.req.path, b);
  const body = html`<section class="login panel">
<h1>Sign in</h1>
<p>This cairn server needs a token. Ask whoever started it (<code>cairn ui --token …</code>).</p>
${o.message ? html`<p class="notice error" role="alert">${o.message}</p>` : ""}
<form method="post" action="${b}/login">
  <input type="hidden" name="next" value="${next}">
  <label>Token <input type="password" name="token" required autocomplete="current-password" autofocus></label>
  <div class="buttons"><button type="submit" class="primary">Sign in</button></div>
</form>
</section>`;
  return c.html(layout(deps, c, { title: "Sign in", nav: "none", body }), o.status);
}

/** Only a path of this app: never another site (no open redirect). Control characters
 *  are refused: browsers drop tabs and newlines from a URL, so "/\t/evil.example" would
 *  be "//evil.example". */
export function safeNext(next: string, basePath: string): string {
  const fallback = `${basePath}/`;
  if (!next.startsWith("/") || next.startsWith("//") || next.includes("\\")) return fallback;
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused
  if (/[\u0000-\u001f\u007f]/.test(next)) return fallback;
  if (next === `${basePath}/login` || next.startsWith(`${basePath}/api/`)) return fallback;
  return next.startsWith(basePath) ? next : fallback;
}

export function messagePage(
  deps: UiDeps,
  c: Context<AppEnv>,
  status: number,
  title: string,
  message: string,
): Response | Promise<Response> {
  const body = html`<section class="panel message"><h1>${title}</h1><p>${message}</p><p><a href="${deps.basePath}/">Back to the runs</a></p></section>`;
  return c.html(layout(deps, c, { title, nav: "none", body }), status as 404);
}

export function notFoundPage(
  deps: UiDeps,
  c: Context<AppEnv>,
  message: string,
): Response | Promise<Response> {
  return messagePage(deps, c, 404, "Not found", message);
}
