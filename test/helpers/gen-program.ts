// Generated workflow programs as plain data (a worker process interprets the very same
// program, test/helpers/gen-interpreter.ts): `normalize` turns a raw case of the grammar
// (gen-grammar.ts) into one (ids, names, events sent before the run, and the naming rule for
// branches that await non-durable I/O: every name in such a par or race gets a per-branch
// suffix, and ctx.now/random/uuid, which have no name, are left out); `printProgram` shows
// one as the workflow code it stands for.

import type { Case, RawName, RawNode } from "./gen-grammar.js";
import { placeNondet, usablePlaces } from "./gen-nondet.js";

export const NAME_POOL = ["fetch", "summarize", "plan", "edit", "review"] as const;

export type StepMode = "ok" | "failOnce" | "fatal" | "broken";
export type NondetHow =
  | "name-inc"
  | "name-random"
  | "name-date"
  | "kind-inc"
  | "skip-inc"
  /** The same child call (name, workflow), its input differing per worker incarnation. */
  | "input-inc"
  /** The same child call (name, input), of another workflow on odd incarnations. */
  | "child-wf-inc"
  /** Two steps, both recorded before the crash, made in the other order after it. */
  | "swap-inc"
  /** A ctx.now() made before a step, after it on odd incarnations. */
  | "value-move-inc"
  /** A ctx.now() before a step, left out on odd incarnations. */
  | "value-skip-inc"
  /** Two steps of one name (keys `twin`, `twin#2`) before "nd-after"; odd incarnations leave
   *  out the first, so the second would be handed the first's result. */
  | "twin-skip-inc"
  /** A race's loser (recorded after the winner), left out on odd incarnations. */
  | "loser-skip-inc"
  /** A race's loser whose name differs per incarnation. */
  | "loser-name-inc"
  /** An effect, a step of that name on odd incarnations. */
  | "effect-kind-inc"
  /** A wait for an event never sent (timing out), a sleep of that name on odd incarnations. */
  | "wait-kind-inc"
  /** A labelled ctx.now(), a ctx.random() of that label on odd incarnations. */
  | "value-kind-inc"
  /** A durable model call (cairn/ai) whose prompt differs per incarnation, its errors caught
   *  and dropped by the code (the request digest must fail the run all the same). */
  | "prompt-inc";

export type Node =
  | {
      t: "step";
      id: string;
      name: string;
      delay: number;
      spend: number;
      mode: StepMode;
      broken?: number;
    }
  | { t: "effect"; id: string; name: string; delay: number; after: number }
  | { t: "sleep"; id: string; name: string; ms: number }
  | { t: "wait"; id: string; event: string; timeoutMs: number | null; sent: boolean }
  | { t: "value"; id: string; kind: "now" | "random" | "uuid" }
  | { t: "io"; id: string; kind: "timer" | "file"; ms: number }
  | { t: "loop"; id: string; n: number; body: Node[] }
  | { t: "par"; id: string; branches: Node[][] }
  | { t: "race"; id: string; winner: Node[]; losers: Loser[] }
  | {
      t: "try";
      id: string;
      body: Node[];
      handler: Node[];
      /** Catches everything, cairn's own errors too (code that swallows every error). */
      catchAll?: boolean;
    }
  | {
      t: "child";
      id: string;
      name: string;
      body: Node[];
      /** The child run awaits io of its own (Program.uniqueNames, for the child's run). */
      uniqueNames: boolean;
    }
  | { t: "nondet"; id: string; how: NondetHow };

export type Loser =
  | { t: "gated"; id: string; name: string; delay: number }
  | { t: "never"; id: string; event: string }
  | { t: "longSleep"; id: string; name: string };

export interface SentEvent {
  name: string;
  payload: string;
}

export interface Program {
  body: Node[];
  /** Sent to the top-level run before any worker starts. */
  events: SentEvent[];
  nondet: NondetHow | null;
  /** Broken steps: each needs a fix and a resume of the failed run. */
  broken: number;
  /** Ends with an uncaught fatal step (the run fails for good). */
  terminal: boolean;
  /** The program awaits io of its own somewhere: every call gets a name of its own (its node
   *  id, and the loop iteration, added by the interpreter). The replay rules refuse a name
   *  reused after such io unless the later call continues from the earlier one, which the
   *  interpreter's helper functions hide (docs/API.md, "What may run in parallel"). */
  uniqueNames: boolean;
}

/** One crash of the crash run: where it happens, as a fraction of the reference run's
 *  ledger writes / store calls / duration (so it lands inside the run). */
interface NormCtx {
  next: { id: number };
  /** Name suffix: set inside a par/race (and its nested ones) that contains io. */
  suffix: string | null;
  /** Product of enclosing loop counts (how often a wait here runs). */
  times: number;
  /** Enclosing loop counts, outermost first (in this run: a child's restart). */
  loops: number[];
  events: SentEvent[];
  broken: { n: number };
  topRun: boolean;
  /** Every name gets its node id (the program has io). */
  unique: boolean;
}

function containsIo(nodes: RawNode[]): boolean {
  return nodes.some((n) => {
    switch (n.t) {
      case "io":
        return true;
      case "loop":
        return containsIo(n.body);
      case "par":
        return n.branches.some(containsIo);
      case "map":
        return containsIo(n.template);
      case "race":
        return containsIo(n.winner);
      case "try":
        return containsIo(n.body) || containsIo(n.handler);
      default:
        // A child is another run: its io does not order this run's calls.
        return false;
    }
  });
}

function jitterDelays(nodes: RawNode[], j: number): RawNode[] {
  const jd = (d: number) => (d + j * 3) % 13;
  return nodes.map((n): RawNode => {
    switch (n.t) {
      case "step":
        return { ...n, delay: jd(n.delay) };
      case "effect":
        return { ...n, delay: jd(n.delay), after: jd(n.after) };
      case "loop":
        return { ...n, body: jitterDelays(n.body, j) };
      case "par":
        return { ...n, branches: n.branches.map((b) => jitterDelays(b, j)) };
      case "map":
        return { ...n, template: jitterDelays(n.template, j) };
      case "race":
        return { ...n, winner: jitterDelays(n.winner, j) };
      case "try":
        return { ...n, body: jitterDelays(n.body, j), handler: jitterDelays(n.handler, j) };
      default:
        return n;
    }
  });
}

export function normalize(c: Case): Program {
  const nc: NormCtx = {
    next: { id: 0 },
    suffix: null,
    times: 1,
    loops: [],
    events: [],
    broken: { n: 0 },
    topRun: true,
    unique: containsIo(c.raw),
  };
  const raw = [...c.raw];
  const last = raw.at(-1);
  const terminal = last?.t === "step" && last.mode === "fatal";
  const body = normSeq(raw, nc);
  if (c.nondet) {
    // Before the terminal failure, so that it is always reached.
    const where = usablePlaces(c.nondet, c.nondetWhere ?? []);
    // A labelled value made after the run's own I/O (late) has no fixed place among the
    // run's calls: a replay matches it by its label wherever it is made, and hands it its
    // recorded value (docs/API.md, "What may run in parallel"). Moved, it is no divergence
    // cairn can see, nor other data; left out, it is (the end-of-run check).
    const how =
      c.nondet === "value-move-inc" && nc.unique && !where.includes("child")
        ? "value-skip-inc"
        : c.nondet;
    const nd: Node = { t: "nondet", id: `n${nc.next.id++}`, how };
    const placed = placeNondet(nd, where, nc.next, c.nondetPos);
    body.splice(Math.min(c.nondetPos, body.length - (terminal ? 1 : 0)), 0, ...placed);
  }
  return {
    body,
    events: nc.events,
    nondet: c.nondet,
    broken: nc.broken.n,
    terminal,
    uniqueNames: nc.unique,
  };
}

/** Every combination of iteration indexes of loops with these counts, in loop order. */
function iterations(counts: number[]): number[][] {
  let out: number[][] = [[]];
  for (const c of counts)
    out = out.flatMap((it) => Array.from({ length: c }, (_, i) => [...it, i]));
  return out;
}

function nm(i: RawName, nc: NormCtx, id?: string): string {
  const base = NAME_POOL[i % NAME_POOL.length] ?? "step";
  if (nc.unique && id !== undefined) return `${base}:${id}`;
  return nc.suffix === null ? base : `${base}:${nc.suffix}`;
}

function branchCtx(nc: NormCtx, concurrentIo: boolean, tag: string): NormCtx {
  if (!concurrentIo && nc.suffix === null) return nc;
  return { ...nc, suffix: nc.suffix === null ? tag : `${nc.suffix}.${tag}` };
}

function normSeq(nodes: RawNode[], nc: NormCtx): Node[] {
  const out: Node[] = [];
  for (const n of nodes) {
    const norm = normNode(n, nc);
    if (norm) out.push(norm);
  }
  return out;
}

function normNode(n: RawNode, nc: NormCtx): Node | undefined {
  const id = `n${nc.next.id++}`;
  switch (n.t) {
    case "step":
      if (n.mode === "broken") {
        return {
          t: "step",
          id,
          name: nm(n.name, nc, id),
          delay: n.delay,
          spend: n.spend,
          mode: "broken",
          broken: nc.broken.n++,
        };
      }
      return {
        t: "step",
        id,
        name: nm(n.name, nc, id),
        delay: n.delay,
        spend: n.spend,
        mode: n.mode,
      };
    case "effect":
      return { t: "effect", id, name: nm(n.name, nc, id), delay: n.delay, after: n.after };
    case "sleep":
      return { t: "sleep", id, name: nm(n.name, nc, id), ms: n.ms };
    case "wait": {
      const event = `ev-${id}`;
      const sent = n.sent && nc.topRun;
      if (sent && nc.unique && nc.loops.length > 0) {
        // With unique names a wait in a loop waits for an event of its iteration's own name
        // (`ev-n4@1`, gen-interpreter.ts): a wait reused by name after io is refused.
        for (const it of iterations(nc.loops)) {
          const name = `${event}@${it.join(".")}`;
          nc.events.push({ name, payload: `p:${name}:0` });
        }
      } else if (sent) {
        for (let k = 0; k < nc.times; k++)
          nc.events.push({ name: event, payload: `p:${event}:${k}` });
      }
      return { t: "wait", id, event, timeoutMs: sent || n.timeout !== null ? n.timeout : 20, sent };
    }
    case "value":
      // Left out where branches await io, unless every call is labelled (the interpreter
      // labels values by their node then).
      if (nc.suffix !== null && !nc.unique) return undefined;
      return { t: "value", id, kind: n.kind };
    case "io":
      return { t: "io", id, kind: n.kind, ms: n.ms };
    case "loop":
      return {
        t: "loop",
        id,
        n: n.n,
        body: normSeq(n.body, { ...nc, times: nc.times * n.n, loops: [...nc.loops, n.n] }),
      };
    case "par": {
      const io = containsIo(n.branches.flat());
      return {
        t: "par",
        id,
        branches: n.branches.map((b, i) => normSeq(b, branchCtx(nc, io, `b${id}.${i}`))),
      };
    }
    case "map": {
      const io = containsIo(n.template);
      return {
        t: "par",
        id,
        branches: n.jitter.map((j, i) =>
          normSeq(jitterDelays(n.template, j), branchCtx(nc, io, `b${id}.${i}`)),
        ),
      };
    }
    case "race": {
      const io = containsIo(n.winner);
      const w = branchCtx(nc, io, `w${id}`);
      const losers = n.losers.map((l, i): Loser => {
        const lid = `${id}.l${i}`;
        const lc = branchCtx(nc, io, `l${id}.${i}`);
        if (l.t === "gated") {
          return { t: "gated", id: lid, name: nm(l.name, lc, lid), delay: l.delay };
        }
        if (l.t === "never") return { t: "never", id: lid, event: `never-${lid}` };
        return { t: "longSleep", id: lid, name: nm(l.name, lc, lid) };
      });
      return { t: "race", id, winner: normSeq(n.winner, w), losers };
    }
    case "try": {
      const raw = [...n.body];
      if (n.fail === "fatal") {
        raw.splice(Math.min(n.failAt, raw.length), 0, {
          t: "step",
          name: n.failName,
          delay: 1,
          spend: 3,
          mode: "fatal",
        });
      } else if (n.fail === "child") {
        raw.splice(Math.min(n.failAt, raw.length), 0, {
          t: "child",
          name: n.failName,
          body: [{ t: "step", name: 0, delay: 1, spend: 1, mode: "ok" }],
          fails: true,
        });
      }
      return { t: "try", id, body: normSeq(raw, nc), handler: normSeq(n.handler, nc) };
    }
    case "child": {
      // A child is its own run: its names restart, it gets no sent events. Its io orders
      // its own calls (containsIo does not look into children): with io of its own, every
      // name in it is unique too, or its first execution is refused as the parent's would be.
      const unique = nc.unique || containsIo(n.body);
      const cc: NormCtx = { ...nc, suffix: null, times: 1, loops: [], topRun: false, unique };
      const body = normSeq(n.body, cc);
      if (n.fails) {
        body.push({ t: "step", id: `${id}.f`, name: "fail", delay: 1, spend: 1, mode: "fatal" });
      }
      return { t: "child", id, name: nm(n.name, nc, id), body, uniqueNames: unique };
    }
  }
}

/** The program as the workflow code it stands for (for failure reports). */
export function printProgram(p: Program): string {
  const lines: string[] = [];
  if (p.events.length > 0) {
    lines.push(`// events sent before the run starts: ${p.events.map((e) => e.name).join(", ")}`);
  }
  printSeq(p.body, 0, lines);
  return lines.join("\n");
}

function printSeq(nodes: Node[], indent: number, lines: string[]): void {
  for (const n of nodes) printNode(n, indent, lines);
}

function printNode(n: Node, ind: number, lines: string[]): void {
  const p = "  ".repeat(ind);
  const L = (s: string) => lines.push(p + s);
  switch (n.t) {
    case "step": {
      const extra = n.mode === "broken" ? `broken#${n.broken}` : n.mode;
      L(`await ctx.step("${n.name}", body(${n.delay}ms, spend ${n.spend}, ${extra}))  // ${n.id}`);
      return;
    }
    case "effect":
      L(`await ctx.effect("${n.name}", {perform ${n.delay}+${n.after}ms, reconcile})  // ${n.id}`);
      return;
    case "sleep":
      L(`await ctx.sleep("${n.name}", ${n.ms})  // ${n.id}`);
      return;
    case "wait":
      L(
        `await ctx.waitForEvent("${n.event}"${n.timeoutMs === null ? "" : `, { timeout: ${n.timeoutMs} }`})  // ${n.sent ? "sent before" : "never sent"}`,
      );
      return;
    case "value":
      L(`const v = ctx.${n.kind}()  // ${n.id}`);
      return;
    case "io":
      L(
        `await ${n.kind === "timer" ? `setTimeout(${n.ms})` : "readFile(...)"}  // non-durable, ${n.id}`,
      );
      return;
    case "loop":
      L(`for (let i = 0; i < ${n.n}; i++) {  // ${n.id}`);
      printSeq(n.body, ind + 1, lines);
      L("}");
      return;
    case "par":
      L(`await Promise.all([  // ${n.id}`);
      for (const b of n.branches) {
        L("  (async () => {");
        printSeq(b, ind + 2, lines);
        L("  })(),");
      }
      L("])");
      return;
    case "race":
      L(`await Promise.race([  // ${n.id}`);
      L("  (async () => {  // the winner");
      printSeq(n.winner, ind + 2, lines);
      L("  })(),");
      for (const l of n.losers) {
        if (l.t === "gated")
          L(`  ctx.step("${l.name}", body waits until the winner delivered, then ${l.delay}ms),`);
        else if (l.t === "never") L(`  ctx.waitForEvent("${l.event}"),  // never sent`);
        else L(`  ctx.sleep("${l.name}", "20d"),`);
      }
      L("])");
      return;
    case "try":
      L(`try {  // ${n.id}`);
      printSeq(n.body, ind + 1, lines);
      L(n.catchAll ? "} catch {  // every error, dropped" : "} catch (e) {");
      printSeq(n.handler, ind + 1, lines);
      L("}");
      return;
    case "child":
      L(`await ctx.child("${n.name}", gen, async (ctx) => {  // ${n.id}`);
      printSeq(n.body, ind + 1, lines);
      L("})");
      return;
    case "nondet":
      L(`<non-deterministic call: ${n.how}>  // ${n.id}`);
      return;
  }
}

/** Counts of the features a program uses (for the summary). */
export function features(p: Program): Record<string, number> {
  const f: Record<string, number> = {};
  const add = (k: string) => {
    f[k] = (f[k] ?? 0) + 1;
  };
  const walk = (nodes: Node[]) => {
    for (const n of nodes) {
      add(n.t === "step" ? `step:${n.mode}` : n.t);
      if (n.t === "loop" || n.t === "child") walk(n.body);
      if (n.t === "par") for (const b of n.branches) walk(b);
      if (n.t === "race") walk(n.winner);
      if (n.t === "try") {
        walk(n.body);
        walk(n.handler);
      }
    }
  };
  walk(p.body);
  return f;
}
