// The dashboard's server-rendered pages, read as HTML (no browser), on SQLite and PostgreSQL:
// a run's timeline drawn to scale (bars at their recorded times, a step twice as long twice
// as wide), failed attempts with their errors and the retry backoffs between them, sleeps
// and waits as spans with the events sent as marks, a worker lost mid-step where the run
// was taken over and the attempt that resumed it; the budget bar and the spend of every
// step; large values folded and cut with their size, never shown whole; the Workers page
// (every worker with the name@version pairs it serves, the runs no live worker serves); and
// the resume-with-budget dialog, whose form posts to the API's resume route, absent for a
// read-only token.
//
// Two stores per backend: the seeded one (runs in every status, test/helpers/runs-fixture)
// and one with runs of known timings and values made here. Steps "work" by sleeping on the
// virtual clock, so what they took is exact; where a start time depends on the store's
// round trips, the expected position is computed from the recorded times the API returns.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { MIN_WIDTH } from "../src/http/ui/timeline.js";
import { type Engine, workflow } from "../src/index.js";
import { advanceUntil, BACKENDS } from "./helpers/engines.js";
import { call, sharedHarness } from "./helpers/http.js";
import { type Seeded, seedRuns } from "./helpers/runs-fixture.js";
import { until } from "./helpers/sqlite.js";

type Json = Record<string, unknown>;
interface AttemptJ {
  attempt: number;
  startedAt: string;
  endedAt?: string;
  error?: { name: string; code?: string; message: string };
}
interface StepJ {
  key: string;
  kind: string;
  status: string;
  startedAt: string;
  intentAt?: string;
  completedAt?: string;
  attempts: AttemptJ[];
  result?: unknown;
}
interface RunJ {
  id: string;
  status: string;
  createdAt: string;
  updatedAt: string;
  budget: { limit: Record<string, number>; spent: Record<string, number> };
}
type App = ReturnType<typeof createHttpApp>;

const TOKEN = "full-token-0123456789";
const READ = "read-token-0123456789";
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

// ---- reading the HTML ----

/** Undoes hono's escaping of & < > " '. */
function unescapeHtml(s: string): string {
  return s
    .replaceAll("&quot;", '"')
    .replaceAll("&#39;", "'")
    .replaceAll("&lt;", "<")
    .replaceAll("&gt;", ">")
    .replaceAll("&amp;", "&");
}

function attrs(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of text.matchAll(/([\w-]+)(?:="([^"]*)")?/g)) out[m[1]!] = unescapeHtml(m[2] ?? "");
  return out;
}

interface Shape {
  tag: string;
  cls: string;
  a: Record<string, string>;
  /** The <title> of a rect, line or mark; the text of a <text>. */
  title: string;
}

/** The drawn shapes of one timeline track, in document order. */
function shapesOf(track: string): Shape[] {
  return [
    ...track.matchAll(/<(rect|line|svg|text)\b([^>]*)>(?:<title>([^<]*)<\/title>|([^<]*))/g),
  ].map((m) => {
    const a = attrs(m[2]!);
    return { tag: m[1]!, cls: a.class ?? "", a, title: unescapeHtml(m[3] ?? m[4] ?? "") };
  });
}

const pct = (v: string | undefined): number => {
  expect(v, "a percentage attribute").toMatch(/^\d+\.\d{3}%$/);
  return Number.parseFloat(v!);
};

interface Row {
  cls: string;
  label: string;
  shapes: Shape[];
  dur: string;
}
interface Timeline {
  span: number;
  rows: Row[];
  row(label: string): Row;
}

function timelineOf(page: string): Timeline {
  const start = page.indexOf('id="region-timeline"');
  expect(start, "the page has a timeline region").toBeGreaterThan(0);
  const region = page.slice(start, page.indexOf("</section>", start));
  const span = Number(region.match(/<div class="timeline" data-span="(\d+)">/)?.[1]);
  const rows = region
    .split('<div class="tl-row ')
    .slice(1)
    .map((chunk) => {
      const trackStart = chunk.indexOf('<svg class="tl-track"');
      const durAt = chunk.indexOf('<span class="tl-dur">');
      const track = chunk.slice(chunk.indexOf(">", trackStart) + 1, durAt);
      return {
        cls: chunk.slice(0, chunk.indexOf('"')),
        label: unescapeHtml(
          chunk.match(/<a class="tl-label" href="#step-\d+" title="([^"]*)">/)?.[1] ??
            chunk.match(/<span class="tl-label">([^<]*)<\/span>/)?.[1] ??
            "",
        ),
        shapes: shapesOf(track),
        dur: unescapeHtml(
          chunk.slice(durAt).match(/<span class="tl-dur">([^<]*)<\/span>/)?.[1] ?? "",
        ),
      };
    });
  return {
    span,
    rows,
    row(label) {
      const found = rows.filter((r) => r.label === label);
      expect(found, `one timeline row "${label}"`).toHaveLength(1);
      return found[0]!;
    },
  };
}

/** The <li> of one step in the step list. */
function stepItem(page: string, key: string): string {
  const at = page.indexOf(`<details data-key="${key}">`);
  expect(at, `step "${key}" in the step list`).toBeGreaterThan(0);
  const from = page.lastIndexOf("<li ", at);
  return page.slice(from, page.indexOf("</li>", at) + "</li>".length);
}

/** The element <tag ...>...</tag> whose opening tag contains `marker` (not nested). */
function element(page: string, tag: string, marker: string): string | undefined {
  const at = page.indexOf(marker);
  if (at < 0) return undefined;
  const from = page.lastIndexOf(`<${tag}`, at);
  const end = page.indexOf(`</${tag}>`, at);
  return page.slice(from, end + tag.length + 3);
}

/** The budget block, the last part of the run page's head. */
function budgetOf(page: string): string {
  const at = page.indexOf('<div class="budget" aria-label="budget">');
  expect(at, "a budget block").toBeGreaterThan(0);
  return page.slice(at, page.indexOf("</section>", at));
}

/** Where a span from `x1` to `x2` (percent) is drawn: never narrower than MIN_WIDTH, and
 *  never past the right edge. The seedings advance a virtual clock in real-time steps, so on
 *  a busy machine a run's life stretches and its short spans fall under the minimum. */
function barOf(x1: number, x2: number): { x: number; width: number } {
  return { x: Math.min(x1, 100 - MIN_WIDTH), width: Math.max(x2 - x1, MIN_WIDTH) };
}

/** Positions are rounded to 3 decimals of a percent (a sum of two, to twice that). */
function near(actual: number, expected: number, what: string, rounded = 1): void {
  expect(
    Math.abs(actual - expected),
    `${what}: drawn ${actual}, expected ${expected}`,
  ).toBeLessThan(0.0005 * rounded + 0.0001);
}

// ---- the workflows with known timings and values ----

const BIG_TAIL = "END-OF-THE-BIG-VALUE";
/** Pretty JSON well over the page's limit (100,000 characters), with multi-byte text so
 *  its size in bytes is not its length. */
const BIG = { text: "ab\u00e9".repeat(40_000), tail: BIG_TAIL };
const MEDIUM = { lines: Array.from({ length: 40 }, (_, i) => `line ${i} of the medium value`) };

describe.each(BACKENDS)("dashboard pages on %s", (backend) => {
  const h = sharedHarness(backend);
  const t = sharedHarness(backend);
  let seeded: Seeded;
  /** Over the seeded store. */
  let app: App;
  /** Over the seeded store, with tokens. */
  let secured: App;
  /** Over the store of the runs made here. */
  let tapp: App;
  /** A second live worker in the seeded store. */
  let extra: Engine;

  const work = (ms: number) => t.clock.sleep(ms);
  const timed = workflow({ name: "timed", version: "1", budget: { usd: 1 } }, async (ctx) => {
    await ctx.step("short", async (s) => {
      await work(1_000);
      s.spend({ usd: 0.25, tokens: 100 });
      return "short";
    });
    await ctx.step("long", async (s) => {
      await work(2_000);
      s.spend({ usd: 0.5 });
      return "long";
    });
    await ctx.step(
      "flaky",
      async (s) => {
        await work(500);
        if (s.attempt === 1) throw new Error("disk full on /tmp <scratch>");
        return "ok";
      },
      { retry: { maxAttempts: 2, initialDelay: "3s", jitter: false } },
    );
    await ctx.sleep("cool-off", "10s");
    const go = await ctx.waitForEvent<{ by: string }>("go", { timeout: "1h" });
    await ctx.step("finish", async () => {
      await work(250);
      return go.timedOut ? "late" : "done";
    });
    return "finished";
  });
  const big = workflow({ name: "big", version: "1" }, async (ctx) => {
    await ctx.step("dump", () => BIG);
    await ctx.step("medium", () => MEDIUM);
    await ctx.step("small", () => ({ ok: true }));
    return "dumped";
  });
  const report = workflow({ name: "report", version: "2" }, async () => "reported");

  const page = async (a: App, url: string, headers: Record<string, string> = {}) => {
    const res = await a.fetch(new Request(`http://localhost${url}`, { headers }));
    expect(res.status, url).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    return res.text();
  };
  const api = async <T>(a: App, url: string) => {
    const res = await call<T>(a.fetch, "GET", url);
    expect(res.status, url).toBe(200);
    return res.body;
  };
  /** A run's page, and the run, steps and events the API gives for it. */
  const runOf = async (a: App, id: string) => {
    const html = await page(a, `/runs/${encodeURIComponent(id)}`);
    const run = (await api<{ run: RunJ }>(a, `/api/runs/${id}`)).run;
    const steps = (await api<{ steps: StepJ[] }>(a, `/api/runs/${id}/steps`)).steps;
    const events = (await api<{ events: Json[] }>(a, `/api/runs/${id}/events`)).events;
    const t0 = Date.parse(run.createdAt);
    const step = (key: string) => {
      const s = steps.find((x) => x.key === key);
      expect(s, `step "${key}"`).toBeDefined();
      return s!;
    };
    const tl = timelineOf(html);
    /** Where a recorded time is on the drawn scale, in percent. */
    const X = (iso: string) => ((Date.parse(iso) - t0) / tl.span) * 100;
    return { html, run, steps, events, step, tl, X };
  };

  beforeAll(async () => {
    seeded = await seedRuns(h);
    app = createHttpApp({ engine: seeded.client, clock: h.clock, pollIntervalMs: 20 });
    secured = createHttpApp({
      engine: seeded.client,
      clock: h.clock,
      pollIntervalMs: 20,
      token: TOKEN,
      readToken: READ,
    });
    // A second live worker (the clock stands still: nothing else changes).
    extra = h.engine([report, seeded.workflows.find((w) => w.id === "triage@1")!], {
      leaseMs: 30_000,
    });
    await until(
      async () =>
        (await seeded.client.listWorkers()).some((w) => w.id === extra.workerId && w.live),
      "the second worker is registered",
    );

    t.engine([timed, big]); // the worker that executes them
    const client = t.engine([timed, big], { worker: false });
    await client.start(big, undefined, { id: "big-values" });
    await client.start(timed, undefined, { id: "timed-run" });
    await advanceUntil(
      t.clock,
      until(
        async () => (await client.getRun("timed-run"))?.waitingFor?.includes("go"),
        "timed-run waits for go",
      ),
      100,
    );
    await t.clock.advance("5s");
    await client.sendEvent("timed-run", "go", { by: "the test" });
    await advanceUntil(
      t.clock,
      until(async () => {
        const done = async (id: string) => (await client.getRun(id))?.status === "completed";
        return (await done("timed-run")) && (await done("big-values"));
      }, "timed-run and big-values complete"),
      100,
    );
    tapp = createHttpApp({ engine: client, clock: t.clock, pollIntervalMs: 20 });
  }, 120_000);
  afterAll(() => {
    app?.close();
    secured?.close();
    tapp?.close();
    seeded?.releaseRunning();
  });

  it("draws the timeline to scale: a step that took twice as long gets a bar twice as wide, every attempt at its recorded time", async () => {
    const { run, steps, step, tl, X } = await runOf(tapp, "timed-run");
    expect(run.status).toBe("completed");
    // The scale is the run's life, from its creation to its last record.
    expect(tl.span).toBe(Date.parse(run.updatedAt) - Date.parse(run.createdAt));
    expect(tl.rows.map((r) => r.label)).toEqual([
      "",
      "run",
      "short",
      "long",
      "flaky",
      "cool-off",
      "go",
      "finish",
    ]);
    const runBar = tl.row("run").shapes;
    expect(runBar[0]).toMatchObject({ tag: "rect", cls: "run s-completed" });
    near(pct(runBar[0]!.a.x), 0, "run bar x");
    near(pct(runBar[0]!.a.width), 100, "run bar width");

    const took = (s: StepJ) => Date.parse(s.completedAt!) - Date.parse(s.startedAt);
    expect([took(step("short")), took(step("long"))]).toEqual([1_000, 2_000]);
    const bar = (key: string) => {
      const rects = tl.row(key).shapes.filter((s) => s.tag === "rect");
      expect(rects, key).toHaveLength(1);
      return rects[0]!;
    };
    const short = bar("short");
    const long = bar("long");
    const wShort = pct(short.a.width);
    const wLong = pct(long.a.width);
    near(wShort, (1_000 / tl.span) * 100, "short's width");
    near(wLong, (2_000 / tl.span) * 100, "long's width");
    expect(wShort).toBeGreaterThan(MIN_WIDTH); // drawn to scale, not at the narrowest width
    // Each width is rounded to 0.0005: twice short's, within that rounding.
    expect(Math.abs(wLong - 2 * wShort)).toBeLessThanOrEqual(0.0015);
    expect(short).toMatchObject({ cls: "attempt ok k-step", title: "attempt 1 · 1s" });
    expect(long).toMatchObject({ cls: "attempt ok k-step", title: "attempt 1 · 2s" });
    expect([tl.row("short").dur, tl.row("long").dur]).toEqual(["1s", "2s"]);
    // Long starts where it started, after short ended.
    near(pct(long.a.x), X(step("long").startedAt), "long's x");
    expect(pct(long.a.x)).toBeGreaterThanOrEqual(pct(short.a.x) + wShort - 0.002);

    // Every attempt of every step (not sleeps and waits) is a bar at its recorded times.
    for (const s of steps.filter((x) => x.kind === "step")) {
      const rects = tl.row(s.key).shapes.filter((x) => x.tag === "rect");
      expect(
        rects.map((r) => r.title.split(" ").slice(0, 2).join(" ")),
        s.key,
      ).toEqual(s.attempts.map((a) => `attempt ${a.attempt}`));
      s.attempts.forEach((a, i) => {
        const drawn = barOf(X(a.startedAt), X(a.endedAt!));
        near(pct(rects[i]!.a.x), drawn.x, `${s.key} attempt ${a.attempt} x`);
        near(pct(rects[i]!.a.width), drawn.width, `${s.key} attempt ${a.attempt} width`);
      });
    }

    // The axis: ticks at round times, at their place on the same scale.
    const ticks = tl.rows[0]!.shapes.filter((s) => s.tag === "text");
    expect(ticks[0]?.title).toBe("0");
    const tenSeconds = ticks.find((s) => s.title === "+10s");
    expect(tenSeconds, "a +10s tick").toBeDefined();
    near(pct(tenSeconds!.a.x), (10_000 / tl.span) * 100, "+10s tick");
  });

  it("shows failed attempts with their errors, and the retry backoff between attempts, on the timeline and in the step list", async () => {
    const { html, step, tl, X } = await runOf(tapp, "timed-run");
    const flaky = step("flaky");
    const [a1, a2] = flaky.attempts;
    expect(a1?.error).toMatchObject({ name: "Error", message: "disk full on /tmp <scratch>" });
    expect(Date.parse(a2!.startedAt) - Date.parse(a1!.endedAt!)).toBe(3_000);
    const shapes = tl.row("flaky").shapes;
    expect(shapes.map((s) => `${s.tag}.${s.cls}`)).toEqual([
      "rect.attempt failed",
      "line.gap",
      "rect.attempt ok k-step",
    ]);
    const [failed, gap, ok] = shapes as [Shape, Shape, Shape];
    expect(failed.title).toBe("attempt 1 failed after 500ms: disk full on /tmp <scratch>");
    near(pct(failed.a.x), X(a1!.startedAt), "failed attempt x");
    near(pct(failed.a.width), X(a1!.endedAt!) - X(a1!.startedAt), "failed attempt width");
    expect(gap.title).toBe("retry backoff · 3s");
    near(pct(gap.a.x1), X(a1!.endedAt!), "backoff from");
    near(pct(gap.a.x2), X(a2!.startedAt), "backoff to");
    expect(ok.title).toBe("attempt 2 · 500ms");
    near(pct(ok.a.x), X(a2!.startedAt), "retry x");
    expect(tl.row("flaky").dur).toBe("4s");

    // The step list: a failed-attempt tag, and the attempt with its error, then the retry.
    const item = stepItem(html, "flaky");
    expect(item).toContain('<span class="tag err">1 failed attempt</span>');
    const rows = [...item.matchAll(/<tr class="(\w+)">([\s\S]*?)<\/tr>/g)];
    expect(rows.map((r) => r[1])).toEqual(["failed", "ok"]);
    expect(rows[0]![2]).toContain(
      '<td><span class="err">Error</span> disk full on /tmp &lt;scratch&gt;</td>',
    );
    expect(rows[1]![2]).toContain("<td>ok</td>");

    // The seeded run whose step failed three times: each attempt red with its error, a
    // backoff between them, and the fatal error that failed the run.
    const fixed = await runOf(app, seeded.ids.failed);
    const tests = fixed.step("run-tests");
    const drawn = fixed.tl.row("run-tests").shapes;
    // (How long each backoff lasted depends on how fast the seeding's worker came back.)
    expect(
      drawn.map((s) => `${s.cls}: ${s.title.replace(/^(retry backoff) · .*$/, "$1")}`),
    ).toEqual([
      "attempt failed: attempt 1 failed after 1.8s: 2 tests failed: config.test.ts (attempt 1)",
      "gap: retry backoff",
      "attempt failed: attempt 2 failed after 1.8s: 2 tests failed: config.test.ts (attempt 2)",
      "gap: retry backoff",
      "attempt failed: attempt 3 failed after 1.8s: The test runner crashed: out of memory",
    ]);
    tests.attempts.forEach((a, i) => {
      near(pct(drawn[2 * i]!.a.x), fixed.X(a.startedAt), `run-tests attempt ${a.attempt}`);
      if (i > 0) {
        near(pct(drawn[2 * i - 1]!.a.x1), fixed.X(tests.attempts[i - 1]!.endedAt!), "gap from");
        near(pct(drawn[2 * i - 1]!.a.x2), fixed.X(a.startedAt), "gap to");
      }
    });
    expect(fixed.tl.row("run-tests").cls).toBe("st-failed");
    const testsItem = stepItem(fixed.html, "run-tests");
    expect(testsItem).toContain('<span class="tag err">3 failed attempts</span>');
    expect(testsItem).toContain(
      '<div class="error-block"><strong>FatalError [FATAL]:</strong> The test runner crashed: out of memory',
    );
    expect(fixed.html).toContain(
      '<p class="why s-failed"><strong>FatalError [FATAL]:</strong> The test runner crashed: out of memory</p>',
    );
  });

  it("draws sleeps and waits as spans from their start to their end, with no work in them, and events sent as marks on the run's row", async () => {
    const { steps, step, events, tl, X } = await runOf(tapp, "timed-run");
    const sleep = step("cool-off");
    const wait = step("go");
    expect([sleep.kind, wait.kind]).toEqual(["sleep", "wait"]);
    expect(Date.parse(sleep.completedAt!) - Date.parse(sleep.intentAt!)).toBeGreaterThanOrEqual(
      10_000,
    );
    const spans: Array<[StepJ, string]> = [
      [sleep, "sleep · "],
      [wait, "waiting for an event · "],
    ];
    for (const [s, what] of spans) {
      const shapes = tl.row(s.key).shapes;
      expect(
        shapes.map((x) => `${x.tag}.${x.cls}`),
        s.key,
      ).toEqual(["rect.wait"]);
      expect(shapes[0]!.title.startsWith(what), shapes[0]!.title).toBe(true);
      near(pct(shapes[0]!.a.x), X(s.intentAt!), `${s.key} from`);
      near(pct(shapes[0]!.a.width), X(s.completedAt!) - X(s.intentAt!), `${s.key} width`);
    }
    expect(tl.row("cool-off").shapes[0]!.title).toBe(
      `sleep · ${(Date.parse(sleep.completedAt!) - Date.parse(sleep.intentAt!)) / 1000}s`,
    );
    // Nothing worked while the run slept or waited: no attempt bar overlaps those spans.
    for (const [s] of spans) {
      const from = X(s.intentAt!);
      const to = X(s.completedAt!);
      for (const other of steps.filter((x) => x.kind === "step")) {
        for (const r of tl.row(other.key).shapes.filter((x) => x.tag === "rect")) {
          const x = pct(r.a.x);
          const end = x + pct(r.a.width);
          expect(end <= from + 0.002 || x >= to - 0.002, `${other.key} inside ${s.key}`).toBe(true);
        }
      }
    }
    // The event that ended the wait: a mark on the run's row at the time it was sent.
    expect(events).toHaveLength(1);
    const marks = tl.row("run").shapes.filter((x) => x.tag === "svg");
    expect(marks.map((m) => `${m.cls}: ${m.title}`)).toEqual(['ev: event "go" sent']);
    near(pct(marks[0]!.a.x), X(events[0]!.sentAt as string), "event mark");
    expect(pct(marks[0]!.a.x)).toBeGreaterThan(X(wait.intentAt!));

    // A wait still open (the seeded run waiting for its approval) runs to now.
    const open = await runOf(app, seeded.ids.waitingEvent);
    expect(open.tl.span).toBe(h.clock.now() - Date.parse(open.run.createdAt));
    const approval = open.step("approval");
    const [span] = open.tl.row("approval").shapes;
    expect(open.tl.row("approval").shapes).toHaveLength(1);
    expect(span).toMatchObject({ tag: "rect", cls: "wait open" });
    expect(span!.title.startsWith("waiting for an event · ")).toBe(true);
    near(pct(span!.a.x), open.X(approval.intentAt!), "open wait from");
    near(pct(span!.a.x) + pct(span!.a.width), 100, "open wait reaches now", 2);
    expect(open.tl.row("approval").dur).toBe("waiting");
  });

  it("marks a worker lost mid-step where the run was taken over, the unrecorded time before it, and the attempt that resumed it", async () => {
    const { html, steps, step, tl, X } = await runOf(app, seeded.ids.crashed);
    const copy = step("copy-rows");
    const [lost, resumed] = copy.attempts;
    expect(lost?.error?.code).toBe("WORKER_LOST");
    expect(resumed?.error).toBeUndefined();
    const takeover = lost!.startedAt;
    // The last record before the takeover is plan's completion: nothing was recorded while
    // the lost worker held the run.
    const plan = step("plan");
    const recorded = steps.flatMap((s) => [
      s.startedAt,
      s.completedAt,
      s.intentAt,
      ...s.attempts.flatMap((a) => [a.startedAt, a.endedAt]),
    ]);
    const before = recorded
      .filter((x): x is string => x !== undefined && Date.parse(x) < Date.parse(takeover))
      .map(Date.parse);
    expect(Math.max(...before)).toBe(Date.parse(plan.completedAt!));

    const shapes = tl.row("copy-rows").shapes;
    // When the store's round trip outlasted a step of the clock, the resumed attempt starts
    // after the takeover, and the wait between is drawn as a gap from the mark.
    const delayed = Date.parse(resumed!.startedAt) > Date.parse(takeover);
    expect(shapes.map((s) => `${s.tag}.${s.cls}`)).toEqual([
      "line.gap lost",
      "svg.lost",
      "text.lost-label",
      ...(delayed ? ["line.gap"] : []),
      "rect.attempt ok k-step",
    ]);
    const [silence, bolt, label] = shapes as [Shape, Shape, Shape];
    const attempt = shapes.at(-1)!;
    expect(silence.title).toBe(
      "no record: the worker that ran this stopped (crash, kill, lost lease)",
    );
    near(pct(silence.a.x1), X(plan.completedAt!), "unrecorded span from");
    near(pct(silence.a.x2), X(takeover), "unrecorded span to");
    expect(bolt.title).toBe(
      "attempt 1: the worker stopped (crash, kill or lost lease); the run was taken over here",
    );
    near(pct(bolt.a.x), X(takeover), "takeover mark");
    expect(label.title).toBe("worker lost");
    near(pct(label.a.x), X(takeover), "takeover label");
    if (delayed) {
      near(pct(shapes[3]!.a.x1), X(takeover), "gap after the takeover from");
      near(pct(shapes[3]!.a.x2), X(resumed!.startedAt), "gap after the takeover to");
    }
    // The resume: the next attempt starts after the takeover and runs to its end.
    expect(attempt.title).toBe("attempt 2 · 2s");
    near(pct(attempt.a.x), X(resumed!.startedAt), "resumed attempt x");
    near(pct(attempt.a.width), X(resumed!.endedAt!) - X(resumed!.startedAt), "resumed width");
    // Plan's bar ends where the unrecorded span starts (unless drawn at the minimum width).
    const planBar = tl.row("plan").shapes[0]!;
    const planDrawn = barOf(X(plan.startedAt), pct(silence.a.x1));
    near(pct(planBar.a.x), planDrawn.x, "plan starts at its start");
    near(pct(planBar.a.width), planDrawn.width, "plan ends at the silence", 3);
    // A lost worker is not a failed attempt.
    expect(shapes.some((s) => s.cls.includes("failed"))).toBe(false);

    const item = stepItem(html, "copy-rows");
    expect(item).toContain(
      '<span class="tag warn" title="the worker executing it stopped; another took the run over">worker lost</span>',
    );
    expect(item).not.toContain("failed attempt");
    const rows = [...item.matchAll(/<tr class="(\w+)">([\s\S]*?)<\/tr>/g)];
    expect(rows.map((r) => r[1])).toEqual(["lost", "ok"]);
    expect(rows[0]![2]).toContain('<span class="lost">worker lost</span> The worker executing');
  });

  it("shows the budget bar and the spend of every step and attempt", async () => {
    // Paused over budget: the bar full, the figures over the limit.
    const paused = await runOf(app, seeded.ids.pausedBudget);
    expect(paused.run.budget).toMatchObject({ limit: { usd: 1 } });
    const budget = budgetOf(paused.html);
    const usd = [...budget!.matchAll(/<div class="budget-row([^"]*)">([\s\S]*?)<\/div>/g)];
    expect(usd).toHaveLength(1);
    expect(usd[0]![1]).toBe(" over");
    expect(usd[0]![2]).toContain('<span class="name">usd</span>');
    expect(usd[0]![2]).toContain('<progress value="1" max="1"></progress>');
    expect(usd[0]![2]).toContain('<span class="figures">1.35 of 1 · over budget</span>');
    expect(budget).toContain(
      '<div class="spent-free"><span class="name">Spent</span> tokens <strong>27,000</strong> <span class="muted">(no limit)</span></div>',
    );
    expect(paused.html).toContain(
      '<p class="why s-paused"><span class="tag warn">budget</span> budget: usd 1.35 of 1 spent</p>',
    );
    expect(paused.steps.map((s) => s.key)).toEqual(["sources", "summaries", "draft"]);
    for (const s of paused.steps) {
      const item = stepItem(paused.html, s.key);
      expect(item).toContain('<span class="spend">tokens 9,000 · usd 0.45</span>');
      const attempts = [...item.matchAll(/<tr class="ok">([\s\S]*?)<\/tr>/g)];
      expect(attempts).toHaveLength(1);
      expect(attempts[0]![1]).toMatch(/<td>tokens 9,000 · usd 0\.45<\/td>\s*$/);
    }

    // Under the limit: the bar shows what was spent of it; each step its own spend.
    const timed = await runOf(tapp, "timed-run");
    expect(timed.run.budget).toEqual({ limit: { usd: 1 }, spent: { usd: 0.75, tokens: 100 } });
    const tb = budgetOf(timed.html);
    expect(tb).toContain(
      '<div class="budget-row">\n  <span class="name">usd</span>\n  <progress value="0.75" max="1"></progress>\n  <span class="figures">0.75 of 1</span>',
    );
    expect(tb).not.toContain("over budget");
    expect(tb).toContain("tokens <strong>100</strong>");
    expect(stepItem(timed.html, "short")).toContain(
      '<span class="spend">tokens 100 · usd 0.25</span>',
    );
    expect(stepItem(timed.html, "long")).toContain('<span class="spend">usd 0.5</span>');
    expect(stepItem(timed.html, "flaky")).not.toContain('class="spend"');

    // A run with no budget and no spend has no budget block.
    const none = await page(app, `/runs/${seeded.ids.crashed}`);
    expect(none).not.toContain('aria-label="budget"');
  });

  it("folds large values: a result over the page's limit is cut, with its size, and never shown whole", async () => {
    const html = await page(tapp, "/runs/big-values");
    const text = JSON.stringify(BIG, null, 2);
    expect(text.length).toBeGreaterThan(100_000);
    const item = stepItem(html, "dump");
    const folded = item.match(
      /<div class="label">Result<\/div><details class="value"><summary><code>([^<]*)<\/code> <span class="muted">([^<]*)<\/span><\/summary><pre class="value">([^<]*)<\/pre><\/details>/,
    );
    expect(folded, "the big result is folded").not.toBeNull();
    const [, summary, size, shown] = folded!;
    // Its size in bytes (UTF-8), not its length in characters.
    const kb = (Buffer.byteLength(text, "utf8") / 1024).toFixed(1);
    expect(kb).not.toBe((text.length / 1024).toFixed(1));
    expect(size).toBe(`${kb} KB`);
    expect(unescapeHtml(summary!)).toBe(`${text.replace(/\s+/g, " ").slice(0, 119)}…`);
    // Cut at 100,000 characters, saying so.
    expect(unescapeHtml(shown!)).toBe(`${text.slice(0, 100_000)}\n… (cut; the API has all of it)`);
    expect(html).not.toContain(BIG_TAIL);
    expect(html.length).toBeLessThan(text.length);
    // The API has all of it.
    const steps = (await api<{ steps: StepJ[] }>(tapp, "/api/runs/big-values/steps")).steps;
    expect(steps.find((s) => s.key === "dump")?.result).toEqual(BIG);

    // A medium value is folded but whole; a small one is shown as it is.
    const medium = JSON.stringify(MEDIUM, null, 2);
    expect(medium.length).toBeGreaterThan(400);
    const mid = stepItem(html, "medium").match(
      /<details class="value"><summary><code>[^<]*<\/code> <span class="muted">([^<]*)<\/span><\/summary><pre class="value">([^<]*)<\/pre><\/details>/,
    );
    expect(mid, "the medium result is folded").not.toBeNull();
    expect(mid![1]).toBe(`${(Buffer.byteLength(medium) / 1024).toFixed(1)} KB`);
    expect(unescapeHtml(mid![2]!)).toBe(medium);
    const small = stepItem(html, "small");
    expect(small).not.toContain('<details class="value"');
    expect(small).toContain(
      `<div class="label">Result</div><pre class="value">{\n  &quot;ok&quot;: true\n}</pre>`,
    );
  });

  it("lists every worker with the name@version pairs it serves, and the runs no live worker serves", async () => {
    const html = await page(app, "/workers");
    const region = html.slice(html.indexOf('id="region-workers"'));
    const rows = [...region.matchAll(/<tr class="(w-live|w-stale)">([\s\S]*?)<\/tr>/g)].map(
      (m) => ({
        state: m[1],
        badge: m[2]!.match(/<span class="badge [^"]*">(\w+)<\/span>/)?.[1],
        id: m[2]!.match(/<td class="id">([^<]*)<\/td>/)?.[1],
        serves: [...m[2]!.matchAll(/<code class="chip">([^<]*)<\/code>/g)].map((c) => c[1]).sort(),
      }),
    );
    const live = rows.filter((r) => r.state === "w-live");
    expect(live.map((r) => r.badge)).toEqual(["live", "live"]);
    expect(Object.fromEntries(live.map((r) => [r.id, r.serves]))).toEqual({
      [seeded.worker.workerId]: [
        "cool-down@1",
        "deploy@1",
        "fix-tests@1",
        "index-repo@1",
        "migrate@1",
        "research@1",
        "triage@1",
      ],
      [extra.workerId]: ["report@2", "triage@1"],
    });
    // The worker cut off mid-step is listed as stale.
    expect(rows.filter((r) => r.state === "w-stale")).toMatchObject([
      { badge: "stale", serves: ["migrate@1"] },
    ]);
    // What the live workers serve, with how many serve each.
    const served = region.match(/<p class="muted">Served now: ([\s\S]*?)<\/p>/)?.[1] ?? "";
    expect(
      [...served.matchAll(/<code class="chip">([^<]*)<\/code> ×(\d+)/g)].map(
        (m) => `${m[1]} ×${m[2]}`,
      ),
    ).toEqual([
      "cool-down@1 ×1",
      "deploy@1 ×1",
      "fix-tests@1 ×1",
      "index-repo@1 ×1",
      "migrate@1 ×1",
      "report@2 ×1",
      "research@1 ×1",
      "triage@1 ×2",
    ]);

    // The run no live worker serves (and not the run paused over budget).
    expect(region).toContain(
      '<p class="notice warn" role="alert"><strong>No live worker has <code>triage@0</code>.</strong> 1 run is paused',
    );
    const unservedAt = region.indexOf("<h2>Runs no live worker serves</h2>");
    expect(unservedAt).toBeGreaterThan(0);
    const unserved = [
      ...region.slice(unservedAt).matchAll(/<tr data-run="([^"]*)">([\s\S]*?)<\/tr>/g),
    ];
    expect(unserved.map((m) => m[1])).toEqual([seeded.ids.pausedVersion]);
    const row = unserved[0]![2]!;
    expect(row).toContain(
      `<td class="id"><a href="/runs/${seeded.ids.pausedVersion}">${seeded.ids.pausedVersion}</a></td>`,
    );
    expect(row).toContain('<td class="wf">triage<span class="ver">@0</span></td>');
    expect(row).toContain("no live worker has triage@0");
    expect(region).not.toContain(seeded.ids.pausedBudget);

    // The paused run's page links to the workers.
    const paused = await page(app, `/runs/${seeded.ids.pausedVersion}`);
    expect(paused).toMatch(/no live worker has triage@0 · <a href="\/workers">workers<\/a><\/p>/);
  });

  it("gives a read-only token's page of a paused run no resume form and no actions", async () => {
    const url = `/runs/${seeded.ids.pausedBudget}`;
    const readOnly = await page(secured, url, bearer(READ));
    expect(readOnly).toContain('<span class="muted">read-only access</span>');
    expect(readOnly).toContain('<span class="role">read-only</span>');
    expect(readOnly).not.toContain("dialog-resume");
    expect(readOnly).not.toContain("<dialog");
    expect(readOnly).not.toContain("<form data-api");
    expect(readOnly).not.toContain("data-open=");
    // The same page with the full token has them.
    const full = await page(secured, url, bearer(TOKEN));
    expect(full).not.toContain("read-only access");
    expect(full).toContain('<dialog id="dialog-resume" class="form-dialog">');
    expect(full).toContain('data-open="dialog-resume"');
    // And the route the form posts to refuses the read-only token.
    const refused = await call<{ error: { code: string } }>(
      secured.fetch,
      "POST",
      `/api/runs/${seeded.ids.pausedBudget}/resume`,
      { body: { budget: { usd: 3 } }, headers: bearer(READ) },
    );
    expect(refused.status).toBe(403);
    expect((await seeded.client.getRun(seeded.ids.pausedBudget))?.status).toBe("paused");
  });

  it("offers resume with a budget on a run paused over budget: a dialog whose form posts to the resume route and resumes the run", async () => {
    const id = seeded.ids.pausedBudget;
    const html = await page(app, `/runs/${id}`);
    expect(html).toContain(
      '<button type="button" class="primary" data-open="dialog-resume">Resume</button>',
    );
    const dialog = element(html, "dialog", 'id="dialog-resume"');
    expect(dialog, "the resume dialog").toBeDefined();
    const form = dialog!.match(/<form ([^>]*)>([\s\S]*)<\/form>/);
    expect(form).not.toBeNull();
    const formAttrs = attrs(form![1]!);
    expect(formAttrs["data-api"]).toBe(`/api/runs/${id}/resume`);
    expect(formAttrs["data-then"]).toBe("reload");
    const inputs = [...form![2]!.matchAll(/<input ([^>]*)>/g)].map((m) => attrs(m[1]!));
    // One field per limit the run has, filled with the limit, and one for other limits.
    expect(inputs).toEqual([
      {
        name: "body.budget",
        "data-key": "usd",
        "data-number": "",
        type: "number",
        min: "0",
        step: "any",
        value: "1",
      },
      { name: "body.budget", "data-amounts": "", autocomplete: "off" },
    ]);
    expect(form![2]).toContain('<button type="submit" class="primary">Resume</button>');

    // The body the page's script (assets/app.js, formRequest) builds from these inputs, built
    // here by hand: the usd limit raised to 3, the others left empty, {"budget": {"usd": 3}}.
    // This checks the form's fields and the route; the script itself runs in the browser
    // tests only, none of which submits this dialog.
    const budget: Record<string, number> = {};
    for (const input of inputs) {
      const value = input["data-key"] === "usd" ? "3" : "";
      if (value === "") continue;
      budget[input["data-key"]!] = Number(value);
    }
    const sent = await call<{ run: RunJ }>(app.fetch, "POST", formAttrs["data-api"]!, {
      body: { budget },
    });
    expect(sent.status).toBe(200);
    expect(sent.body.run.budget.limit).toEqual({ usd: 3 });
    await advanceUntil(
      h.clock,
      until(
        async () => (await seeded.client.getRun(id))?.status === "completed",
        "research completes",
      ),
      200,
    );
    // Finished: the bar under the new limit, and no resume to offer.
    const after = await page(app, `/runs/${id}`);
    expect(after).toContain('<progress value="1.8" max="3"></progress>');
    expect(after).toContain('<span class="figures">1.8 of 3</span>');
    expect(after).not.toContain("dialog-resume");
  });
});
