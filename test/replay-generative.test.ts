// Issue 8: generative replay. Random workflow programs (test/helpers/gen-grammar.ts: steps
// with random delays, spend, fail-once, fatal and broken bodies; effects; sleeps; waits;
// children; ctx.now/random/uuid; Promise.all and Promise.race; try/catch; loops with
// repeated names; non-durable awaits in workflow code) each run once undisturbed and once
// with their worker crashed at random points and taken over until the run ends: in process
// (src/testing/crashable-store.ts, virtual clock) or by SIGKILLing worker processes. Outputs,
// every delivered value and its order, step-body executions, effect performs and crashed-
// attempt records must be what the crashes explain (test/helpers/gen-judge.ts).
// Deliberately non-deterministic programs (one call whose name, kind, order or child input
// changes, in a child, a parallel branch, a race winner, a catch block, a loop or after a
// durable wait: gen-nondet.ts) must fail with NonDeterminismError after a crash.
//
// Modes (a case's seed is "<mode>:<n>"): ip-sqlite / ip-pg in-process crashes, sk-sqlite /
// sk-pg SIGKILLed worker processes, nd-ip / nd-sk non-deterministic programs.
//
//   npx vitest run test/replay-generative.test.ts              158 cases, about half a minute
//   CAIRN_SOAK=1 npx vitest run test/replay-generative.test.ts       ~6,400 cases, fresh seeds
//   CAIRN_SEED=ip-sqlite:17 npx vitest run test/replay-generative.test.ts
//     replays exactly that case (program and kill points; timing is real) and shrinks it
//     (CAIRN_SHRINK=<ms> bounds shrinking, CAIRN_SHRINK_CLASS=<violation> picks what to keep).
//   CAIRN_SEED_BASE=1000 shifts the default seeds; see below for triage knobs.

import { writeFileSync } from "node:fs";
import fc from "fast-check";
import { afterAll, describe, expect, it } from "vitest";
import { type Case, caseArb, SEQUENTIAL } from "./helpers/gen-grammar.js";
import {
  type Backend,
  type CrashMode,
  closeWorkerPool,
  type RunResult,
  runProgram,
} from "./helpers/gen-harness.js";
import { crossChecks, nondetChecks, selfChecks, type Violation } from "./helpers/gen-judge.js";
import { features, normalize, printProgram } from "./helpers/gen-program.js";
import { postgresTestUrl } from "./helpers/postgres.js";

const pgUrl = await postgresTestUrl();
const SOAK = process.env.CAIRN_SOAK === "1";
const ONLY = process.env.CAIRN_SEED;
const BASE = Number(process.env.CAIRN_SEED_BASE ?? (SOAK ? Date.now() % 1_000_000 : 1));
/** Development: CAIRN_GEN_MODES=ip-sqlite,nd-ip CAIRN_GEN_COUNT=20 runs a slice. */
const ONLY_MODES = process.env.CAIRN_GEN_MODES?.split(",");
const COUNT = process.env.CAIRN_GEN_COUNT ? Number(process.env.CAIRN_GEN_COUNT) : undefined;
/** CAIRN_GEN_REPORT=<file>: every failure (seed, violations, program) as JSON, for triage. */
const REPORT_FILE = process.env.CAIRN_GEN_REPORT;
const allFailures: Failure[] = [];
/** Triage: CAIRN_GEN_EXCLUDE=io,value,try leaves features out of the grammar (node kinds
 *  step effect sleep wait value io loop par map race try child; step modes failOnce fatal
 *  broken terminal); CAIRN_GEN_EXCLUDE=sequential leaves out all concurrency. */
const EXCLUDE = (process.env.CAIRN_GEN_EXCLUDE ?? "")
  .split(",")
  .filter(Boolean)
  .flatMap((x) => (x === "sequential" ? SEQUENTIAL : [x]));

interface Mode {
  crash: CrashMode;
  backend: Backend;
  nondet: boolean;
  /** Cases n = BASE .. BASE+count-1. The default run keeps every mode with fewer cases than
   *  it once had (420 ip-sqlite, 32 ip-pg, 36 sk-sqlite, 6 sk-pg took about two minutes of a
   *  ten-minute suite; 150 ip-sqlite and 14 sk-sqlite 42-45 s of a 650-720 s one). A case's
   *  time is the CPU of the engine and SQLite work of its two runs (and, for a SIGKILL case,
   *  of its worker processes' starts): the counts are what set the file's time. The soak
   *  runs thousands. */
  count: number;
  concurrency: number;
  /** Seeds past `count` that once found a bug (each has a deterministic test of its own
   *  now): the default run (BASE 1, no CAIRN_GEN_COUNT) runs them as well. */
  found?: number[];
}

const MODES: Record<string, Mode> = {
  "ip-sqlite": {
    crash: "inproc",
    backend: "sqlite",
    nondet: false,
    count: SOAK ? 5000 : 100,
    concurrency: 12,
    found: [326, 415],
  },
  "ip-pg": {
    crash: "inproc",
    backend: "postgres",
    nondet: false,
    count: SOAK ? 600 : 12,
    concurrency: 3,
  },
  "sk-sqlite": {
    crash: "sigkill",
    backend: "sqlite",
    nondet: false,
    count: SOAK ? 400 : 10,
    concurrency: 2,
  },
  "sk-pg": {
    crash: "sigkill",
    backend: "postgres",
    nondet: false,
    count: SOAK ? 100 : 4,
    concurrency: 2,
  },
  "nd-ip": {
    crash: "inproc",
    backend: "sqlite",
    nondet: true,
    count: SOAK ? 300 : 24,
    concurrency: 4,
  },
  "nd-sk": {
    crash: "sigkill",
    backend: "sqlite",
    nondet: true,
    count: SOAK ? 40 : 6,
    concurrency: 2,
  },
};

const stats = {
  programs: 0,
  sigkills: 0,
  inprocKills: 0,
  backends: { sqlite: 0, postgres: 0 } as Record<Backend, number>,
  failures: 0,
  classes: {} as Record<string, number>,
  features: {} as Record<string, number>,
  startedAt: Date.now(),
};

class CaseFailure extends Error {
  constructor(readonly violations: Violation[]) {
    super(violations.map((x) => `[${x.cls}] ${x.msg}`).join("\n"));
    this.name = "CaseFailure";
  }
}

function seedOf(mode: string, n: number): number {
  let h = 0;
  for (const ch of mode) h = (h * 31 + ch.charCodeAt(0)) | 0;
  return (n * 7919 + h) | 0;
}

async function checkCase(
  modeName: string,
  mode: Mode,
  n: number,
  c: Case,
  countStats: boolean,
): Promise<void> {
  const prog = normalize(c);
  const runId = `gen-${modeName}-${n}`;
  const results: RunResult[] = [];
  try {
    let violations: Violation[];
    if (mode.nondet) {
      const crash = await runProgram(prog, runId, {
        mode: mode.crash,
        backend: mode.backend,
        kills: [],
        killAfterNondet: true,
        ...(c.nondetKill ? { nondetKill: c.nondetKill } : {}),
        ...(pgUrl ? { pgUrl } : {}),
      });
      results.push(crash);
      if (countStats) count(crash, modeName);
      violations = nondetChecks(crash);
    } else {
      const ref = await runProgram(prog, runId, {
        mode: "none",
        backend: "sqlite",
        kills: [],
        killAfterNondet: false,
      });
      results.push(ref);
      const crash = await runProgram(prog, runId, {
        mode: mode.crash,
        backend: mode.backend,
        kills: c.kills,
        killAfterNondet: false,
        profile: ref.profile,
        ...(pgUrl ? { pgUrl } : {}),
      });
      results.push(crash);
      if (countStats) count(crash, modeName);
      violations = [
        ...selfChecks(prog, ref, "reference"),
        ...selfChecks(prog, crash, "crash run"),
        ...crossChecks(ref, crash),
      ];
    }
    if (violations.length > 0) {
      if (DUMP) for (const r of results) console.log(dumpResult(r));
      throw new CaseFailure(violations);
    }
  } finally {
    for (const r of results) await r.cleanup();
  }
}

/** CAIRN_GEN_DUMP=1: a failing case prints each run's journals, executions and logs. */
const DUMP = process.env.CAIRN_GEN_DUMP === "1";

function dumpResult(r: RunResult): string {
  const out = [`--- ${r.mode} run: ${r.status}, ${r.kills.length} kill(s), ${r.fixes} fix(es)`];
  for (const [id, j] of r.journals) {
    out.push(`run ${id}:`);
    for (const s of j.steps) {
      out.push(
        `  step ${s.key} gen ${s.generation} ${s.outcome} delivery ${s.delivery} after ${s.issuedAfter}`,
      );
    }
    for (const a of j.attempts) {
      out.push(
        `  attempt ${a.key} gen ${a.generation} #${a.attempt} ${a.error.code ?? a.error.name}`,
      );
    }
  }
  for (const e of r.ledger.execRows()) {
    out.push(`  exec ${e.idem} ${e.instance} ${e.phase} inc ${e.inc} attempt ${e.attempt}`);
  }
  for (const k of r.kills) {
    out.push(
      `  kill of worker ${k.incarnation}: delivered ${[...k.deliveredAt].map(([run, n]) => `${run} ${n}`).join(", ")}; in flight ${[...k.inFlight].join(" ")}`,
    );
  }
  for (const o of r.ledger.obsRows()) {
    out.push(`  obs ${o.run} ${o.exec} #${o.n} ${o.instance} = ${o.value.slice(0, 80)}`);
  }
  for (const l of r.logs) out.push(`  log ${l}`);
  return out.join("\n");
}

/** Kills that landed, per mode: a mode whose kills never land would test no recovery. */
const landedKills: Record<string, number> = {};

function count(r: RunResult, modeName: string): void {
  landedKills[modeName] = (landedKills[modeName] ?? 0) + r.kills.length;
  if (r.mode === "sigkill") stats.sigkills += r.kills.length;
  else stats.inprocKills += r.kills.length;
}

interface Failure {
  seed: string;
  violations: Violation[];
  program: string;
  kills: string;
  shrunk: boolean;
}

/** Shrinking re-runs a failing case many times: a budget for the whole file (on a broken
 *  engine most cases fail; the first failure of each mode is shrunk, for at most 20 s).
 *  CAIRN_SHRINK=<ms> sets the budget (0: no shrinking); with CAIRN_SEED it bounds that one. */
const SHRINK_ENV =
  process.env.CAIRN_SHRINK === undefined ? undefined : Number(process.env.CAIRN_SHRINK);
let shrinkBudgetMs = SHRINK_ENV ?? (ONLY ? 240_000 : 40_000);
const shrunkModes = new Set<string>();

/** Which violation a shrink keeps (the first one a failure has); CAIRN_SHRINK_CLASS overrides. */
const SHRINK_PRIORITY = [
  "nde",
  "stuck",
  "effect-dup",
  "value-lost",
  "status",
  "output",
  "cross-run",
  "order",
  "input-differs",
  "exec-extra",
  "exec-unrecorded",
  "spend",
  "phantom-wl",
  "harness",
  "nondet-missed",
];

function toFailure(
  modeName: string,
  n: number,
  details: fc.RunDetails<[Case]>,
  fallback: Case | undefined,
  shrunk: boolean,
): Failure {
  const c = (details.counterexample?.[0] ?? fallback) as Case;
  const err = details.errorInstance;
  const violations =
    err instanceof CaseFailure
      ? err.violations
      : [{ cls: "harness", msg: err instanceof Error ? (err.stack ?? err.message) : String(err) }];
  return {
    seed: `${modeName}:${n}`,
    violations,
    program: printProgram(normalize(c)),
    kills: JSON.stringify(c.kills),
    shrunk,
  };
}

async function runCase(
  modeName: string,
  n: number,
  shrinkMs: number,
): Promise<Failure | undefined> {
  const mode = MODES[modeName];
  if (!mode)
    throw new Error(`unknown mode "${modeName}" (one of ${Object.keys(MODES).join(", ")})`);
  let first: Case | undefined;
  let calls = 0;
  const property = fc.asyncProperty(
    // Non-deterministic programs use the whole grammar around their one non-deterministic
    // call (the deterministic modes show that the rest replays without NonDeterminismError).
    caseArb({ nondet: mode.nondet, exclude: EXCLUDE }),
    async (c) => {
      const isFirst = calls++ === 0;
      if (isFirst) first = c;
      await checkCase(modeName, mode, n, c, isFirst);
    },
  );
  const seed = seedOf(modeName, n);
  const details = await fc.check(property, { seed, numRuns: 1, endOnFailure: true });
  stats.programs++;
  stats.backends[mode.backend]++;
  if (first) {
    for (const [k, v] of Object.entries(features(normalize(first)))) {
      stats.features[k] = (stats.features[k] ?? 0) + v;
    }
  }
  if (!details.failed) return undefined;
  stats.failures++;
  let failure = toFailure(modeName, n, details as fc.RunDetails<[Case]>, first, false);
  for (const v of failure.violations) stats.classes[v.cls] = (stats.classes[v.cls] ?? 0) + 1;
  const budget = Math.min(shrinkMs, shrinkBudgetMs);
  if (budget > 5_000 && (ONLY || !shrunkModes.has(modeName))) {
    shrunkModes.add(modeName);
    // Shrink towards the most telling class of this failure (not, say, a crashed-attempt
    // record that almost every crash run of a broken engine shows).
    const target =
      process.env.CAIRN_SHRINK_CLASS ??
      SHRINK_PRIORITY.find((cls) => failure.violations.some((v) => v.cls === cls)) ??
      failure.violations[0]?.cls;
    const focused = fc.asyncProperty(
      caseArb({
        nondet: mode.nondet,
        exclude: EXCLUDE,
      }),
      async (c) => {
        try {
          await checkCase(modeName, mode, n, c, false);
        } catch (err) {
          if (!(err instanceof CaseFailure) || err.violations.some((v) => v.cls === target)) {
            throw err;
          }
        }
      },
    );
    const started = Date.now();
    const shrunk = await fc.check(focused, {
      seed,
      numRuns: 1,
      plugins: [fc.interruptAfterTimeLimit(budget)],
    });
    shrinkBudgetMs -= Date.now() - started;
    if (shrunk.failed && shrunk.counterexample) {
      failure = toFailure(modeName, n, shrunk as fc.RunDetails<[Case]>, first, true);
      failure.violations = failure.violations.filter((v) => v.cls === target);
    }
  }
  return failure;
}

async function pool<T>(items: T[], limit: number, fn: (t: T) => Promise<void>): Promise<void> {
  let i = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (i < items.length) await fn(items[i++] as T);
    }),
  );
}

function classes(f: Failure): string {
  return [...new Set(f.violations.map((v) => v.cls))].join(", ");
}

function report(failures: Failure[], detailed: number): string {
  const lines: string[] = [];
  failures.forEach((f, i) => {
    if (i >= detailed) {
      lines.push(`FAILED ${f.seed} [${classes(f)}] ${f.violations[0]?.msg.slice(0, 200) ?? ""}`);
      return;
    }
    lines.push(`\n=== FAILED ${f.seed} [${classes(f)}]`);
    lines.push(`replay: CAIRN_SEED=${f.seed} npx vitest run test/replay-generative.test.ts`);
    for (const v of f.violations.slice(0, 8)) lines.push(`  [${v.cls}] ${v.msg}`);
    if (f.violations.length > 8) lines.push(`  ... ${f.violations.length - 8} more`);
    lines.push(`kills: ${f.kills}`);
    lines.push(`${f.shrunk ? "shrunk program" : "program"}:\n${f.program}`);
  });
  return lines.join("\n");
}

async function runMode(modeName: string): Promise<void> {
  const mode = MODES[modeName]!;
  const failures: Failure[] = [];
  const ns = Array.from({ length: COUNT ?? mode.count }, (_, i) => BASE + i);
  if (COUNT === undefined && process.env.CAIRN_SEED_BASE === undefined && !SOAK) {
    for (const n of mode.found ?? []) if (!ns.includes(n)) ns.push(n);
  }
  await pool(ns, mode.concurrency, async (n) => {
    const f = await runCase(modeName, n, 20_000);
    if (f) {
      failures.push(f);
      allFailures.push(f);
    }
  });
  failures.sort((a, b) =>
    a.shrunk === b.shrunk
      ? a.seed.localeCompare(b.seed, undefined, { numeric: true })
      : a.shrunk
        ? -1
        : 1,
  );
  if (failures.length > 0) console.log(report(failures, 3));
  expect(failures.map((f) => `${f.seed} [${classes(f)}]`)).toEqual([]);
  // Most generated cases schedule kills; at least a quarter of the cases must have had one
  // land (today it is more than one per case), or the mode tested no crash at all.
  expect(landedKills[modeName] ?? 0).toBeGreaterThanOrEqual(Math.ceil(ns.length / 4));
}

describe.skipIf(ONLY !== undefined)("generative replay", () => {
  afterAll(async () => {
    await closeWorkerPool();
    if (REPORT_FILE) writeFileSync(REPORT_FILE, JSON.stringify(allFailures, null, 1));
    const s = ((Date.now() - stats.startedAt) / 1000).toFixed(0);
    const feats = Object.entries(stats.features)
      .sort()
      .map(([k, v]) => `${k} ${v}`)
      .join(", ");
    const classes = Object.entries(stats.classes)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `${k} ${v}`)
      .join(", ");
    console.log(
      `generative replay: ${stats.programs} programs, kills ${stats.sigkills} SIGKILL / ${stats.inprocKills} in-process, backends sqlite ${stats.backends.sqlite} / postgres ${stats.backends.postgres}${pgUrl ? "" : " (PostgreSQL skipped)"}, ${stats.failures} failed${classes ? ` (${classes})` : ""}, ${s}s\nfeatures: ${feats}`,
    );
  });

  for (const modeName of Object.keys(MODES)) {
    const mode = MODES[modeName]!;
    const skip =
      (mode.backend === "postgres" && !pgUrl) || (ONLY_MODES && !ONLY_MODES.includes(modeName));
    // Concurrent: in-process cases mostly wait on timers, SIGKILL cases on other processes.
    (skip ? it.skip : it.concurrent)(
      `${modeName}: ${COUNT ?? mode.count} programs (${mode.nondet ? "non-deterministic, must be caught" : "replay equals the first run"}; ${mode.crash === "sigkill" ? "SIGKILLed worker processes" : "in-process crashes"}, ${mode.backend})`,
      () => runMode(modeName),
      // The soak's counts (the six modes at once) take longer than the default run's limit.
      SOAK || COUNT !== undefined ? 3_600_000 : 600_000,
    );
  }
});

describe.skipIf(ONLY === undefined)("generative replay: one seed", () => {
  afterAll(closeWorkerPool);
  it(`CAIRN_SEED=${ONLY}`, async () => {
    const [modeName, nText] = String(ONLY).split(":") as [string, string];
    const f = await runCase(modeName, Number(nText), shrinkBudgetMs);
    if (f) console.log(report([f], 1));
    expect(f?.violations ?? []).toEqual([]);
  }, 600_000);
});
