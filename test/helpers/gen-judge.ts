// The pass conditions of the generative replay test (see gen-harness.ts for the runs).
//
// Self checks, on any run (the reference too: it replays after every suspension and resume):
// - order: every execution of a run received the same values in the same order as the last
//   (longest) execution of that run, up to where it stopped (the replay equals the first run);
//   a value received late (outside any hand-over's cascade, after a timer or I/O of the
//   workflow's own) only the same value, since its place among concurrent branches is timing;
// - nde: no NonDeterminismError in a deterministic program;
// - exec-extra / exec-unrecorded: a step body ran once per key (twice for fail-once and for
//   broken steps), more only for executions in flight at a kill;
// - input-differs / value-lost: every execution of a key saw the same input (value-lost: the
//   same results but another ctx.now/random/uuid value, one that was not durable before a
//   body used it);
// - effect-dup: an effect's perform happened at most once;
// - phantom-wl: a crashed-attempt record (WORKER_LOST) only for a call in flight at a kill,
//   or made again before the recovering execution handed over a new outcome (the rule of
//   docs/API.md: a kill between a record and the next call's start charges that call; a
//   late call, made after a timer or I/O of the workflow's own, has no fixed place, so any
//   kill before its record may charge it);
// - spend: a run's budgetSpent is the sum of its recorded steps' and attempts' spend.
// Cross checks, crash run against the reference: status, error, output and every value
// delivered to every call site (ctx.now/random/uuid values renamed per call site).

import { idempotencyKey } from "../../src/lib/ids.js";
import type { StepRecord } from "../../src/store/store.js";
import { finishedExecutions, type RunResult } from "./gen-harness.js";
import type { V } from "./gen-interpreter.js";
import type { ObsRow } from "./gen-ledger.js";
import type { Node, Program } from "./gen-program.js";

export interface Violation {
  cls: string;
  msg: string;
}

const TOKEN_RE = /(now|random|uuid):(n[\w.@]+):([0-9a-fA-F.eE+-]+)/g;

/** Renames raw ctx.now/random/uuid values: per call site, #0 for the first value seen, #1
 *  for a second (which only a run that lost a value has). */
export class Canon {
  private readonly seen = new Map<string, string[]>();

  text(s: string): string {
    return s.replace(TOKEN_RE, (_m, kind: string, inst: string, raw: string) => {
      const k = `${kind}:${inst}`;
      const list = this.seen.get(k) ?? [];
      if (!this.seen.has(k)) this.seen.set(k, list);
      let i = list.indexOf(raw);
      if (i < 0) {
        list.push(raw);
        i = list.length - 1;
      }
      return `${k}:#${i}`;
    });
  }
}

function isLoser(instance: string): boolean {
  return /\.l\d+(@|$)/.test(instance);
}

interface ExecSummary {
  starts: number;
  mode: string;
  instances: Map<string, Set<string>>;
  run: string;
}

/** Per run: observation rows of each execution, in order; and the last execution's. */
function executions(rows: ObsRow[]): Map<string, Map<string, ObsRow[]>> {
  const byRun = new Map<string, Map<string, ObsRow[]>>();
  for (const r of rows) {
    let runMap = byRun.get(r.run);
    if (!runMap) {
      runMap = new Map();
      byRun.set(r.run, runMap);
    }
    const list = runMap.get(r.exec) ?? [];
    list.push(r);
    runMap.set(r.exec, list);
  }
  return byRun;
}

function longest(execs: Map<string, ObsRow[]>): ObsRow[] {
  let best: ObsRow[] = [];
  for (const rows of execs.values()) if (rows.length >= best.length) best = rows;
  return best;
}

export function selfChecks(prog: Program, r: RunResult, label: string): Violation[] {
  const out: Violation[] = [];
  const v = (cls: string, msg: string) => out.push({ cls, msg: `${label}: ${msg}` });

  if (r.status === "stuck") v("stuck", `the run did not finish: ${r.logs.slice(-3).join(" | ")}`);
  for (const run of r.runs) {
    if (run.error?.code === "NON_DETERMINISM") {
      v("nde", `run "${run.id}" failed: ${run.error.message}`);
    }
  }

  // order: each execution is a prefix of the run's longest one. A value received late (no
  // cairn hand-over set it off: a race whose synchronous winner settled it after a timer or
  // I/O of the workflow's own) inside a Promise.all whose branches await such work has no
  // fixed place among the hand-overs of the other branches: it must be the same value,
  // wherever it comes. Whether a value comes late is itself timing, and differs between executions (a first
  // execution whose steps ran settles a race in a hand-over's cascade; its replay, handed
  // recorded outcomes at once, after the workflow's own timer): a value received late in any
  // execution of the run has no fixed place in any of them (ip-sqlite:901126).
  const mixed = timingMixed(prog.body);
  for (const [run, execs] of executions(r.ledger.obsRows())) {
    const unplaced = new Set<string>();
    for (const rows of execs.values()) {
      for (const o of rows) {
        if (o.late && mixed.has(o.instance.split("@")[0]!)) unplaced.add(o.instance);
      }
    }
    const placed = (o: ObsRow) => !unplaced.has(o.instance);
    const full = longest(execs);
    const fullOrdered = full.filter(placed);
    const fullValue = new Map(full.map((o) => [o.instance, o.value]));
    for (const [exec, rows] of execs) {
      const ordered = rows.filter(placed);
      for (let i = 0; i < ordered.length; i++) {
        const a = ordered[i]!;
        const b = fullOrdered[i];
        if (!b || a.instance !== b.instance || a.value !== b.value) {
          v(
            "order",
            `run "${run}" execution ${exec} received #${a.n} ${a.instance} = ${a.value}, but the last execution received ${b ? `${b.instance} = ${b.value} (its #${b.n})` : "nothing"} there`,
          );
          break;
        }
      }
      for (const a of rows) {
        if (!placed(a) && fullValue.get(a.instance) !== a.value) {
          v(
            "order",
            `run "${run}" execution ${exec} received ${a.instance} = ${a.value} (#${a.n}, late), but the last execution received ${fullValue.has(a.instance) ? fullValue.get(a.instance) : "nothing"} there`,
          );
          break;
        }
      }
    }
  }

  // Journal facts per idempotency key.
  const keyOf = new Map<string, string>();
  const runOf = new Map<string, string>();
  const outcomes = new Map<string, number>();
  const workerLost = new Map<string, number>();
  const lastOutcome = new Map<string, StepRecord>();
  const bump = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1);
  for (const run of r.runs) {
    const j = r.journals.get(run.id);
    if (!j) continue;
    const idem = (key: string) => {
      const i = idempotencyKey(run.id, key);
      keyOf.set(i, `${run.id}/${key}`);
      runOf.set(i, run.id);
      return i;
    };
    for (const key of finishedExecutions(j)) bump(outcomes, idem(key));
    for (const s of j.steps) {
      const held = lastOutcome.get(idem(s.key));
      if (!held || s.generation >= held.generation) lastOutcome.set(idem(s.key), s);
    }
    for (const a of j.attempts) {
      if (a.error.code === "WORKER_LOST") bump(workerLost, idem(a.key));
    }
    for (const i of j.intents) idem(i.key);
    let spent = 0;
    for (const s of j.steps) spent += s.spend.tokens ?? 0;
    for (const a of j.attempts) spent += a.spend.tokens ?? 0;
    const recorded = run.budgetSpent.tokens ?? 0;
    if (Math.abs(recorded - spent) > 1e-9) {
      v(
        "spend",
        `run "${run.id}" has budgetSpent ${recorded} tokens, its journal records ${spent}`,
      );
    }
  }

  const allowedUnrecorded = new Map<string, number>();
  const inFlightKills = new Map<string, number>();
  for (const k of r.kills) {
    for (const [idem, n] of k.unrecorded) {
      allowedUnrecorded.set(idem, Math.max(allowedUnrecorded.get(idem) ?? 0, n));
    }
    for (const idem of k.inFlight) bump(inFlightKills, idem);
  }

  const execs = new Map<string, ExecSummary>();
  for (const e of r.ledger.execRows()) {
    if (e.phase !== "start") continue;
    let s = execs.get(e.idem);
    if (!s) {
      s = { starts: 0, mode: e.mode, instances: new Map(), run: e.run };
      execs.set(e.idem, s);
    }
    s.starts++;
    const inputs = s.instances.get(e.instance) ?? new Set();
    inputs.add(e.input);
    s.instances.set(e.instance, inputs);
  }
  const expected: Record<string, number> = { ok: 1, failOnce: 2, fatal: 1, broken: 2, gated: 1 };
  for (const [idem, s] of execs) {
    const where = keyOf.get(idem) ?? `${s.run}/?`;
    const insts = [...s.instances.keys()];
    const allowed = allowedUnrecorded.get(idem) ?? 0;
    const exp = expected[s.mode] ?? 1;
    // A gated loser may be cut off whenever an execution ends (the run finished or failed
    // while it ran): only its inputs are checked.
    if (s.mode !== "gated" && s.starts > exp + allowed) {
      v(
        "exec-extra",
        `step "${where}" (${insts.join(", ")}, ${s.mode}) ran ${s.starts} times; expected ${exp}, plus at most ${allowed} interrupted by kills`,
      );
    }
    const unrecorded = s.starts - (outcomes.get(idem) ?? 0);
    if (s.mode !== "gated" && unrecorded > allowed) {
      v(
        "exec-unrecorded",
        `step "${where}" (${insts.join(", ")}) ran ${s.starts} times, ${unrecorded} without a recorded outcome, and no kill interrupted ${unrecorded - allowed} of them`,
      );
    }
    const variants = [...s.instances.values()].reduce((n, set) => n + set.size, 0);
    if (insts.length > 1) {
      v(
        "input-differs",
        `step "${where}" was executed for different call sites: ${insts.join(", ")}`,
      );
    } else if (variants > 1) {
      const inputs = [...(s.instances.get(insts[0] ?? "") ?? [])].map((x) => JSON.parse(x) as V);
      if (new Set(inputs.map((x) => x.h)).size === 1) {
        // Same results upstream, other ctx.now/random/uuid values: one was not durable
        // before this body used it.
        const seen = inputs.map((x) => x.t.filter((t) => !inputs.every((y) => y.t.includes(t))));
        v(
          "value-lost",
          `step "${where}" (${insts[0]}) was executed with ${variants} different ctx.now/random/uuid values: ${seen.map((t) => t.join(" ")).join(" vs ")}`,
        );
      } else {
        v(
          "input-differs",
          `step "${where}" (${insts[0]}) was executed with ${variants} different inputs`,
        );
      }
    }
  }

  const fx = new Map<string, { performs: number; instances: Set<string>; inputs: Set<string> }>();
  for (const e of r.ledger.effectRows()) {
    const f = fx.get(e.idem) ?? { performs: 0, instances: new Set(), inputs: new Set() };
    fx.set(e.idem, f);
    if (e.op === "perform") f.performs++;
    f.instances.add(e.instance);
    f.inputs.add(e.input);
  }
  for (const [idem, f] of fx) {
    const where = keyOf.get(idem) ?? idem;
    if (f.performs > 1) v("effect-dup", `effect "${where}" was performed ${f.performs} times`);
    if (f.instances.size > 1) {
      v(
        "input-differs",
        `effect "${where}" was called from different call sites: ${[...f.instances].join(", ")}`,
      );
    } else if (f.inputs.size > 1) {
      const inputs = [...f.inputs].map((x) => JSON.parse(x) as V);
      const cls = new Set(inputs.map((x) => x.h)).size === 1 ? "value-lost" : "input-differs";
      v(cls, `effect "${where}" was called with ${f.inputs.size} different inputs`);
    }
  }

  // A kill between a record and the next call's start is charged to that next call: made
  // again before the recovering execution handed over any new outcome. A late call (made
  // after the workflow awaited a timer or I/O of its own) has no fixed place: the record's
  // issuedAfter is where the execution that recorded it made it, and a recovery may make it
  // before its first new outcome whatever that says. Any kill its run lived through before
  // its record existed may charge it then.
  const frontierKills = new Map<string, number>();
  for (const [idem, rec] of lastOutcome) {
    for (const k of r.kills) {
      const delivered = k.deliveredAt.get(rec.runId);
      if (delivered === undefined) continue;
      if (
        (rec.issuedLate && !k.recorded.has(idem)) ||
        (rec.issuedAfter !== null && rec.issuedAfter <= delivered)
      ) {
        bump(frontierKills, idem);
      }
    }
  }
  // A call that never got an outcome (a race's loser, cut off when its run ended) may be
  // made again, and charged, by the recovery after any kill its run lived through.
  const openKills = (idem: string) =>
    lastOutcome.has(idem)
      ? 0
      : r.kills.filter((k) => k.deliveredAt.has(runOf.get(idem) ?? "")).length;
  for (const [idem, n] of workerLost) {
    const allowed = Math.max(
      inFlightKills.get(idem) ?? 0,
      frontierKills.get(idem) ?? 0,
      openKills(idem),
    );
    if (n > allowed) {
      v(
        "phantom-wl",
        `"${keyOf.get(idem) ?? idem}" has ${n} crashed-attempt (WORKER_LOST) records; only ${allowed} kill(s) found it in flight`,
      );
    }
  }
  return out;
}

/** The node ids (race losers too) inside a par one of whose branches awaits a timer or I/O
 *  of the workflow's own (a child's body is its own run: its pars count there). */
function timingMixed(body: Node[]): Set<string> {
  const out = new Set<string>();
  const inner = (n: Node): Node[][] =>
    n.t === "loop"
      ? [n.body]
      : n.t === "par"
        ? n.branches
        : n.t === "race"
          ? [n.winner]
          : n.t === "try"
            ? [n.body, n.handler]
            : [];
  const hasIo = (nodes: Node[]): boolean => nodes.some((n) => n.t === "io" || inner(n).some(hasIo));
  const ids = (nodes: Node[]): void => {
    for (const n of nodes) {
      out.add(n.id);
      if (n.t === "race") for (const l of n.losers) out.add(l.id);
      for (const b of inner(n)) ids(b);
    }
  };
  const walk = (nodes: Node[]): void => {
    for (const n of nodes) {
      if (n.t === "par" && n.branches.some(hasIo)) for (const b of n.branches) ids(b);
      if (n.t === "child") walk(n.body);
      for (const b of inner(n)) walk(b);
    }
  };
  walk(body);
  return out;
}

/** Re-keys each run's executions by its call site: the root by its id, a child by its
 *  parent's site and the first call site its body reached (a child's nodes are its own). */
function bySite<T>(r: RunResult, execs: Map<string, Map<string, T>>): Map<string, Map<string, T>> {
  const parentOf = new Map(r.runs.map((x) => [x.id, x.parentId]));
  const firstSite = (run: string): string => {
    let best: string | undefined;
    for (const rows of execs.get(run)?.values() ?? []) {
      for (const row of rows as unknown as ObsRow[]) {
        if (best === undefined || compareInstances(row.instance, best) < 0) best = row.instance;
      }
    }
    return best ?? `(${run})`;
  };
  const siteOf = (run: string): string => {
    const parent = parentOf.get(run);
    return parent ? `${siteOf(parent)}/${firstSite(run)}` : run;
  };
  const out = new Map<string, Map<string, T>>();
  for (const [run, e] of execs) out.set(siteOf(run), e);
  return out;
}

function compareInstances(a: string, b: string): number {
  const na = Number(/^n(\d+)/.exec(a)?.[1] ?? -1);
  const nb = Number(/^n(\d+)/.exec(b)?.[1] ?? -1);
  return na !== nb ? na - nb : a.localeCompare(b);
}

export function crossChecks(ref: RunResult, crash: RunResult): Violation[] {
  const out: Violation[] = [];
  const v = (cls: string, msg: string) => out.push({ cls, msg });
  if (ref.status !== crash.status) {
    v(
      "status",
      `the reference ended ${ref.status}${errText(ref)}, the crash run ${crash.status}${errText(crash)}`,
    );
    return out;
  }
  if (
    ref.status === "failed" &&
    (ref.error?.code !== crash.error?.code || ref.error?.message !== crash.error?.message)
  ) {
    v("status", `the reference failed${errText(ref)}, the crash run${errText(crash)}`);
  }
  const cr = new Canon();
  const cc = new Canon();
  const outRef = ref.output ? cr.text(JSON.stringify(ref.output)) : "";
  const outCrash = crash.output ? cc.text(JSON.stringify(crash.output)) : "";
  if (outRef !== outCrash)
    v("output", `outputs differ: reference ${outRef}, crash run ${outCrash}`);

  // Every call site's value, per run, in the runs' last executions. Runs are matched by
  // call site, not id: parallel children of one name take their "#n" keys in the order the
  // first execution called them, which timing may change from one first execution to another.
  const refExecs = bySite(ref, executions(ref.ledger.obsRows()));
  const crashExecs = bySite(crash, executions(crash.ledger.obsRows()));
  for (const run of new Set([...refExecs.keys(), ...crashExecs.keys()])) {
    const a = new Map(
      longest(refExecs.get(run) ?? new Map()).map((o) => [o.instance, cr.text(o.value)]),
    );
    const b = new Map(
      longest(crashExecs.get(run) ?? new Map()).map((o) => [o.instance, cc.text(o.value)]),
    );
    for (const [inst, val] of a) {
      const other = b.get(inst);
      if (other === undefined) {
        if (!isLoser(inst))
          v(
            "cross-run",
            `run "${run}": ${inst} received ${val} in the reference, nothing in the crash run`,
          );
      } else if (other !== val) {
        v(
          "cross-run",
          `run "${run}": ${inst} received ${val} in the reference, ${other} in the crash run`,
        );
      }
    }
    for (const [inst, val] of b) {
      if (!a.has(inst) && !isLoser(inst)) {
        v(
          "cross-run",
          `run "${run}": ${inst} received ${val} in the crash run, nothing in the reference`,
        );
      }
    }
  }
  return out;
}

export function nondetChecks(crash: RunResult): Violation[] {
  if (crash.kills.length === 0) {
    return [
      {
        cls: "harness",
        msg: "the non-deterministic call was never recorded, so no crash came after it",
      },
    ];
  }
  if (crash.status === "failed" && crash.error?.code === "NON_DETERMINISM") return [];
  // A child whose replay diverged fails with NonDeterminismError; its parent is handed that
  // failure as the child call's outcome, which code that drops every error may catch and go
  // on from: the divergence was refused, in the child's run.
  const child = crash.runs.find(
    (r) => r.status === "failed" && r.error?.code === "NON_DETERMINISM",
  );
  if (child) return [];
  return [
    {
      cls: "nondet-missed",
      msg: `a non-deterministic program ended ${crash.status}${errText(crash)} after a crash and replay, without NonDeterminismError`,
    },
  ];
}

function errText(r: RunResult): string {
  return r.error ? ` (${r.error.code ?? r.error.name}: ${r.error.message})` : "";
}

export type { V };
