// A run's timeline drawn to scale: one row per call, from the run's creation to its end
// (or now). Attempts are bars (failed ones red, with their error as a tooltip), retry
// backoffs are dashed gaps, sleeps and waits are hatched spans, a worker that died
// mid-step is a lightning mark where the next worker took the run over (its WORKER_LOST
// attempt), and events sent to the run are marks on the run's own row.
//
// SVG with percentage coordinates: no inline styles (the page's CSP forbids them), and it
// scales with the window.

import { html } from "hono/html";
import { cut, duration, isFinished } from "./format.js";
import type { Html } from "./layout.js";

type Json = Record<string, unknown>;

interface Attempt {
  attempt: number;
  startedAt: string;
  endedAt?: string;
  error?: { name: string; code?: string; message: string };
  retryAt?: string;
}

/** Calls recorded only for determinism (ctx.now/random/uuid) are not drawn. */
const HIDDEN_KINDS = new Set(["now", "random", "uuid"]);
/** Narrowest bar, in percent of the width, so a 2 ms step in a 2 day run stays visible. */
export const MIN_WIDTH = 0.4;

const ms = (iso: string | undefined) => (iso === undefined ? undefined : Date.parse(iso));

export function timeline(run: Json, steps: Json[], events: Json[], now: number): Html {
  const terminal = isFinished(run.status);
  const t0 = ms(run.createdAt as string)!;
  const times = recordedTimes(run, steps, events);
  const end = times.reduce((a, b) => Math.max(a, b), terminal ? t0 : now);
  const scale = new Scale(t0, end, terminal ? end : now, times);
  const rows = steps
    .map((s, index) => ({ s, index }))
    .filter(({ s }) => !HIDDEN_KINDS.has(s.kind as string));
  return html`<div class="timeline" data-span="${scale.span}">
${axis(scale.span)}
${runRow(scale, run, events)}
${rows.map(({ s, index }) => stepRow(scale, s, index))}
</div>`;
}

/** Every time the run's records mention: the scale must hold them all. */
function recordedTimes(run: Json, steps: Json[], events: Json[]): number[] {
  const times: number[] = [ms(run.createdAt as string)!, ms(run.updatedAt as string)!];
  for (const s of steps) {
    for (const k of ["startedAt", "completedAt", "intentAt"]) {
      const t = ms(s[k] as string | undefined);
      if (t !== undefined) times.push(t);
    }
    for (const a of s.attempts as Attempt[]) {
      for (const t of [ms(a.startedAt), ms(a.endedAt), ms(a.retryAt)]) {
        if (t !== undefined) times.push(t);
      }
    }
  }
  for (const e of events) times.push(ms(e.sentAt as string)!);
  return times;
}

/** Times to percentages of the width, and the shapes drawn at them. */
class Scale {
  readonly span: number;

  constructor(
    readonly t0: number,
    readonly end: number,
    /** Where what has not ended yet is drawn to: the run's end, or now. */
    readonly openEnd: number,
    /** Every recorded time (to find the last record before a takeover). */
    readonly times: number[],
  ) {
    this.span = Math.max(end - t0, 1);
  }

  x(t: number): number {
    return ((Math.min(Math.max(t, this.t0), this.end) - this.t0) / this.span) * 100;
  }

  bar(from: number, to: number, cls: string, label: string): Html {
    const left = this.x(from);
    const width = Math.max(this.x(to) - left, MIN_WIDTH);
    return html`<rect class="${cls}" x="${fmt(Math.min(left, 100 - MIN_WIDTH))}%" y="4" width="${fmt(width)}%" height="12" rx="2"><title>${label}</title></rect>`;
  }

  mark(t: number, cls: string, label: string, glyph: "bolt" | "event"): Html {
    return html`<svg class="${cls}" x="${fmt(this.x(t))}%" y="0" overflow="visible"><title>${label}</title>${
      glyph === "bolt"
        ? html`<path d="M3,0 L-6,11 L-1,11 L-4,21 L7,8 L2,8 L6,0 Z"></path>`
        : html`<path d="M0,2 L5,10 L0,18 L-5,10 Z"></path>`
    }</svg>`;
  }

  gap(from: number, to: number, label: string): Html {
    return html`<line class="gap" x1="${fmt(this.x(from))}%" x2="${fmt(Math.max(this.x(to), this.x(from)))}%" y1="10" y2="10"><title>${label}</title></line>`;
  }
}

function runRow(scale: Scale, run: Json, events: Json[]): Html {
  const { t0, openEnd } = scale;
  return html`<div class="tl-row tl-run">
  <span class="tl-label">run</span>
  <svg class="tl-track" width="100%" height="20" role="img" aria-label="the run">
    ${scale.bar(t0, openEnd, `run s-${run.status as string}`, `${run.status as string} · ${duration(openEnd - t0)}`)}
    ${events.map((e) => scale.mark(ms(e.sentAt as string)!, "ev", `event "${cut(e.name as string, 60)}" sent`, "event"))}
  </svg>
  <span class="tl-dur">${duration(openEnd - t0)}</span>
</div>`;
}

/** Kinds drawn as one span (what they wait for), not as attempts. */
const WAITING_KINDS = new Map([
  ["sleep", "sleep"],
  ["wait", "waiting for an event"],
  ["approval", "waiting for approval"],
  ["child", "child run"],
]);

function stepRow(scale: Scale, s: Json, index: number): Html {
  const status = s.status as string;
  const what = WAITING_KINDS.get(s.kind as string);
  const parts = what === undefined ? attemptParts(scale, s) : [waitBar(scale, s, what)];
  const first = ms((s.intentAt ?? s.startedAt) as string)!;
  const last = ms(s.completedAt as string | undefined);
  return html`<div class="tl-row st-${status}">
  <a class="tl-label" href="#step-${index}" title="${s.key as string}">${cut(s.key as string, 40)}</a>
  <svg class="tl-track" width="100%" height="20" role="img" aria-label="${`${s.key as string}: ${status}`}">${parts}</svg>
  <span class="tl-dur">${last !== undefined ? duration(last - first) : status}</span>
</div>`;
}

/** A sleep, a wait, an approval or a child: one span from its intent to its end. */
function waitBar(scale: Scale, s: Json, what: string): Html {
  const from = ms((s.intentAt ?? s.startedAt) as string)!;
  const to = ms(s.completedAt as string | undefined) ?? scale.openEnd;
  return scale.bar(
    from,
    to,
    `wait${s.completedAt ? "" : " open"}`,
    `${what} · ${duration(to - from)}`,
  );
}

/** A step's attempts in time order, the backoffs between them, and one still running. */
function attemptParts(scale: Scale, s: Json): Html[] {
  const attempts = [...(s.attempts as Attempt[])].sort(
    (a, b) => Date.parse(a.startedAt) - Date.parse(b.startedAt),
  );
  const parts: Html[] = [];
  attempts.forEach((a, i) => {
    const from = ms(a.startedAt)!;
    const to = ms(a.endedAt) ?? scale.openEnd;
    if (a.error?.code === "WORKER_LOST") parts.push(...workerLost(scale, a, from));
    else {
      const label = a.error
        ? `attempt ${a.attempt} failed after ${duration(to - from)}: ${cut(a.error.message, 200)}`
        : `attempt ${a.attempt} · ${duration(to - from)}`;
      parts.push(scale.bar(from, to, a.error ? "attempt failed" : `attempt ok k-${s.kind}`, label));
    }
    const next = attempts[i + 1];
    const resumeAt = next ? ms(next.startedAt)! : ms(a.retryAt);
    if (a.error && resumeAt !== undefined && resumeAt > to) {
      parts.push(scale.gap(to, resumeAt, `retry backoff · ${duration(resumeAt - to)}`));
    }
  });
  if (s.status === "started" || (attempts.length === 0 && !s.completedAt)) {
    const from = ms((s.intentAt ?? s.startedAt) as string)!;
    const { openEnd } = scale;
    parts.push(
      scale.bar(from, openEnd, "attempt open", `in progress · ${duration(openEnd - from)}`),
    );
  }
  return parts;
}

/** The takeover of a run whose worker stopped mid-attempt (its WORKER_LOST attempt). */
function workerLost(scale: Scale, a: Attempt, from: number): Html[] {
  const parts: Html[] = [];
  // What the lost worker did between the run's last record and the takeover is not
  // recorded: a dashed span says so.
  const lastRecord = scale.times.reduce((m, t) => (t < from ? Math.max(m, t) : m), scale.t0);
  if (lastRecord < from) {
    parts.push(
      html`<line class="gap lost" x1="${fmt(scale.x(lastRecord))}%" x2="${fmt(scale.x(from))}%" y1="10" y2="10"><title>no record: the worker that ran this stopped (crash, kill, lost lease)</title></line>`,
    );
  }
  parts.push(
    scale.mark(
      from,
      "lost",
      `attempt ${a.attempt}: the worker stopped (crash, kill or lost lease); the run was taken over here`,
      "bolt",
    ),
    html`<text class="lost-label" x="${fmt(scale.x(from))}%" dx="-9" y="14">worker lost</text>`,
  );
  return parts;
}

function fmt(n: number): string {
  return n.toFixed(3);
}

const NICE = [
  1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000,
  300_000, 600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 10_800_000, 21_600_000, 43_200_000,
  86_400_000, 172_800_000, 604_800_000,
];

function axis(span: number): Html {
  const step = NICE.find((n) => span / n <= 6) ?? Math.ceil(span / 6);
  const ticks: number[] = [];
  for (let t = 0; t <= span && ticks.length < 12; t += step) ticks.push(t);
  return html`<div class="tl-row tl-axis" aria-hidden="true">
  <span class="tl-label"></span>
  <svg class="tl-track" width="100%" height="20">${ticks.map(
    (t) =>
      html`<line x1="${fmt((t / span) * 100)}%" x2="${fmt((t / span) * 100)}%" y1="14" y2="20"></line><text x="${fmt((t / span) * 100)}%" y="11"${t === 0 ? html` class="first"` : ""}>${t === 0 ? "0" : `+${duration(t)}`}</text>`,
  )}</svg>
  <span class="tl-dur"></span>
</div>`;
}
