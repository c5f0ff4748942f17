// The run page's Workspace panel (ctx.workspace): each workspace's checkpoints, one per
// workspace step, with what the step changed; and, chosen by the page's query, the files
// of a checkpoint (?checkpoint=), one file (&file=), or a step's diff with the line diff
// of each changed text file (?diff=<step key>). Plain links: the selection is in the URL,
// so a live refresh (which fetches the same URL) keeps it.

import type { Context } from "hono";
import { html } from "hono/html";
import type { CheckpointEntry, WorkspaceView } from "../../index.js";
import { asText, lineDiff, workspaceDiff } from "../api/workspaces.js";
import { errorAnswer } from "../errors.js";
import type { AppEnv } from "../security.js";
import { cut, number } from "./format.js";
import { type Html, runUrl, type UiDeps } from "./layout.js";

const HASH = /^[0-9a-f]{64}$/;
/** Text shown in the page per file (the API has all of it). */
const SHOW_BYTES = 256 * 1024;
/** Entries the page lists per checkpoint (the API lists them all). */
const TREE_ENTRIES = 2_000;
/** Changed files whose line diff the page shows. */
const DIFF_FILES = 25;

export async function workspacePanel(
  deps: UiDeps,
  c: Context<AppEnv>,
  id: string,
): Promise<Html | undefined> {
  const workspaces = await deps.engine.listWorkspaces(id);
  if (workspaces.length === 0) return undefined;
  const q = {
    checkpoint: c.req.query("checkpoint"),
    file: c.req.query("file"),
    diff: c.req.query("diff"),
  };
  let view: Html = html``;
  try {
    if (q.diff !== undefined) view = await diffView(deps, id, q.diff);
    else if (q.checkpoint !== undefined)
      view = await checkpointView(deps, id, q.checkpoint, q.file);
  } catch (err) {
    const { status, body } = errorAnswer(err, (m) => console.error(`cairn http: ${m}`));
    view = html`<p class="notice error" role="alert">${status < 500 ? cut(body.error.message, 300) : "This cannot be shown; the server's log has the details."}</p>`;
  }
  return html`${workspaces.map((w) => checkpointList(deps, id, w, q))}${view}`;
}

function link(deps: UiDeps, id: string, query: Record<string, string>): string {
  return `${runUrl(deps, id)}?${new URLSearchParams(query).toString()}#workspace`;
}

function changeCounts(ch: { added: number; modified: number; deleted: number }): Html {
  if (ch.added + ch.modified + ch.deleted === 0) return html`<span class="muted">no changes</span>`;
  return html`<span class="ws-counts">${ch.added ? html`<span class="add">+${String(ch.added)}</span> ` : ""}${ch.modified ? html`<span class="mod">~${String(ch.modified)}</span> ` : ""}${ch.deleted ? html`<span class="del">−${String(ch.deleted)}</span>` : ""}</span>`;
}

function checkpointList(
  deps: UiDeps,
  id: string,
  w: WorkspaceView,
  q: { checkpoint?: string | undefined; diff?: string | undefined },
): Html {
  return html`<h3 class="ws-name">${cut(w.name, 64)} <span class="muted">${String(w.checkpoints.length)} checkpoint${w.checkpoints.length === 1 ? "" : "s"}</span></h3>
<table class="ws-checkpoints">
<thead><tr><th>Step</th><th>Changes</th><th>Checkpoint</th><th></th></tr></thead>
<tbody>${w.checkpoints.map((cp) => {
    const base = cp.previous === undefined;
    const current = q.diff === cp.step || (q.diff === undefined && q.checkpoint === cp.checkpoint);
    return html`<tr${current ? html` class="current"` : ""}>
<td><code>${cut(cp.step, 60)}</code>${base ? html` <span class="tag">base</span>` : ""}</td>
<td>${cp.changes ? changeCounts(cp.changes) : html`<span class="muted">${String(cp.files ?? 0)} files</span>`}</td>
<td><code class="hash" title="${cp.checkpoint}">${cp.checkpoint.slice(0, 12)}</code></td>
<td class="links"><a href="${link(deps, id, { checkpoint: cp.checkpoint })}">files</a>${base ? "" : html` · <a href="${link(deps, id, { diff: cp.step })}">diff</a>`}</td>
</tr>`;
  })}</tbody>
</table>`;
}

function entryLine(deps: UiDeps, id: string, checkpoint: string, e: CheckpointEntry): Html {
  const depth = e.path.split("/").length - 1;
  const name = e.path.slice(e.path.lastIndexOf("/") + 1);
  const indent = `d${Math.min(depth, 12)}`;
  if (e.type === "dir") return html`<li class="${indent} dir">${cut(name, 120)}/</li>`;
  if (e.type === "symlink") {
    return html`<li class="${indent} link">${cut(name, 120)} <span class="muted">→ ${cut(e.target, 120)}</span></li>`;
  }
  return html`<li class="${indent}"><a href="${link(deps, id, { checkpoint, file: e.path })}">${cut(name, 120)}</a> <span class="muted">${number(e.size)} B</span></li>`;
}

async function checkpointView(
  deps: UiDeps,
  id: string,
  checkpoint: string,
  file: string | undefined,
): Promise<Html> {
  if (!HASH.test(checkpoint)) {
    return html`<p class="notice error" role="alert">That is not a checkpoint (64 hex digits).</p>`;
  }
  const entries = await deps.engine.readCheckpoint(id, checkpoint);
  const tree = html`<ul class="ws-tree" aria-label="files">${entries
    .slice(0, TREE_ENTRIES)
    .map((e) => entryLine(deps, id, checkpoint, e))}${
    entries.length > TREE_ENTRIES
      ? html`<li class="muted">… ${String(entries.length - TREE_ENTRIES)} more (see the API)</li>`
      : ""
  }</ul>`;
  let shown: Html = html`<p class="muted">Choose a file.</p>`;
  if (file !== undefined) {
    const f = await deps.engine.readWorkspaceFile(id, checkpoint, file);
    const text = asText(f.content.subarray(0, SHOW_BYTES));
    shown = html`<div class="ws-file-head"><code>${cut(f.path, 200)}</code> <span class="muted">${number(f.size)} bytes · mode ${(f.mode & 0o777).toString(8)}</span></div>
${
  text === undefined && asText(f.content) === undefined
    ? html`<p class="muted">Not text (${number(f.size)} bytes); the API gives it as base64.</p>`
    : html`<pre class="ws-file">${text ?? ""}${f.size > SHOW_BYTES ? "\n… (cut; the API has all of it)" : ""}</pre>`
}`;
  }
  return html`<div class="ws-view" id="ws-view">
<h3>Files at <code class="hash">${checkpoint.slice(0, 12)}</code></h3>
<div class="ws-browse">${tree}<div class="ws-pane">${shown}</div></div>
</div>`;
}

async function diffView(deps: UiDeps, id: string, step: string): Promise<Html> {
  const d = await workspaceDiff(deps.engine, id, { step });
  if (d.changes.length === 0) {
    return html`<div class="ws-view" id="ws-view"><h3>Diff of <code>${cut(step, 80)}</code></h3><p class="muted">This step changed nothing.</p></div>`;
  }
  const files = await Promise.all(
    d.changes.slice(0, DIFF_FILES).map(async (ch) => {
      return { ch, file: await lineDiff(deps.engine, id, d, ch.path) };
    }),
  );
  return html`<div class="ws-view" id="ws-view">
<h3>Diff of <code>${cut(step, 80)}</code> <span class="muted"><code class="hash">${d.from.slice(0, 12)}</code> → <code class="hash">${d.to.slice(0, 12)}</code></span></h3>
${files.map(
  ({ ch, file }) => html`<details class="ws-diff" open>
<summary><span class="chg ${ch.change}">${ch.change}</span> <code>${cut(ch.path, 200)}</code></summary>
${
  !file || file.binary
    ? html`<p class="muted">Not text: no line diff.</p>`
    : file.tooLarge
      ? html`<p class="muted">Too large for a line diff here.</p>`
      : diffLines(file.hunks)
}
</details>`,
)}
${d.changes.length > DIFF_FILES ? html`<p class="muted">${String(d.changes.length - DIFF_FILES)} more changed files: see the API (GET /api/runs/{id}/workspace-diff).</p>` : ""}
</div>`;
}

/** A line diff: one block span per line (no text between them: the spans are the lines). */
function diffLines(
  hunks: Array<{
    oldStart: number;
    oldLines: number;
    newStart: number;
    newLines: number;
    lines: string[];
  }>,
): Html {
  const line = (l: string) => {
    const kind = l.startsWith("+") ? "ins" : l.startsWith("-") ? "del" : "ctx";
    return html`<span class="${kind}">${l}</span>`;
  };
  return html`<pre class="diff">${hunks.map(
    (h) =>
      html`<span class="hunk">@@ -${String(h.oldStart)},${String(h.oldLines)} +${String(h.newStart)},${String(h.newLines)} @@</span>${h.lines.map(line)}`,
  )}</pre>`;
}
