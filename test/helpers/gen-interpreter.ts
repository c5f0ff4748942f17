// The one workflow that runs every generated program (test/helpers/gen-program.ts): the
// program is the run's input, so a worker process interprets exactly what the test built.
//
// Values. Every branch carries a value V = { h, t }: `h` hashes everything deterministic the
// branch received so far (results, caught errors, race winners, wait payloads), `t` lists
// the raw tokens of ctx.now()/random()/uuid() it received ("uuid:<instance>:<value>"). A
// step's or effect's result is a function of its instance (call site + loop iterations) and
// its input V, so a result delivered to the wrong branch changes the output; the output is
// the top-level V. Tokens are kept raw (never hashed) so the test can compare runs whose
// random values differ: it renames each instance's distinct raw values to #0, #1, ... and a
// run in which one call site saw two different values no longer matches the reference.
//
// The ledger (test/helpers/gen-ledger.ts) gets every step-body execution with the input it
// saw, every perform/reconcile, and every value a workflow execution received from an
// asynchronous ctx call, in order ("observations"), so the test can compare each replay with
// the first execution of the same run.

import { readFile } from "node:fs/promises";
import { MockLanguageModelV4 } from "ai/test";
import { createAi } from "../../src/ai/index.js";
import { type AnyWorkflow, FatalError, type WorkflowContext, workflow } from "../../src/index.js";
import { callIsLate } from "../../src/lib/call-late.js";
import { captureScope, reenterScope } from "../../src/workflow/call-scope.js";
import { textAnswer } from "./ai-mock.js";
import type { Incarnation, LedgerView } from "./gen-ledger.js";
import type { Loser, Node } from "./gen-program.js";

export interface V {
  h: string;
  t: string[];
}

export interface RunInput {
  body: Node[];
  v: V;
  /** The top-level run (broken steps read its fixes). */
  root: string;
  /** Names carry the loop iteration too; values get a label (Program.uniqueNames). */
  uniqueNames?: boolean;
}

export interface InterpreterEnv {
  ledger: LedgerView;
  inc: Incarnation;
}

export const WORKFLOW_NAME = "gen";

/** Retries: fail-once steps retry at once; kills add crashed attempts, so allow plenty. */
const RETRY = { retry: { maxAttempts: 30, initialDelay: 1, maxDelay: 4, factor: 2 } };
/** A race loser's sleep that never ends within a run. Below 2^31 ms: the real clock hands it
 *  to setTimeout, which fires at once for longer delays (Node clamps delays past 2^31-1 ms to 1 ms). */
const LONG_SLEEP_MS = 20 * 24 * 3_600_000;

/** FNV-1a, 32 bits, as 8 hex digits. */
export function hash(...parts: unknown[]): string {
  const s = parts.map((p) => (typeof p === "string" ? p : JSON.stringify(p))).join("\u0001");
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0).toString(16).padStart(8, "0");
}

function union(...lists: string[][]): string[] {
  const out: string[] = [];
  const seen = new Set<string>();
  for (const l of lists) {
    for (const x of l) {
      if (!seen.has(x)) {
        seen.add(x);
        out.push(x);
      }
    }
  }
  return out;
}

function never<T>(): Promise<T> {
  return new Promise<T>(() => {});
}

function realDelay(ms: number): Promise<void> {
  return ms <= 0 ? new Promise((r) => setImmediate(r)) : new Promise((r) => setTimeout(r, ms));
}

/** Internal signals and non-determinism must never be swallowed by generated try/catch. */
function mustRethrow(err: unknown): boolean {
  if (err && typeof err === "object") {
    if (Symbol.for("cairn.halted") in err) return true;
    const code = (err as { code?: unknown }).code;
    if (code === "NON_DETERMINISM") return true;
    if ((err as { name?: unknown }).name === "HaltedSignal") return true;
  }
  return false;
}

let executions = 0;

/** The durable model calls of prompt-inc: a kit without a store, a model that answers "ok". */
const ai = createAi();
const echoModel = new MockLanguageModelV4({ doGenerate: async () => textAnswer("ok") });

interface Tail {
  v: V;
  scope: unknown;
}

/** The call scope an error was thrown in, for the generated catch block. */
const failedIn = new WeakMap<object, unknown>();

/** The interpreter workflow for one worker incarnation. */
export function interpreterWorkflow(env: InterpreterEnv): AnyWorkflow {
  return interpreterWorkflows(env)[0]!;
}

/** The interpreter workflow, and the same interpreter under another name (the workflow a
 *  child-wf-inc call starts instead on odd incarnations): a worker registers both. */
export function interpreterWorkflows(env: InterpreterEnv): [AnyWorkflow, AnyWorkflow] {
  const make = (name: string): AnyWorkflow => {
    const wf: AnyWorkflow = workflow(
      { name, version: "1", retry: RETRY.retry },
      (ctx: WorkflowContext, input: RunInput) => new Execution(ctx, input, env, wf, other).run(),
    );
    return wf;
  };
  const other = make(`${WORKFLOW_NAME}-other`);
  return [make(WORKFLOW_NAME), other];
}

class Execution {
  private readonly exec: string;
  private n = 0;

  constructor(
    private readonly ctx: WorkflowContext,
    private readonly input: RunInput,
    private readonly env: InterpreterEnv,
    private readonly self: AnyWorkflow,
    private readonly other: AnyWorkflow,
  ) {
    this.exec = `${env.inc.no}.${process.pid}.${++executions}`;
  }

  async run(): Promise<V> {
    return (await this.seq(this.input.body, this.input.v, [])).v;
  }

  private get led(): LedgerView {
    return this.env.ledger;
  }

  /** After an in-process crash the incarnation is dead: its code stops here. */
  private async alive(): Promise<void> {
    if (this.env.inc.dead) await never();
  }

  private observe(instance: string, value: string): void {
    this.led.observe({
      run: this.ctx.runId,
      exec: this.exec,
      n: this.n++,
      instance,
      value,
      late: callIsLate(this.ctx) ? 1 : 0,
    });
  }

  /**
   * Runs a block of the program. Blocks are nested async functions here, inline code in the
   * printed program: after each awaited block the flow re-enters the call scope the block
   * ended in (as the inline code's own `await` would), so cairn sees the printed program's
   * causal order of calls (src/workflow/call-scope.ts), not the interpreter's.
   */
  private async seq(nodes: Node[], v: V, iters: number[]): Promise<Tail> {
    let cur = v;
    for (const n of nodes) {
      let t: Tail;
      try {
        t = await this.node(n, cur, iters);
      } catch (err) {
        // A catch block continues in the scope of the await that threw.
        if (err && typeof err === "object" && !failedIn.has(err)) failedIn.set(err, captureScope());
        throw err;
      }
      reenterScope(t.scope);
      cur = t.v;
    }
    return this.tail(cur);
  }

  /** A block's value and the call scope its flow ended in. */
  private tail(v: V): Tail {
    return { v, scope: captureScope() };
  }

  private async node(n: Node, v: V, iters: number[]): Promise<Tail> {
    const ctx = this.ctx;
    const run = ctx.runId;
    const inst = iters.length === 0 ? n.id : `${n.id}@${iters.join(".")}`;
    const name = (base: string) =>
      this.input.uniqueNames && iters.length > 0 ? `${base}@${iters.join(".")}` : base;
    switch (n.t) {
      case "step": {
        const input = JSON.stringify(v);
        const res = await ctx.step(
          name(n.name),
          async (s) => {
            const row = {
              run,
              idem: s.idempotencyKey,
              instance: inst,
              mode: n.mode,
              attempt: s.attempt,
              input,
            };
            this.led.exec({ ...row, phase: "start" });
            await realDelay(n.delay);
            if (this.env.inc.dead) await never();
            if (n.spend > 0) s.spend({ tokens: n.spend });
            let fail: Error | undefined;
            if (n.mode === "failOnce" && this.led.startsOf(s.idempotencyKey) <= 1) {
              fail = new Error(`transient failure of ${inst}`);
            } else if (n.mode === "fatal") {
              fail = new FatalError(`fatal ${inst}`);
            } else if (n.mode === "broken" && this.led.fixes(this.input.root) <= (n.broken ?? 0)) {
              fail = new FatalError(`broken ${inst}`);
            }
            this.led.exec({ ...row, phase: fail ? "fail" : "ok" });
            if (fail) throw fail;
            return { h: hash("step", inst, v.h), t: v.t } satisfies V;
          },
          RETRY,
        );
        await this.alive();
        this.observe(inst, JSON.stringify(res));
        return this.tail({ h: hash(v.h, inst, res.h), t: union(v.t, res.t) });
      }
      case "effect": {
        const input = JSON.stringify(v);
        const value: V = { h: hash("effect", inst, v.h), t: v.t };
        const res = await ctx.effect<V>(
          name(n.name),
          {
            perform: async (key) => {
              await realDelay(n.delay);
              if (this.env.inc.dead) await never();
              this.led.perform({ run, idem: key, instance: inst, input }, JSON.stringify(value));
              await realDelay(n.after);
              return value;
            },
            reconcile: async (key) => {
              if (this.env.inc.dead) await never();
              const found = this.led.reconcile({ run, idem: key, instance: inst, input });
              return found === undefined ? undefined : (JSON.parse(found) as V);
            },
          },
          RETRY,
        );
        await this.alive();
        this.observe(inst, JSON.stringify(res));
        return this.tail({ h: hash(v.h, inst, res.h), t: union(v.t, res.t) });
      }
      case "sleep": {
        await ctx.sleep(name(n.name), n.ms);
        await this.alive();
        this.observe(inst, "slept");
        return this.tail({ h: hash(v.h, inst, "slept"), t: v.t });
      }
      case "wait": {
        // Unique names: each iteration waits for an event of its own (gen-program.ts).
        const r = await ctx.waitForEvent<string>(
          name(n.event),
          n.timeoutMs === null ? undefined : { timeout: n.timeoutMs },
        );
        await this.alive();
        const got = r.timedOut ? "timed out" : `payload ${String(r.payload)}`;
        this.observe(inst, got);
        return this.tail({ h: hash(v.h, inst, got), t: v.t });
      }
      case "value": {
        const label = this.input.uniqueNames ? inst : undefined;
        const raw =
          n.kind === "now"
            ? ctx.now(label)
            : n.kind === "random"
              ? ctx.random(label)
              : ctx.uuid(label);
        return this.tail({ h: hash(v.h, inst, n.kind), t: [...v.t, `${n.kind}:${inst}:${raw}`] });
      }
      case "io": {
        if (n.kind === "timer") await realDelay(n.ms);
        else await readFile(new URL(import.meta.url));
        await this.alive();
        return this.tail({ h: hash(v.h, inst, "io"), t: v.t });
      }
      case "loop": {
        let cur = v;
        for (let i = 0; i < n.n; i++) {
          const t = await this.seq(n.body, cur, [...iters, i]);
          reenterScope(t.scope);
          cur = t.v;
        }
        return this.tail(cur);
      }
      case "par": {
        const ts = await Promise.all(n.branches.map((b) => this.seq(b, v, iters)));
        const vs = ts.map((t) => t.v);
        return this.tail({
          h: hash(v.h, inst, ...vs.map((x) => x.h)),
          t: union(v.t, ...vs.map((x) => x.t)),
        });
      }
      case "race": {
        const mark = `won:${inst}`;
        const contestants: Array<Promise<{ i: number; v: V }>> = [
          this.seq(n.winner, v, iters).then((w) => {
            this.led.mark(run, mark);
            return { i: 0, v: w.v };
          }),
          ...n.losers.map((l, j) =>
            this.loser(l, v, iters, mark).then((x) => ({ i: j + 1, v: x })),
          ),
        ];
        const won = await Promise.race(contestants);
        await this.alive();
        this.observe(inst, `race won by ${won.i}`);
        return this.tail({ h: hash(v.h, inst, won.i, won.v.h), t: union(v.t, won.v.t) });
      }
      case "try": {
        let cur: V;
        try {
          const t = await this.seq(n.body, v, iters);
          reenterScope(t.scope);
          cur = t.v;
        } catch (err) {
          if (mustRethrow(err) && !n.catchAll) throw err;
          reenterScope(failedIn.get(err as object));
          await this.alive();
          const e = err as { code?: string; name?: string; message?: string };
          const what = `caught ${e.code ?? e.name}: ${e.message}`;
          this.observe(inst, what);
          const t = await this.seq(n.handler, { h: hash(v.h, inst, what), t: v.t }, iters);
          reenterScope(t.scope);
          cur = t.v;
        }
        return this.tail(cur);
      }
      case "child": {
        const input: RunInput = {
          body: n.body,
          v: { h: hash(v.h, inst, "child input"), t: v.t },
          root: this.input.root,
          uniqueNames: n.uniqueNames,
        };
        const out = await ctx.child<RunInput, V>(name(n.name), this.self, input);
        await this.alive();
        this.observe(inst, JSON.stringify(out));
        return this.tail({ h: hash(v.h, inst, out.h), t: union(v.t, out.t) });
      }
      case "nondet":
        return this.tail(await this.nondet(n, v, inst, name));
    }
  }

  private async loser(l: Loser, v: V, iters: number[], mark: string): Promise<V> {
    const ctx = this.ctx;
    const run = ctx.runId;
    const inst = iters.length === 0 ? l.id : `${l.id}@${iters.join(".")}`;
    const name = (base: string) =>
      this.input.uniqueNames && iters.length > 0 ? `${base}@${iters.join(".")}` : base;
    let got: string;
    if (l.t === "gated") {
      const input = JSON.stringify(v);
      const res = await ctx.step(
        name(l.name),
        async (s) => {
          const row = {
            run,
            idem: s.idempotencyKey,
            instance: inst,
            mode: "gated",
            attempt: s.attempt,
            input,
          };
          this.led.exec({ ...row, phase: "start" });
          // The first run's winner is fixed: this body cannot finish before it delivered.
          while (!this.led.hasMark(run, mark)) {
            if (this.env.inc.dead) await never();
            await realDelay(2);
          }
          await realDelay(l.delay);
          if (this.env.inc.dead) await never();
          this.led.exec({ ...row, phase: "ok" });
          return { h: hash("gated", inst, v.h), t: v.t } satisfies V;
        },
        RETRY,
      );
      got = JSON.stringify(res);
    } else if (l.t === "never") {
      const r = await ctx.waitForEvent(name(l.event));
      got = JSON.stringify(r);
    } else {
      await ctx.sleep(name(l.name), LONG_SLEEP_MS);
      got = "slept 20 days";
    }
    await this.alive();
    this.observe(inst, got);
    return { h: hash(v.h, inst, got), t: v.t };
  }

  /** Deliberately non-deterministic code: differs between worker incarnations (or always). */
  private async nondet(
    n: Extract<Node, { t: "nondet" }>,
    v: V,
    inst: string,
    name: (base: string) => string,
  ): Promise<V> {
    const ctx = this.ctx;
    const body = () => `nd ${inst}`;
    const even = this.env.inc.no % 2 === 0;
    switch (n.how) {
      case "name-inc":
        await ctx.step(name(`nd-${this.env.inc.no}`), body);
        break;
      case "name-random":
        await ctx.step(name(`nd-${Math.random().toString(36).slice(2, 10)}`), body);
        break;
      case "name-date":
        await ctx.step(name(`nd-${Date.now()}`), body);
        break;
      case "kind-inc":
        if (even) await ctx.step(name("nd-kind"), body);
        else await ctx.sleep(name("nd-kind"), 1);
        break;
      case "skip-inc":
        if (even) await ctx.step(name("nd-skip"), body);
        break;
      case "input-inc":
      case "child-wf-inc": {
        // A child whose input (or workflow) the code picks from something outside the journal.
        const byInput = n.how === "input-inc";
        const input: RunInput = {
          body: [{ t: "step", id: `${n.id}.c`, name: "fetch", delay: 0, spend: 1, mode: "ok" }],
          v: { h: hash("nd input", byInput ? this.env.inc.no : 0), t: [] },
          root: this.input.root,
        };
        const wf = byInput || even ? this.self : this.other;
        await ctx.child<RunInput, V>(name("nd-child"), wf, input);
        break;
      }
      case "swap-inc": {
        // The crash comes after "nd-swap-b" (the test crashes after the first "nd-" record),
        // when both are recorded.
        const a = () => ctx.step(name("swap-a"), body);
        const b = () => ctx.step(name("nd-swap-b"), body);
        if (even) {
          await a();
          await b();
        } else {
          await b();
          await a();
        }
        break;
      }
      case "twin-skip-inc":
        // The crash comes after "nd-after", when both twins are recorded: crashed between
        // them, the journal holds one "twin", and a replay that makes one matches it (cairn
        // does not compare step bodies).
        if (even) await ctx.step(name("twin"), () => `first ${inst}`);
        await ctx.step(name("twin"), () => `second ${inst}`);
        await ctx.step(name("nd-after"), body);
        break;
      case "effect-kind-inc":
        // The effect first: a crash once it has begun leaves its intent for the step to meet.
        if (even) await ctx.effect(name("nd-fx"), { perform: body, reconcile: () => undefined });
        else await ctx.step(name("nd-fx"), body);
        break;
      case "loser-skip-inc":
      case "loser-name-inc": {
        // A race's loser: recorded after the winner was handed over (its body is slower), while
        // the run goes on. Odd incarnations leave it out, or give it another name.
        const winner = ctx.step(name("race-w"), () => `w ${inst}`);
        const loserName = n.how === "loser-name-inc" ? `nd-loser-${this.env.inc.no}` : "nd-loser";
        const slow = async () => {
          await realDelay(3);
          return `l ${inst}`;
        };
        const losers = even || n.how === "loser-name-inc" ? [ctx.step(name(loserName), slow)] : [];
        await Promise.race([winner, ...losers]);
        // Outlasts the loser: a run that ends first aborts it unrecorded.
        await ctx.step(name("race-after"), async () => {
          await realDelay(12);
          return "after";
        });
        break;
      }
      case "wait-kind-inc":
        if (even) await ctx.waitForEvent(name("nd-ev"), { timeout: 5 });
        else await ctx.sleep(name("nd-ev"), 5);
        break;
      case "value-kind-inc": {
        const label = `ndv:${inst}`;
        if (even) ctx.now(label);
        else ctx.random(label);
        await ctx.step(name("nd-after"), body);
        break;
      }
      case "prompt-inc": {
        const model = ai.model(ctx, echoModel, { name: name("nd-model") });
        const text = `prompt of worker ${this.env.inc.no}`;
        try {
          await model.doGenerate({ prompt: [{ role: "user", content: [{ type: "text", text }] }] });
        } catch {
          // An agent that drops the SDK's errors: cairn fails the run through the engine.
        }
        break;
      }
      case "value-move-inc":
      case "value-skip-inc": {
        // Unlabelled where the naming rule allows it: its key (`@now#k`) counts the calls.
        const label = this.input.uniqueNames ? `ndv:${inst}` : undefined;
        const after = () => ctx.step(name("nd-after"), body);
        if (even) {
          ctx.now(label);
          await after();
        } else {
          await after();
          if (n.how === "value-move-inc") ctx.now(label);
        }
        break;
      }
    }
    await this.alive();
    return { h: hash(v.h, inst, "nondet"), t: v.t };
  }
}
