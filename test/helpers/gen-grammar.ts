// The grammar of the generative replay test's programs: fast-check arbitraries of a raw tree
// (names as indexes into a small pool, so calls of the same name meet often), turned into a
// Program by gen-program.ts. A case is a raw program plus where its crash run is killed.
//
// Grammar (raw, before normalize):
//   seq     := node*
//   node    := step | effect | sleep | wait | value | io | loop | par | race | try | child
//   step    := ctx.step(name, body)     body: random real delay, s.spend, mode ok | failOnce
//              (fails its first execution, then succeeds) | fatal (FatalError; only where a
//              try catches it) | broken (FatalError until the test "fixes" it and resumes the
//              failed run; top level only)
//   effect  := ctx.effect(name, { perform, reconcile }) against the ledger
//   sleep   := ctx.sleep(name, ms)
//   wait    := ctx.waitForEvent(ev, { timeout? }) with the events sent before the run starts,
//              or never sent (then with a timeout), so the outcome never depends on timing
//   value   := ctx.now() | ctx.random() | ctx.uuid(), folded into later inputs and the output
//   io      := await a real timer or a file read in workflow code (non-durable)
//   loop    := for (i < 2..3) seq                  (repeated names: key, key#2, ...)
//   par     := Promise.all(seq, seq, ...)          or the same seq cloned per branch with
//              other delays (`items.map(async it => ...)`)
//   race    := Promise.race(winner seq, loser...)  loser: a step whose body waits until the
//              winner has delivered (so the first run's winner is fixed), a wait never
//              answered, or a 20-day sleep
//   try     := try { seq with a fatal step or a failing child } catch { seq }
//   child   := ctx.child(name, gen, sub-program)   (a failing child ends with a fatal step)
//   top     := seq with up to two broken steps and, rarely, an uncaught fatal step at the end
// Failing calls sit only where a try catches them without crossing a par or race, so no
// branch is left running after a rejection. Where a par or race contains io, every name in
// its branches gets a per-branch suffix (the rule the replay core enforces) and values
// (now/random/uuid, which have no name) are left out. A run whose own code awaits io (the
// top-level run, or a child: each run by its own body) names every call by its node and
// loop iteration, waits included (events sent before the run go to those names): the
// interpreter's blocks are helper functions, out of which the replay core does not follow
// code (docs/API.md, "What may run in parallel"). A race winner never contains io (a
// race between a durable call and a timer in workflow code has no fixed winner) nor a child
// (a child's result reaches a parent only when its execution suspends, which a gated loser
// prevents: see test/replay-generative-findings.test.ts, B).
//
// A non-deterministic program is a program of this grammar plus one call whose name, kind,
// order or (a child's) input depends on the worker incarnation, Math.random() or Date.now()
// (gen-interpreter.ts, nondet), at the top level or wrapped (gen-nondet.ts) in a child, a
// parallel branch, a race winner, a catch block, a loop, after a sleep or a wait; a crash
// after that call's record (or, for some, once it has begun durably) and a replay must end
// in NonDeterminismError.
//
// For triage, features can be left out (GenCtx.ex, CAIRN_GEN_EXCLUDE in the test).

import fc from "fast-check";
import { NONDET_PLACES, type NondetPlace } from "./gen-nondet.js";
import { NAME_POOL, type NondetHow, type StepMode } from "./gen-program.js";

export interface KillSpec {
  at: "ledger" | "store-before" | "store-after" | "time";
  frac: number;
}

export interface Case {
  raw: RawNode[];
  kills: KillSpec[];
  nondet: NondetHow | null;
  nondetPos: number;
  /** Where the non-deterministic call lands, outermost first (gen-nondet.ts); none: the top
   *  level. Optional: cases written before it had none. */
  nondetWhere?: NondetPlace[];
  /** When the crash comes: after the non-deterministic call's record, or as soon as it has
   *  begun durably (an intent, a child's create). Optional, as nondetWhere. */
  nondetKill?: NondetKill;
}

export type NondetKill = "record" | "begun";

export type RawName = number;
export type RawNode =
  | { t: "step"; name: RawName; delay: number; spend: number; mode: StepMode }
  | { t: "effect"; name: RawName; delay: number; after: number }
  | { t: "sleep"; name: RawName; ms: number }
  | { t: "wait"; timeout: number | null; sent: boolean }
  | { t: "value"; kind: "now" | "random" | "uuid" }
  | { t: "io"; kind: "timer" | "file"; ms: number }
  | { t: "loop"; n: number; body: RawNode[] }
  | { t: "par"; branches: RawNode[][] }
  | { t: "map"; template: RawNode[]; jitter: number[] }
  | { t: "race"; winner: RawNode[]; losers: RawLoser[] }
  | {
      t: "try";
      body: RawNode[];
      fail: null | "fatal" | "child";
      failAt: number;
      failName: RawName;
      handler: RawNode[];
    }
  | { t: "child"; name: RawName; body: RawNode[]; fails: boolean };

export type RawLoser =
  | { t: "gated"; name: RawName; delay: number }
  | { t: "never" }
  | { t: "longSleep"; name: RawName };

interface GenCtx {
  /** Fatal steps and failing children may appear directly in this sequence (a try's body). */
  fail: boolean;
  /** Waits may expect events sent to the top-level run (not inside children). */
  sent: boolean;
  /** How many more levels of ctx.child are allowed. */
  child: number;
  /** io allowed here (not inside race winners). */
  io: boolean;
  /** Features left out (for triage): node kinds (step, effect, sleep, wait, value, io, loop,
   *  par, map, race, try, child) and step modes (failOnce, fatal, broken, terminal). */
  ex: string[];
}

/** The grammar without par, map, race and try: replay of sequential code. */
export const SEQUENTIAL = ["par", "map", "race", "try"];

const nameArb = fc.integer({ min: 0, max: NAME_POOL.length - 1 });
// Real milliseconds inside step bodies: mostly short, often zero, sometimes longer, so
// parallel branches finish in every order.
const delayArb = fc.oneof(
  { weight: 2, arbitrary: fc.constant(0) },
  { weight: 4, arbitrary: fc.integer({ min: 1, max: 4 }) },
  { weight: 1, arbitrary: fc.integer({ min: 5, max: 12 }) },
);

function stepArb(c: GenCtx): fc.Arbitrary<RawNode> {
  const modes = (
    c.fail ? ["ok", "ok", "ok", "failOnce", "fatal"] : ["ok", "ok", "ok", "ok", "failOnce"]
  ).filter((m) => !c.ex.includes(m)) as StepMode[];
  return fc.record({
    t: fc.constant("step" as const),
    name: nameArb,
    delay: delayArb,
    spend: fc.integer({ min: 0, max: 40 }),
    mode: fc.constantFrom(...modes),
  });
}

type Option = fc.WeightedArbitrary<RawNode> & { kind: string };

/** The options whose kind is not excluded (a step always stays). */
function allowed(c: GenCtx, options: Option[]): Array<fc.WeightedArbitrary<RawNode>> {
  return options.filter((o) => o.kind === "step" || !c.ex.includes(o.kind));
}

function leafArb(c: GenCtx): fc.Arbitrary<RawNode> {
  const leaves: Option[] = [
    { kind: "step", weight: 8, arbitrary: stepArb(c) },
    {
      kind: "effect",
      weight: 2,
      arbitrary: fc.record({
        t: fc.constant("effect" as const),
        name: nameArb,
        delay: delayArb,
        after: delayArb,
      }),
    },
    {
      kind: "sleep",
      weight: 1,
      arbitrary: fc.record({
        t: fc.constant("sleep" as const),
        name: nameArb,
        ms: fc.integer({ min: 1, max: 40 }),
      }),
    },
    {
      kind: "wait",
      weight: 1,
      arbitrary: fc
        .record({
          t: fc.constant("wait" as const),
          timeout: fc.option(fc.integer({ min: 5, max: 60 }), { nil: null }),
          sent: c.sent ? fc.boolean() : fc.constant(false),
        })
        // Never sent and no timeout would block forever.
        .map((w) => (!w.sent && w.timeout === null ? { ...w, timeout: 20 } : w)),
    },
    {
      kind: "value",
      weight: 2,
      arbitrary: fc.record({
        t: fc.constant("value" as const),
        kind: fc.constantFrom("now" as const, "random" as const, "uuid" as const),
      }),
    },
  ];
  if (c.io) {
    leaves.push({
      kind: "io",
      weight: 1,
      arbitrary: fc.record({
        t: fc.constant("io" as const),
        kind: fc.constantFrom("timer" as const, "file" as const),
        ms: fc.integer({ min: 0, max: 6 }),
      }),
    });
  }
  return fc.oneof(...allowed(c, leaves));
}

const memo = new Map<string, fc.Arbitrary<RawNode[]>>();

/** A sequence of 1..max nodes, nested at most `depth` more levels. */
export function seqArb(depth: number, c: GenCtx, max = 4): fc.Arbitrary<RawNode[]> {
  const key = JSON.stringify([depth, c, max]);
  let arb = memo.get(key);
  if (!arb) {
    arb = fc.array(nodeArb(depth, c), { minLength: 1, maxLength: max });
    memo.set(key, arb);
  }
  return arb;
}

function nodeArb(depth: number, c: GenCtx): fc.Arbitrary<RawNode> {
  if (depth <= 0) return leafArb(c);
  const inner: GenCtx = { ...c, fail: false };
  const d = depth - 1;
  const options: Option[] = [
    { kind: "step", weight: 14, arbitrary: leafArb(c) },
    {
      kind: "loop",
      weight: 2,
      arbitrary: fc.record({
        t: fc.constant("loop" as const),
        n: fc.integer({ min: 2, max: 3 }),
        body: seqArb(d, c, 3),
      }),
    },
    {
      kind: "par",
      weight: 2,
      arbitrary: fc.record({
        t: fc.constant("par" as const),
        branches: fc.array(seqArb(d, inner, 3), { minLength: 2, maxLength: 3 }),
      }),
    },
    {
      kind: "map",
      weight: 3,
      arbitrary: fc.record({
        t: fc.constant("map" as const),
        template: seqArb(d, inner, 3),
        jitter: fc.array(fc.integer({ min: 0, max: 9 }), { minLength: 2, maxLength: 4 }),
      }),
    },
    {
      kind: "race",
      weight: 2,
      arbitrary: fc.record({
        t: fc.constant("race" as const),
        // No io (see the header) and no child: a child's result reaches a running parent
        // only when the parent's execution suspends, which a gated loser prevents.
        winner: seqArb(d, { ...inner, io: false, child: 0 }, 2),
        losers: fc.array(
          fc.oneof(
            {
              weight: 3,
              arbitrary: fc.record({
                t: fc.constant("gated" as const),
                name: nameArb,
                delay: delayArb,
              }),
            },
            { weight: 1, arbitrary: fc.record({ t: fc.constant("never" as const) }) },
            {
              weight: 1,
              arbitrary: fc.record({ t: fc.constant("longSleep" as const), name: nameArb }),
            },
          ),
          { minLength: 1, maxLength: 2 },
        ),
      }),
    },
    {
      kind: "try",
      weight: 2,
      arbitrary: fc.record({
        t: fc.constant("try" as const),
        body: seqArb(d, { ...c, fail: true }, 3),
        fail:
          c.child > 0
            ? fc.constantFrom(null, "fatal" as const, "fatal" as const, "child" as const)
            : fc.constantFrom(null, "fatal" as const),
        failAt: fc.nat({ max: 3 }),
        failName: nameArb,
        handler: fc.oneof(fc.constant<RawNode[]>([]), seqArb(0, inner, 2)),
      }),
    },
  ];
  if (c.child > 0) {
    options.push({
      kind: "child",
      weight: 2,
      arbitrary: fc.record({
        t: fc.constant("child" as const),
        name: nameArb,
        body: seqArb(d, { fail: false, sent: false, child: c.child - 1, io: true, ex: c.ex }, 3),
        fails: c.fail ? fc.boolean() : fc.constant(false),
      }),
    });
  }
  return fc.oneof(...allowed(c, options));
}

const TOP: GenCtx = { fail: false, sent: true, child: 2, io: true, ex: [] };

export function caseArb(options: {
  nondet: boolean;
  maxDepth?: number;
  /** Features to leave out: see GenCtx.ex (SEQUENTIAL: no concurrency). */
  exclude?: string[];
}): fc.Arbitrary<Case> {
  const ex = [...(options.exclude ?? [])].sort();
  const top = fc
    .record({
      body: seqArb(options.maxDepth ?? 3, { ...TOP, ex }, 5),
      // Broken steps and an uncaught fatal step live at the top level only.
      broken: fc.oneof(
        { weight: 6, arbitrary: fc.constant([]) },
        {
          weight: 4,
          arbitrary: fc.array(
            fc.record({ at: fc.nat({ max: 5 }), name: nameArb, delay: delayArb }),
            { minLength: 1, maxLength: 2 },
          ),
        },
      ),
      terminal: fc.oneof(
        { weight: 9, arbitrary: fc.constant(false) },
        { weight: 1, arbitrary: fc.constant(true) },
      ),
    })
    .map(({ body, broken, terminal }) => {
      const out = [...body];
      for (const b of ex.includes("broken") ? [] : broken) {
        out.splice(Math.min(b.at, out.length), 0, {
          t: "step",
          name: b.name,
          delay: b.delay,
          spend: 5,
          mode: "broken",
        });
      }
      if (terminal && !ex.includes("terminal"))
        out.push({ t: "step", name: 0, delay: 1, spend: 1, mode: "fatal" });
      return out;
    });
  const kill = fc.record({
    at: fc.constantFrom(
      "ledger" as const,
      "store-before" as const,
      "store-after" as const,
      "time" as const,
    ),
    frac: fc.integer({ min: 0, max: 1000 }).map((x) => x / 1000),
  });
  return fc.record({
    raw: top,
    kills: fc.array(kill, { minLength: 1, maxLength: 4 }),
    nondet: options.nondet
      ? fc.constantFrom<NondetHow>(
          "name-inc",
          "name-random",
          "name-date",
          "kind-inc",
          "skip-inc",
          "input-inc",
          "child-wf-inc",
          "swap-inc",
          "value-move-inc",
          "value-skip-inc",
          "twin-skip-inc",
          "effect-kind-inc",
          "wait-kind-inc",
          "loser-skip-inc",
          "loser-name-inc",
          "value-kind-inc",
          "prompt-inc",
        )
      : fc.constant(null),
    nondetPos: fc.nat({ max: 5 }),
    nondetWhere: options.nondet
      ? fc.array(fc.constantFrom(...NONDET_PLACES), { maxLength: 2 })
      : fc.constant([]),
    nondetKill: fc.constantFrom<NondetKill>("record", "record", "begun"),
  });
}
