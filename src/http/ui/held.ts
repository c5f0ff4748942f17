// A run held for a step body still running in the worker that released it (RunView's
// heldBy/heldUntil): no other worker claims it until the hold ends. Shown in the runs list
// (a tag beside why the run stands) and the run's details (which worker, until when), so a
// run that stays pending while workers sit idle says why. A hold that runs out changes
// nothing in the run (its heldBy/heldUntil stay until the worker clears them), so no live
// update comes: the list's tag carries its end and the page drops it then, as it keeps the
// ages current.

import { html } from "hono/html";
import { cut } from "./format.js";
import { ageTag, type Html } from "./layout.js";

type Json = Record<string, unknown>;

/** Whether `run` is held now: a heldUntil past means the hold has run out. */
function heldNow(run: Json, now: number): boolean {
  const until = run.heldUntil as string | undefined;
  return run.heldBy !== undefined && until !== undefined && Date.parse(until) > now;
}

/** The runs list's tag for a held run; nothing for one that is not held (now). */
export function heldTag(run: Json, now: number): Html {
  if (!heldNow(run, now)) return html``;
  const title = `held by worker ${run.heldBy as string} until ${run.heldUntil as string}: a step body of it still runs there`;
  // data-held-until: the page takes the tag away once the hold has run out (app.js, by the
  // server's clock as the ages go), with no change to the run for a live update to carry.
  return html` <span class="tag warn held" title="${title}" data-held-until="${run.heldUntil as string}">held</span>`;
}

/** The run page's line for a hold: the worker and until when (or that it has run out). */
export function heldMeta(run: Json, now: number): Html {
  const by = run.heldBy as string | undefined;
  const until = run.heldUntil as string | undefined;
  if (by === undefined || until === undefined) return html``;
  // Held now: the words for a hold that ran out are there too, hidden, and the page swaps
  // them in when it runs out (app.js), as the list drops its tag.
  return html`<div class="held"><dt>Held by</dt><dd><code>${cut(by, 60)}</code> ${
    heldNow(run, now)
      ? html`<span class="muted" data-held-until="${until}">(a step body still runs there) until</span><span class="muted" data-held-after="${until}" hidden>(the hold ran out</span> ${ageTag(until, now)}<span class="muted" data-held-after="${until}" hidden>)</span>`
      : html`<span class="muted">(the hold ran out</span> ${ageTag(until, now)}<span class="muted">)</span>`
  }</dd></div>`;
}
