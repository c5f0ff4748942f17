// The page frame every dashboard page shares, and what pages need to render: the engine,
// where the app is mounted, the clock, and what the caller may do.
//
// Pages are server-rendered with hono's html`` tag, which escapes every interpolated value
// (ids, names, reasons, payloads). raw() is used only for markup built here. The page's
// script (assets/app.js) keeps marked regions live: on a Server-Sent Event it fetches the
// page again and swaps those regions, so all rendering stays on the server.

import type { Context } from "hono";
import { html } from "hono/html";
import type { HtmlEscapedString } from "hono/utils/html";
import type { Clock, Engine } from "../../index.js";
import { requestBase } from "../public-base.js";
import { runIdSegment } from "../run-id-segment.js";
import type { AppEnv } from "../security.js";
import { cut } from "./format.js";

export type Html = HtmlEscapedString | Promise<HtmlEscapedString>;

export interface UiDeps {
  engine: Engine;
  basePath: string;
  clock: Clock;
  authRequired: boolean;
  assetVersion: string;
}

/** The pages' dependencies for one request: `basePath` is where the request found the app
 *  (public-base.ts), which differs from the option when another Hono app took the routes
 *  under a prefix of its own. */
export function depsFor(deps: UiDeps, c: Context<AppEnv>): UiDeps {
  const base = requestBase(c, deps.basePath);
  return base === deps.basePath ? deps : { ...deps, basePath: base };
}

export function canAct(c: Context<AppEnv>): boolean {
  return c.get("role") === "act";
}

export function runUrl(deps: UiDeps, id: string): string {
  return `${deps.basePath}/runs/${runIdSegment(id)}`;
}

export function layout(
  deps: UiDeps,
  c: Context<AppEnv>,
  o: { title: string; nav: "runs" | "workers" | "none"; live?: string; body: Html },
): Html {
  const b = deps.basePath;
  const v = deps.assetVersion;
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>${o.title} · cairn</title>
<link rel="icon" href="${b}/assets/icon.svg" type="image/svg+xml">
<link rel="stylesheet" href="${b}/assets/style.css?v=${v}">
<script src="${b}/assets/app.js?v=${v}" defer></script>
</head>
<body data-base="${b}" data-now="${deps.clock.now()}"${o.live ? html` data-live="${o.live}"` : ""}>
<header class="top">
  <a class="brand" href="${b}/"><span class="mark" aria-hidden="true"></span>cairn</a>
  ${
    o.nav === "none" && c.get("role") === undefined
      ? ""
      : html`<nav>
    <a href="${b}/"${o.nav === "runs" ? html` aria-current="page"` : ""}>Runs</a>
    <a href="${b}/workers"${o.nav === "workers" ? html` aria-current="page"` : ""}>Workers</a>
    <a href="${b}/api/openapi.json">API</a>
  </nav>`
  }
  <span class="spacer"></span>
  ${o.live ? html`<span class="live" id="live-status" data-state="connecting" title="Live updates"><span class="dot"></span><span class="live-text">connecting</span></span>` : ""}
  ${
    deps.authRequired && c.get("role") !== undefined
      ? html`<span class="role">${canAct(c) ? "full access" : "read-only"}</span>
  <form method="post" action="${b}/logout" class="logout"><button type="submit" class="link">Log out</button></form>`
      : ""
  }
</header>
<main>
${o.body}
</main>
<div id="toast" role="status" aria-live="polite" hidden></div>
</body>
</html>`;
}

export const STATUS_LABEL: Record<string, string> = {
  pending: "pending",
  running: "running",
  waiting: "waiting",
  paused: "paused",
  completed: "completed",
  failed: "failed",
  canceled: "canceled",
};

export function statusBadge(status: string): Html {
  return html`<span class="badge s-${status}" data-status="${status}">${STATUS_LABEL[status] ?? status}</span>`;
}

/** A <time> that the page's script keeps as a relative age ("3m ago"). */
export function ageTag(iso: string, now: number): Html {
  const ms = Date.parse(iso);
  return html`<time datetime="${iso}" data-age title="${iso}">${relative(ms, now)}</time>`;
}

function relative(ms: number, now: number): string {
  const d = now - ms;
  const a = Math.abs(d);
  const unit =
    a < 1_000
      ? "just now"
      : a < 60_000
        ? `${Math.floor(a / 1_000)}s`
        : a < 3_600_000
          ? `${Math.floor(a / 60_000)}m`
          : a < 86_400_000
            ? `${Math.floor(a / 3_600_000)}h`
            : `${Math.floor(a / 86_400_000)}d`;
  if (unit === "just now") return unit;
  return d >= 0 ? `${unit} ago` : `in ${unit}`;
}

/** Text of a record (a reason, an error's message or stack, a comment; an approval's request
 *  shown as text) as shown: itself, cut
 *  to `max`, or, when the record's `withheld` names it (`why`), a tag saying what it is: its
 *  placeholder text alone reads like a string a person could have typed. */
export function recordText(text: string, why: unknown, max: number): Html {
  if (typeof why !== "object" || why === null) return html`${cut(text, max)}`;
  const w = why as { reason?: string; keyId?: string };
  return w.reason === "encrypted"
    ? html`<span class="tag warn" title="This server is not given the key; the text is not shown">encrypted with key "${cut(String(w.keyId), 64)}"</span>`
    : html`<span class="tag warn" title="What is stored cannot be decoded; it is not shown">undecodable</span>`;
}

/** `record.withheld[field]`, from a record's JSON. */
export function withheldIn(record: unknown, field: string): unknown {
  const withheld = (record as { withheld?: Record<string, unknown> } | undefined)?.withheld;
  return withheld?.[field];
}
