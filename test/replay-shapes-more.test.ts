// More shapes the generative replay test does not make (its races have a fixed winner, its
// waits no pending payloads to read, it never forks, times a step out or throws hostile
// error parts), each on both backends: a crash mid-run then a replay on a new engine, or a
// fork, must hand the workflow what the first execution was handed, in the same order.
//   - close races in a loop (Promise.race and Promise.any of steps of their own or one
//     name, failing sides, a 0 ms sleep), the worker dying half-way;
//   - races of waits whose events are pending with big payloads (read lazily) against steps,
//     0 ms sleeps and a wait of a shared name;
//   - forks of parallel branches that reuse names, from a call of either branch or a race;
//   - error names, codes, stacks and messages with NUL and lone surrogates, from steps,
//     non-Errors thrown, a failing child;
//   - step timeouts, retried, and one raced against another step;
//   - a child's input and an approval's request changed right after the call;
//   - 30 events sent while the run runs, taken by a loop of waits, parallel waits, or waits
//     raced against steps, the worker dying after 12 hand-overs: none lost or taken twice;
//   - a Promise.all whose rejection is caught while its other branches still run (their
//     outcomes handed over late, a name reused after the catch): the generator makes no
//     failing call a par or race does not catch inside its branch.

import { describe, expect, it } from "vitest";
import {
  type AnyWorkflow,
  type EngineOptions,
  FatalError,
  type WorkflowContext,
  workflow,
} from "../src/index.js";
import { crashableEngine } from "./helpers/crash.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
const never = () => new Promise<never>(() => {});
const cut = "😀".slice(0, 1);
const low = "😀".slice(1);

interface Dying {
  /** In the first execution: the worker dies here and the execution never goes on. In
   *  every later one: goes on at once. */
  die(): Promise<void>;
  readonly firstRun: boolean;
}

/** Starts `wf` (created by an engine without a worker, after `before` sent its events) on
 *  an engine whose worker dies where the workflow calls `die()`, then replays it on a new
 *  engine once the lease has run out. Each execution logs into the array `note()` gives.
 *  Checks every execution saw a prefix of what the last one saw, and returns the output. */
async function dieThenReplay(
  h: Harness,
  build: (d: Dying, note: () => string[]) => AnyWorkflow[],
  opts: {
    advanceMs?: number;
    maxSteps?: number;
    before?: (send: SendEvent) => Promise<void>;
    /** Options of the dying engine and of the one that replays. */
    engine?: EngineOptions;
  } = {},
): Promise<unknown> {
  const logs: string[][] = [];
  let first: string[] | undefined;
  /** The log of the execution that died: records already durable may still be handed to it
   *  after the crash, so only `first`, what it had seen when it died, is compared. */
  let dyingLog: string[] | undefined;
  let kill = () => {};
  let firstRun = true;
  const d: Dying = {
    get firstRun() {
      return firstRun;
    },
    die() {
      if (!firstRun) return Promise.resolve();
      firstRun = false;
      dyingLog = logs.at(-1);
      first = [...(dyingLog ?? [])];
      kill();
      return never();
    },
  };
  const wfs = build(d, () => {
    const log: string[] = [];
    logs.push(log);
    return log;
  });
  const wf = wfs[0] as AnyWorkflow;
  const starter = h.engine(wfs, { worker: false });
  const run = await starter.start(wf as never, undefined);
  await opts.before?.((name, payload) => starter.sendEvent(run.id, name, payload));
  const dying = crashableEngine(h, wfs, opts.engine);
  kill = dying.crash;
  const step = opts.advanceMs ?? 20;
  await advanceUntil(
    h.clock,
    until(() => first !== undefined, "the worker dies"),
    step,
  );
  await h.clock.advance(60_000);
  const replay = h.engine(wfs, opts.engine);
  const out = await advanceUntil(
    h.clock,
    replay
      .handle(run.id)
      .result()
      .catch((err: Error) => `failed ${err.name}: ${err.message}`),
    step,
    opts.maxSteps ?? 1000,
  );
  const last = logs.at(-1) as string[];
  expect(first?.length).toBeGreaterThan(0);
  for (const log of [...logs.slice(0, -1).filter((l) => l !== dyingLog), first ?? []]) {
    expect(last.slice(0, log.length)).toEqual(log);
  }
  expect(out).toEqual(last);
  return out;
}

type SendEvent = (name: string, payload: unknown) => Promise<unknown>;

function described(err: unknown): string {
  const e = err as { name?: unknown; message?: unknown; code?: unknown; stack?: unknown };
  return JSON.stringify([e.name, e.message, e.code, String(e.stack).split("\n")[0]]);
}

describe.each(BACKENDS)("%s: close races, the worker dying half-way", (backend) => {
  const harness = useHarness(backend);

  for (const variant of ["race", "any", "one name", "0 ms sleep"] as const) {
    it(`16 close ${variant} races of steps in a loop`, async () => {
      let seed = 7;
      const jitter = () => {
        seed = (seed * 1103515245 + 12345) % 2147483648;
        return seed % 4;
      };
      await dieThenReplay(harness(), (d, note) => [
        workflow(
          { name: `shape-close-${variant}`.replace(/ /g, "-"), version: "1" },
          async (ctx) => {
            const log = note();
            for (let i = 0; i < 16; i++) {
              const a = ctx.step(variant === "one name" ? "x" : `a${i}`, () =>
                delay(jitter()).then(() => `a${i}`),
              );
              const b =
                variant === "0 ms sleep"
                  ? ctx.sleep(`s${i}`, 0).then(() => `s${i}`)
                  : ctx.step(variant === "one name" ? "x" : `b${i}`, () =>
                      delay(jitter()).then(() => {
                        if (i % 5 === 4) throw new FatalError(`b${i} failed`);
                        return `b${i}`;
                      }),
                    );
              b.catch(() => {});
              try {
                log.push(
                  `${i}:${variant === "any" ? await Promise.any([a, b]) : await Promise.race([a, b])}`,
                );
              } catch (err) {
                log.push(`${i}: ${(err as Error).message}`);
              }
              if (i === 8) await d.die();
            }
            log.push(await ctx.step("tail", () => "tail"));
            return log;
          },
        ),
      ]);
    });
  }
});

describe.each(BACKENDS)("%s: races of waits whose events are pending", (backend) => {
  const harness = useHarness(backend);

  it("waits with big pending payloads against steps, 0 ms sleeps and a shared wait", async () => {
    const out = (await dieThenReplay(
      harness(),
      (d, note) => [
        workflow({ name: "shape-pending-races", version: "1" }, async (ctx: WorkflowContext) => {
          const log = note();
          const taken = (r: { timedOut: boolean; payload?: unknown }, n: string) =>
            r.timedOut ? `${n} timed out` : `${n} ${String(r.payload).length}`;
          for (let i = 0; i < 10; i++) {
            log.push(
              await Promise.race([
                ctx.waitForEvent(`a${i}`, { timeout: "1h" }).then((r) => taken(r, `a${i}`)),
                ctx.waitForEvent(`b${i}`, { timeout: "1h" }).then((r) => taken(r, `b${i}`)),
                ctx.step(`s${i}`, () => delay(i % 3).then(() => `s${i}`)),
                ctx.sleep(`z${i}`, 0).then(() => `z${i}`),
                ctx.waitForEvent("shared", { timeout: "1h" }).then((r) => taken(r, "shared")),
              ]),
            );
            if (i === 5) await d.die();
          }
          const rest = await Promise.all(
            Array.from({ length: 4 }, () =>
              ctx
                .waitForEvent<string>("shared", { timeout: "2h" })
                .then((r) => (r.timedOut ? "-" : r.payload)),
            ),
          );
          log.push(rest.join(","));
          return log;
        }),
      ],
      {
        advanceMs: 60_000,
        maxSteps: 500,
        before: async (send) => {
          for (let i = 0; i < 10; i++) {
            if (i % 3 !== 2)
              await send(i % 2 ? `a${i}` : `b${i}`, "x".repeat(i % 2 ? 300_000 : 10));
            if (i % 4 === 0)
              await send(i % 2 ? `b${i}` : `a${i}`, "y".repeat(i % 2 ? 10 : 300_000));
            if (i % 2) await send("shared", `sh${i}`);
          }
        },
      },
    )) as string[];
    expect(out).toHaveLength(11);
  });
});

describe.each(BACKENDS)("%s: forks of parallel branches that reuse names", (backend) => {
  const harness = useHarness(backend);

  for (const from of ["x#3", "y#2", "race-b", "w"]) {
    it(`a fork from ${from} is handed what the source was handed before that call, in its order`, async () => {
      const h = harness();
      let generation = 0;
      const wf = workflow(
        { name: "shape-fork-branches", version: "1" },
        async (ctx: WorkflowContext) => {
          const log: string[] = [];
          const g = generation;
          const branch = async (b: string, n: number, ms: number) => {
            for (let i = 0; i < n; i++) {
              const v = await ctx.step(b, () =>
                delay((ms * (i + 1)) % 7).then(() => `${b}${i}g${g}`),
              );
              log.push(`${b}${i}=${v}`);
            }
          };
          await Promise.all([
            branch("x", 6, 3),
            branch("y", 4, 5),
            (async () => {
              const r = await Promise.race([
                ctx.step("race-a", () => delay(9).then(() => `ra g${g}`)),
                ctx.step("race-b", () => delay(2).then(() => `rb g${g}`)),
              ]);
              log.push(`race ${r}`);
              try {
                await ctx.step("f", () => {
                  throw new FatalError(`f g${g}`);
                });
              } catch (err) {
                log.push(`caught ${(err as Error).message}`);
              }
              const w = await ctx.waitForEvent<string>("w", { timeout: "1s" });
              log.push(`w ${w.timedOut ? "timed out" : w.payload}`);
            })(),
          ]);
          log.push(`random ${ctx.random().toFixed(6)}`);
          return log;
        },
      );
      const e = h.engine([wf]);
      const run = await e.start(wf, undefined);
      const out = (await advanceUntil(h.clock, run.result(), 100)) as string[];
      generation = 1;
      const fork = await e.fork(run.id, { fromStep: from });
      const forked = (await advanceUntil(h.clock, fork.result(), 100)) as string[];
      // Reused: everything the fork saw before the first value of its own (g1), in the
      // source's order; the call forked from is executed again.
      const own = forked.findIndex(
        (l) => l.includes("g1") || l.startsWith("w ") || l.startsWith("random"),
      );
      expect(own).toBeGreaterThan(-1);
      expect(forked.slice(0, own)).toEqual(out.slice(0, own));
      expect(forked).toHaveLength(out.length);
    });
  }
});

describe.each(BACKENDS)("%s: hostile error parts", (backend) => {
  const harness = useHarness(backend);

  it("names, codes, stacks and messages with NUL and lone surrogates are handed over the same on replay", async () => {
    const out = (await dieThenReplay(harness(), (d, note) => {
      const kid = workflow({ name: "shape-hostile-error-kid", version: "1" }, async () => {
        const e = new FatalError(`kid ${cut}\u0000`);
        e.name = `Kid${low}Error\u0000`;
        (e as { code?: string }).code = `K\u0000${cut}`;
        throw e;
      });
      const makers: Array<() => unknown> = [
        () => Object.assign(new FatalError("m"), { name: `N${cut}\u0000` }),
        () => Object.assign(new FatalError("c"), { code: `C${low}\u0000` }),
        () => Object.assign(new FatalError("s"), { stack: `S\u0000${cut}\n    at x` }),
        () => new FatalError(`message ${low}${cut}\u0000`),
        () => `thrown string ${cut}\u0000`,
        () => ({ toString: () => `object ${low}\u0000` }),
        () => Symbol(`symbol ${cut}`),
        () => 10n,
      ];
      return [
        workflow({ name: "shape-hostile-errors", version: "1" }, async (ctx: WorkflowContext) => {
          const log = note();
          for (const [i, make] of makers.entries()) {
            try {
              await ctx.step(
                `e${i}`,
                () => {
                  throw make();
                },
                { retry: { maxAttempts: 1 } },
              );
            } catch (err) {
              log.push(`e${i} ${described(err)}`);
            }
            if (i === 4) await d.die();
          }
          try {
            await ctx.child("kid", kid, undefined);
          } catch (err) {
            log.push(`kid ${described(err)}`);
          }
          return log;
        }),
        kid,
      ];
    })) as string[];
    expect(out).toHaveLength(9);
    expect(out[0]).toContain(JSON.stringify(`N${cut}\u0000`));
    expect(out[1]).toContain(JSON.stringify(`C${low}\u0000`));
    expect(out[2]).toContain(JSON.stringify(`S\u0000${cut}`));
    expect(out[4]).toContain(JSON.stringify(`thrown string ${cut}\u0000`));
    expect(out[8]).toContain(JSON.stringify(`K\u0000${cut}`));
  });
});

describe.each(BACKENDS)("%s: step timeouts", (backend) => {
  const harness = useHarness(backend);

  it("steps timed out, retried and raced replay their outcomes", async () => {
    const d = (err: unknown) => `${(err as Error).name}/${(err as { code?: string }).code}`;
    const out = await dieThenReplay(
      harness(),
      (dying, note) => [
        workflow({ name: "shape-timeouts", version: "1" }, async (ctx: WorkflowContext) => {
          const log = note();
          log.push(
            await ctx.step("slow", (s) => (s.attempt < 3 ? never() : "third"), {
              timeout: "1s",
              retry: { maxAttempts: 3, initialDelay: 10, jitter: false },
            }),
          );
          try {
            await ctx.step("hang", () => never(), {
              timeout: "2s",
              retry: { maxAttempts: 2, initialDelay: 10, jitter: false },
            });
          } catch (err) {
            log.push(`hang ${d(err)}`);
          }
          log.push(
            await Promise.race([
              ctx
                .step("t1", () => never(), { timeout: "500ms", retry: { maxAttempts: 1 } })
                .catch((err) => `t1 ${d(err)}`),
              ctx.step("t2", () => delay(5).then(() => "t2"), { timeout: "500ms" }),
            ]),
          );
          await dying.die();
          try {
            await ctx.step("after", () => never(), { timeout: "1s", retry: { maxAttempts: 2 } });
          } catch (err) {
            log.push(`after ${d(err)}`);
          }
          return log;
        }),
      ],
      // Each attempt its timeout gave up on is waited for `abortGraceMs` of REAL time (the
      // never() bodies do not stop) while the clock runs on at up to 100 ms per 2 ms: at the
      // default 1 s grace, the 5 such attempts cost ~50 s of virtual time on SQLite but
      // ~150 s on PostgreSQL (its store calls do not block the event loop, so the clock
      // runs faster), past the 100 s the dying execution is driven for. A small grace keeps
      // the virtual time the run needs independent of how fast the store answers.
      { advanceMs: 100, maxSteps: 2000, engine: { abortGraceMs: 10 } },
    );
    expect((out as string[]).slice(0, 3)).toEqual([
      "third",
      "hang StepTimeoutError/STEP_TIMEOUT",
      "t2",
    ]);
  });
});

describe.each(BACKENDS)("%s: inputs changed after the call", (backend) => {
  const harness = useHarness(backend);

  it("a child's input and an approval's request are taken as they were when the call was made", async () => {
    const h = harness();
    const seen: string[][] = [];
    const kid = workflow(
      { name: "shape-input-kid", version: "1" },
      async (ctx, v: { n: number }) => {
        await ctx.sleep("nap", 100);
        return v.n;
      },
    );
    const wf = workflow(
      { name: "shape-changed-inputs", version: "1" },
      async (ctx: WorkflowContext) => {
        const log: string[] = [];
        seen.push(log);
        const input = { n: 1 };
        const p = ctx.child("k", kid, input);
        input.n = 2;
        log.push(`kid ${await p}`);
        const later = { n: 10 };
        const p2 = ctx.child("k2", kid, later);
        await Promise.resolve();
        later.n = 20;
        log.push(`kid2 ${await p2}`);
        const request = { text: "a" };
        const asked = ctx.approval("ok", { request, timeout: "1s", onTimeout: "approve" });
        request.text = "b";
        log.push(`approved ${(await asked).approved}`);
        return log;
      },
    );
    const e = h.engine([wf, kid]);
    const run = await e.start(wf, undefined);
    const out = await advanceUntil(h.clock, run.result(), 50, 3000);
    expect(out).toEqual(["kid 1", "kid2 10", "approved true"]);
    expect(seen.length).toBeGreaterThan(1);
    for (const log of seen) expect(log).toEqual(out.slice(0, log.length));
    expect((await e.getRun(`${run.id}/k`))?.input).toEqual({ n: 1 });
  });
});

describe.each(BACKENDS)("%s: events sent while the run runs", (backend) => {
  const harness = useHarness(backend);
  for (const shape of ["loop", "parallel", "race-with-step"] as const) {
    it(`${shape}: 30 events sent during the run, crash after 12`, async () => {
      const h = harness();
      let firstRun = true;
      /** What the execution that died had seen when it died (later hand-overs of records
       *  already durable may still reach it). */
      let died: string[] | undefined;
      const logs: string[][] = [];
      let kill = () => {};
      const wf = workflow(
        { name: `shape-ticks-${shape}`, version: "1" },
        async (ctx: WorkflowContext) => {
          const log: string[] = [];
          logs.push(log);
          const take = async (i: number) => {
            const w = await ctx.waitForEvent<string>("tick", { timeout: "1h" });
            const v = w.timedOut ? "t" : w.payload;
            log.push(`${i}:${v}`);
            if (log.length >= 12 && firstRun) {
              firstRun = false;
              died = [...log];
              kill();
              await never();
            }
            return v;
          };
          if (shape === "loop") {
            for (let i = 0; i < 30; i++) {
              await take(i);
              if (i % 4 === 0) await ctx.step(`s${i}`, () => delay(1).then(() => i));
            }
          } else if (shape === "parallel") {
            await Promise.all(Array.from({ length: 30 }, (_, i) => take(i)));
          } else {
            for (let i = 0; i < 30; i++) {
              const r = await Promise.race([
                take(i),
                ctx.step(`r${i}`, () => delay(3).then(() => `step${i}`)),
              ]);
              log.push(`won ${r}`);
            }
            const rest = await Promise.all(Array.from({ length: 5 }, (_, i) => take(100 + i)));
            log.push(rest.join());
          }
          return log;
        },
      );
      const dying = crashableEngine(h, [wf]);
      kill = dying.crash;
      const run = await dying.engine.start(wf, undefined);
      const other = h.engine([], { worker: false });
      let sent = 0;
      const sending = (async () => {
        for (let i = 0; i < 30; i++) {
          await other.sendEvent(run.id, "tick", `e${i}`);
          sent++;
          await delay(i % 3);
        }
      })();
      await advanceUntil(
        h.clock,
        until(() => died !== undefined, "the worker dies", 40_000),
        20,
        100_000,
      );
      const first = died as string[];
      await sending;
      await h.clock.advance(60_000);
      const replay = h.engine([wf]);
      const out = await advanceUntil(
        h.clock,
        replay
          .handle(run.id)
          .result()
          .catch((e: Error) => `failed ${e.name}: ${e.message}`),
        60_000,
        500,
      );
      const last = logs.at(-1) as string[];
      expect(last.slice(0, first.length)).toEqual(first);
      expect(out).toEqual(last);
      // Every event taken once, and by the loop and the parallel waits in send order.
      const payloads = last.filter((l) => /^\d+:e\d+$/.test(l)).map((l) => l.split(":")[1]);
      expect(new Set(payloads).size).toBe(payloads.length);
      if (shape !== "race-with-step")
        expect(payloads).toEqual(Array.from({ length: 30 }, (_, i) => `e${i}`));
      expect(sent).toBe(30);
    });
  }
});

describe.each(BACKENDS)(
  "%s: a caught Promise.all rejection with its other branches still running",
  (backend) => {
    const harness = useHarness(backend);
    for (const dieAt of [1, 2, 3]) {
      it(`the worker dies at point ${dieAt}; the late outcomes replay in their order`, async () => {
        const h = harness();
        let firstRun = true;
        /** What the execution that died had seen when it died (later hand-overs of records
         *  already durable may still reach it). */
        let died: string[] | undefined;
        const logs: string[][] = [];
        let kill = () => {};
        const die = async (n: number) => {
          if (n !== dieAt || !firstRun) return;
          firstRun = false;
          died = [...(logs.at(-1) ?? [])];
          kill();
          await never();
        };
        const wf = workflow(
          { name: `shape-orphans-${dieAt}`, version: "1" },
          async (ctx: WorkflowContext) => {
            const log: string[] = [];
            logs.push(log);
            const slowSide: string[] = [];
            try {
              await Promise.all([
                ctx.step("f", () =>
                  delay(5).then(() => {
                    throw new FatalError("f broke");
                  }),
                ),
                ctx
                  .step("slow", () => delay(40).then(() => "slow1"))
                  .then((v) => {
                    slowSide.push(v);
                    log.push(`late ${v}`);
                    return v;
                  }),
                ctx
                  .step("x", () => delay(20).then(() => "x1"))
                  .then((v) => {
                    log.push(`late ${v}`);
                    return v;
                  }),
                (async () => {
                  await ctx.step("chain", () => delay(2).then(() => 1));
                  const v = await ctx.step("chain", () => delay(30).then(() => 2));
                  log.push(`chain ${v}`);
                })(),
              ]);
            } catch (err) {
              log.push(`caught ${(err as Error).message}`);
            }
            await die(1);
            log.push(`y ${await ctx.step("x", () => delay(10).then(() => "x2"))}`);
            await die(2);
            log.push(
              `race ${await Promise.race([
                ctx.step("slow", () => delay(1).then(() => "slow2")),
                ctx.sleep("z", 1000).then(() => "z"),
              ])}`,
            );
            await ctx.step("wait-for-tail", () => delay(60).then(() => 0));
            await die(3);
            log.push(`end ${slowSide.join()}`);
            return log;
          },
        );
        const dying = crashableEngine(h, [wf]);
        kill = dying.crash;
        const run = await dying.engine.start(wf, undefined);
        await advanceUntil(
          h.clock,
          until(() => died !== undefined, "the worker dies"),
          20,
        );
        const first = died as string[];
        await h.clock.advance(60_000);
        const replay = h.engine([wf]);
        const out = await advanceUntil(
          h.clock,
          replay
            .handle(run.id)
            .result()
            .catch((e: Error) => `failed ${e.name}: ${e.message}`),
          20,
        );
        const last = logs.at(-1) as string[];
        expect(last.slice(0, first.length)).toEqual(first);
        expect(out).toEqual(last);
        expect(last[0]).toBe("caught f broke");
        expect(last.at(-1)).toBe("end slow1");
      });
    }
  },
);
