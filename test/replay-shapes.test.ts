// Shapes the generative replay test (test/replay-generative.test.ts) does not make, each run
// on both backends with its worker crashed mid-run (or restarted at a wait) and the run
// replayed on a new engine: what every execution of the workflow saw must be the same, and
// the run's output what the first execution would have returned.
//   - a branch that catches a child's failure, then races that child against a wait;
//   - Promise.all of 20 steps of one name, and Promise.allSettled of failing and
//     succeeding steps;
//   - step results holding NUL, a cut emoji (lone surrogate) and 1 MiB strings;
//   - sleeps past setTimeout's 2^31-1 ms in races;
//   - steps throwing what is not an Error (a string, null, undefined, an object with a
//     getter);
//   - a workflow that awaits already-resolved promises between its calls.

import { describe, expect, it } from "vitest";
import { type AnyWorkflow, FatalError, type WorkflowContext, workflow } from "../src/index.js";
import { crashableEngine } from "./helpers/crash.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
const never = () => new Promise<never>(() => {});

interface Crash {
  /** True until the first execution's worker has died. */
  firstRun: boolean;
  /** In the first execution: the worker dies here (its store answers nothing more) and
   *  the execution never goes on. In a replay: goes on at once. */
  die(): Promise<void>;
}

/** Runs `build`'s first workflow on an engine whose worker dies where the workflow calls
 *  `c.crash()`; once the lease has run out a new engine replays the run to its end. The
 *  workflow notes what it sees in the log `note` gives it, one log per execution. Returns
 *  the logs (the first one as it was at the crash) and the run's output. */
async function crashMidRun(
  h: Harness,
  build: (c: Crash, note: () => string[]) => AnyWorkflow[],
  opts: {
    advanceMs?: number;
    /** Sent before the first execution starts. */
    events?: Array<[string, unknown]>;
    /** Sent once the replaying engine is up. */
    replayEvents?: Array<[string, unknown]>;
  } = {},
): Promise<Executions> {
  const logs: string[][] = [];
  let first: string[] | undefined;
  let dyingAt = 0;
  let kill = () => {};
  const c: Crash = {
    firstRun: true,
    die() {
      if (!c.firstRun) return Promise.resolve();
      first = [...(logs.at(-1) ?? [])];
      dyingAt = logs.length;
      c.firstRun = false;
      kill();
      return never();
    },
  };
  const note = () => {
    const log: string[] = [];
    logs.push(log);
    return log;
  };
  const wfs = build(c, note);
  const wf = wfs[0] as AnyWorkflow;
  const dying = crashableEngine(h, wfs);
  kill = dying.crash;
  const run = await dying.engine.start(wf as never, undefined);
  for (const [name, payload] of opts.events ?? []) {
    await dying.engine.sendEvent(run.id, name, payload);
  }
  await advanceUntil(
    h.clock,
    until(() => first !== undefined, "the first execution reaches its crash"),
    opts.advanceMs ?? 20,
  );
  await h.clock.advance(60_000);
  const replay = h.engine(wfs);
  for (const [name, payload] of opts.replayEvents ?? []) {
    await replay.sendEvent(run.id, name, payload);
  }
  const out = await advanceUntil(
    h.clock,
    replay.handle(run.id).result(),
    opts.advanceMs ?? 20,
    3000,
  );
  // Executions before the one that died suspended and were resumed on the same worker.
  return {
    first: first ?? [],
    before: logs.slice(0, dyingAt - 1),
    replays: logs.slice(dyingAt),
    out,
  };
}

interface Executions {
  /** What the execution that died saw, up to its death. */
  first: string[];
  /** The executions before it (each suspended, and was resumed by the same worker). */
  before: string[][];
  /** The executions after the crash. */
  replays: string[][];
  out: unknown;
}

/** Every execution saw what the last one saw, as far as it got; the one that died saw
 *  something. */
function expectSameAsFirst(r: Executions): void {
  expect(r.first.length).toBeGreaterThan(0);
  expect(r.replays.length).toBeGreaterThan(0);
  const last = r.replays.at(-1) as string[];
  for (const log of [...r.before, r.first, ...r.replays]) {
    expect(last.slice(0, log.length)).toEqual(log);
  }
}

describe.each(BACKENDS)("%s: replay shapes the generator does not make", (backend) => {
  const harness = useHarness(backend);

  it("a branch catches a child's failure, then races another failing child against a wait", async () => {
    const h = harness();
    const r = await crashMidRun(
      h,
      (c, note) => {
        const kid = workflow(
          { name: "shape-failing-kid", version: "1" },
          async (ctx, n: number) => {
            await ctx.step("k", () => delay(n * 3).then(() => n));
            throw new FatalError(`kid ${n} broke`);
          },
        );
        const wf = workflow(
          { name: "shape-kid-race", version: "1" },
          async (ctx: WorkflowContext) => {
            const log = note();
            const [a, b] = await Promise.all([
              (async () => {
                let first: string;
                try {
                  first = String(await ctx.child("c1", kid, 1));
                } catch (err) {
                  first = `caught ${(err as Error).name}: ${(err as Error).message}`;
                }
                log.push(first);
                const raced = await Promise.race([
                  ctx.child("c2", kid, 2).then(
                    (v) => `c2 ${v}`,
                    (err: Error) => `c2 failed: ${err.message}`,
                  ),
                  ctx
                    .waitForEvent<string>("ev", { timeout: "1h" })
                    .then((w) => (w.timedOut ? "ev timed out" : `ev ${w.payload}`)),
                ]);
                log.push(raced);
                return raced;
              })(),
              ctx.step("other", () => delay(5).then(() => "other")),
            ]);
            log.push(`all ${a} ${b}`);
            await ctx.step("after", () => "after");
            await c.die();
            const w = await ctx.waitForEvent<string>("late", { timeout: "2h" });
            log.push(w.timedOut ? "late timed out" : `late ${w.payload}`);
            return log;
          },
        );
        return [wf, kid];
      },
      { replayEvents: [["late", "L"]] },
    );
    expectSameAsFirst(r);
    expect(r.out).toEqual(r.replays.at(-1));
    expect((r.out as string[])[0]).toBe("caught FatalError: kid 1 broke");
  });
});

/** A value as a log line: JSON with NUL and lone surrogates escaped (JSON.stringify does
 *  both), and long strings by length and a checksum. */
function show(v: unknown): string {
  return JSON.stringify(v, (_k, x) => {
    if (typeof x === "string" && x.length > 200) {
      let sum = 0;
      for (let i = 0; i < x.length; i++) sum = (sum * 31 + x.charCodeAt(i)) | 0;
      return `<${x.length} units, sum ${sum}, ends ${JSON.stringify(x.slice(-3))}>`;
    }
    if (x instanceof Map) return { map: [...x] };
    if (typeof x === "bigint") return `${x}n`;
    if (x === undefined) return "<undefined>";
    return x;
  });
}

function describeThrown(err: unknown): string {
  if (err instanceof Error) {
    const own = Object.getOwnPropertyNames(err)
      .filter((k) => k !== "stack")
      .sort()
      .map((k) => `${k}=${show((err as unknown as Record<string, unknown>)[k])}`);
    return `${err.constructor.name}/${err.name}: ${show(err.message)} {${own.join(",")}}`;
  }
  return `${typeof err} ${show(err)}`;
}

describe.each(BACKENDS)("%s: more replay shapes", (backend) => {
  const harness = useHarness(backend);

  it("Promise.all of 20 steps of one name, the worker dying after half are delivered", async () => {
    const h = harness();
    const r = await crashMidRun(h, (c, note) => [
      workflow({ name: "shape-twenty", version: "1" }, async (ctx: WorkflowContext) => {
        const log = note();
        const all = await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            ctx
              .step("same", () => delay((i * 7) % 13).then(() => `v${i}`))
              .then((v) => {
                log.push(`${i}=${v}`);
                if (log.length === 10) void c.die();
                return v;
              }),
          ),
        );
        log.push(all.join(","));
        return log;
      }),
    ]);
    expectSameAsFirst(r);
    const out = r.out as string[];
    expect(out.at(-1)).toBe(Array.from({ length: 20 }, (_, i) => `v${i}`).join(","));
    for (const line of out.slice(0, 20)) {
      const [i, v] = line.split("=");
      expect(v).toBe(`v${i}`);
    }
  });

  it("Promise.allSettled of failing and succeeding steps of one name", async () => {
    const h = harness();
    const r = await crashMidRun(h, (c, note) => [
      workflow({ name: "shape-settled", version: "1" }, async (ctx: WorkflowContext) => {
        const log = note();
        const settled = await Promise.allSettled(
          Array.from({ length: 8 }, (_, i) =>
            ctx.step(
              "mixed",
              async () => {
                await delay((i * 5) % 7);
                if (i % 3 === 0) throw new FatalError(`no ${i}`);
                if (i % 3 === 1) throw new Error(`transient ${i}`);
                return i;
              },
              { retry: { maxAttempts: 2, initialDelay: 1, jitter: false } },
            ),
          ),
        );
        for (const s of settled) {
          log.push(s.status === "fulfilled" ? `ok ${s.value}` : describeThrown(s.reason));
        }
        await c.die();
        const again = await Promise.allSettled([
          ctx.step("mixed", () => "late"),
          ctx.step("mixed", () => {
            throw new FatalError("late no");
          }),
        ]);
        for (const s of again) {
          log.push(s.status === "fulfilled" ? `ok ${s.value}` : describeThrown(s.reason));
        }
        return log;
      }),
    ]);
    expectSameAsFirst(r);
    expect(r.out).toEqual(r.replays.at(-1));
    expect((r.out as string[]).length).toBe(10);
  });

  it("step results and errors holding NUL, a cut emoji and 1 MiB strings", async () => {
    const h = harness();
    const cut = "😀".slice(0, 1);
    const low = "😀".slice(1);
    const mib = "é".repeat(1 << 19) + cut;
    const r = await crashMidRun(
      h,
      (c, note) => {
        const kid = workflow(
          { name: "shape-hostile-kid", version: "1" },
          async (_ctx, s: string) => {
            return { back: s, nul: `\u0000${s}` };
          },
        );
        return [
          workflow({ name: "shape-hostile", version: "1" }, async (ctx: WorkflowContext) => {
            const log = note();
            const values: unknown[] = [
              "a\u0000b",
              cut,
              low,
              `${low}${cut}`,
              mib,
              { [`k\u0000${cut}`]: [cut, "\u0000"] },
              new Map([[cut, new Set([low, "\u0000"])]]),
              [`\\u0000`, "\\ud83d", `\\${cut}`],
            ];
            for (const [i, v] of values.entries()) {
              log.push(show(await ctx.step(`v${i}`, () => v)));
            }
            try {
              await ctx.step("err", () => {
                throw new FatalError(`bad \u0000 ${cut} end`);
              });
            } catch (err) {
              log.push(describeThrown(err));
            }
            try {
              await ctx.step("err-props", () => {
                throw Object.assign(new FatalError("props"), { detail: `d\u0000${low}` });
              });
            } catch (err) {
              log.push(describeThrown(err));
            }
            log.push(show(await ctx.child("kid", kid, `${cut}\u0000`)));
            const ev = await ctx.waitForEvent<string>("ev", { timeout: "1h" });
            log.push(show(ev));
            await c.die();
            log.push(show(await ctx.step("after", () => `${cut}after\u0000`)));
            return log;
          }),
          kid,
        ];
      },
      { events: [["ev", `e\u0000${cut}`]] },
    );
    expectSameAsFirst(r);
    const out = r.out as string[];
    expect(out[0]).toBe(JSON.stringify("a\u0000b"));
    expect(out[1]).toBe(JSON.stringify(cut));
    expect(out[8]).toContain(JSON.stringify(`bad \u0000 ${cut} end`));
    // A step's error is recorded as its name, code, message and stack (docs/API.md): the
    // property is dropped, on the first execution as on the replay.
    expect(out[9]).toMatch(/^FatalError\/FatalError: "props"/);
    expect(out.at(-1)).toBe(JSON.stringify(`${cut}after\u0000`));
  });

  it("sleeps past 2^31-1 ms raced against steps and waits", async () => {
    const h = harness();
    const r = await crashMidRun(
      h,
      (c, note) => [
        workflow({ name: "shape-long-sleeps", version: "1" }, async (ctx: WorkflowContext) => {
          const log = note();
          log.push(
            await Promise.race([
              ctx.sleep("long1", "30d").then(() => "long1"),
              ctx.step("quick", () => delay(20).then(() => "quick")),
            ]),
          );
          log.push(
            await Promise.race([
              ctx.sleep("long2", 2 ** 31 + 5).then(() => "long2"),
              ctx.waitForEvent("go").then(() => "go"),
            ]),
          );
          await c.die();
          log.push(
            await Promise.race([
              ctx.sleep("long3", 2 ** 32).then(() => "long3"),
              ctx.waitForEvent("never", { timeout: "60d" }).then(() => "never"),
            ]),
          );
          return log;
        }),
      ],
      { events: [["go", 1]], advanceMs: 5 * 60 * 60 * 1000 },
    );
    expectSameAsFirst(r);
    expect(r.out).toEqual(["quick", "go", "long3"]);
  });

  it("steps throwing what is not an Error", async () => {
    const h = harness();
    let reads = 0;
    const thrown: Array<() => unknown> = [
      () => "a string",
      () => null,
      () => undefined,
      () => 42,
      () => ({ code: "E1", nested: { list: [1, "two"] } }),
      () => ({
        get lazy() {
          reads++;
          return `read ${reads}`;
        },
      }),
      () => [new FatalError("in an array")],
      () => Object.create(null),
    ];
    const r = await crashMidRun(h, (c, note) => [
      workflow({ name: "shape-non-errors", version: "1" }, async (ctx: WorkflowContext) => {
        const log = note();
        for (const [i, make] of thrown.entries()) {
          try {
            await ctx.step(
              `t${i}`,
              () => {
                throw make();
              },
              { retry: { maxAttempts: 1 } },
            );
            log.push(`t${i} ok`);
          } catch (err) {
            log.push(`t${i} ${describeThrown(err)}`);
          }
          if (i === 4) await c.die();
        }
        return log;
      }),
    ]);
    expectSameAsFirst(r);
    expect(r.out).toEqual(r.replays.at(-1));
    expect((r.out as string[]).length).toBe(thrown.length);
  });

  it("a workflow awaiting resolved promises between its calls, in parallel branches", async () => {
    const h = harness();
    const r = await crashMidRun(h, (c, note) => [
      workflow({ name: "shape-resolved", version: "1" }, async (ctx: WorkflowContext) => {
        const log = note();
        const branch = async (b: string) => {
          const got: string[] = [];
          for (let i = 0; i < 3; i++) {
            await Promise.resolve();
            await null;
            // biome-ignore lint/suspicious/noThenProperty: a thenable is the point here
            await { then: (ok: (v: unknown) => void) => ok(1) };
            got.push(
              await ctx.step(`s-${b}`, () => delay(b === "a" ? 3 : 1).then(() => `${b}${i}`)),
            );
            await Promise.all([]);
            got.push(String(ctx.random(`r-${b}-${i}`) < 2));
            await new Promise<void>((ok) => queueMicrotask(ok));
          }
          log.push(`${b}: ${got.join(" ")}`);
          return got;
        };
        await Promise.all([branch("a"), branch("b")]);
        await Promise.resolve();
        await c.die();
        await Promise.resolve();
        log.push(await ctx.step("end", () => "end"));
        return log;
      }),
    ]);
    expectSameAsFirst(r);
    expect(r.out).toEqual(r.replays.at(-1));
  });
});

describe.each(BACKENDS)(
  "%s: values the workflow changes, and waits sharing an event",
  (backend) => {
    const harness = useHarness(backend);

    it("a workflow that changes what a call handed it sees the recorded value again on every replay", async () => {
      const h = harness();
      const seen: string[][] = [];
      const kid = workflow(
        { name: "shape-mut-kid", version: "1" },
        async (_ctx, v: { n: number }) => {
          v.n += 100;
          return v;
        },
      );
      const wf = workflow({ name: "shape-mutate", version: "1" }, async (ctx: WorkflowContext) => {
        const log: string[] = [];
        seen.push(log);
        const a = await ctx.step("a", () => ({ n: 1, list: [1] }));
        a.n++;
        a.list.push(2);
        log.push(JSON.stringify(a));
        const input = { n: 5 };
        const k = await ctx.child("k", kid, input);
        input.n = -1;
        k.n++;
        log.push(JSON.stringify(k));
        const ev = await ctx.waitForEvent<{ n: number }>("ev");
        if (!ev.timedOut) {
          ev.payload.n++;
          log.push(JSON.stringify(ev.payload));
        }
        const again = await ctx.step("b", () => a);
        log.push(JSON.stringify(again));
        await ctx.waitForEvent("go");
        return log;
      });
      const e = h.engine([wf, kid]);
      const run = await e.start(wf, undefined);
      await e.sendEvent(run.id, "ev", { n: 10 });
      await until(async () => {
        const r = await e.getRun(run.id);
        return r?.status === "waiting" && r.waitingFor?.includes("go");
      }, "waits for go");
      await e.sendEvent(run.id, "go");
      const out = await run.result();
      const expected = ['{"n":2,"list":[1,2]}', '{"n":106}', '{"n":11}', '{"n":2,"list":[1,2]}'];
      expect(out).toEqual(expected);
      for (const log of seen) expect(log).toEqual(expected.slice(0, log.length));
    });

    it("two parallel waits for one event name take the events in the same order on replay", async () => {
      const h = harness();
      const r = await crashMidRun(
        h,
        (c, note) => [
          workflow({ name: "shape-shared-event", version: "1" }, async (ctx: WorkflowContext) => {
            const log = note();
            const got = await Promise.all(
              ["x", "y", "z"].map(async (b) => {
                const w = await ctx.waitForEvent<string>("ev", { timeout: "1h" });
                const v = w.timedOut ? "timeout" : w.payload;
                log.push(`${b}<-${v}`);
                return v;
              }),
            );
            log.push(got.join(","));
            await c.die();
            const last = await ctx.waitForEvent<string>("ev", { timeout: "2h" });
            log.push(last.timedOut ? "last timeout" : `last ${last.payload}`);
            return log;
          }),
        ],
        {
          events: [
            ["ev", "e1"],
            ["ev", "e2"],
          ],
          replayEvents: [
            ["ev", "e3"],
            ["ev", "e4"],
          ],
          advanceMs: 60_000,
        },
      );
      expectSameAsFirst(r);
      expect(r.out).toEqual(r.replays.at(-1));
    });
  },
);

describe("a sleep past 2^31-1 ms on the real clock", () => {
  const harness = useHarness("sqlite");

  it("loses a race to a 50 ms step (setTimeout would fire it after 1 ms)", async () => {
    const h = harness();
    const wf = workflow(
      { name: "shape-real-long-sleep", version: "1" },
      async (ctx: WorkflowContext) => {
        const a = await Promise.race([
          ctx.sleep("long", "30d").then(() => "long"),
          ctx.step("quick", () => delay(50).then(() => "quick")),
        ]);
        const b = await Promise.race([
          ctx.sleep("long2", 2 ** 31).then(() => "long2"),
          ctx.step("quick2", () => delay(50).then(() => "quick2")),
        ]);
        return [a, b];
      },
    );
    const { createEngine } = await import("../src/index.js");
    const e = createEngine({ store: h.store(), workflows: [wf], pollIntervalMs: 10 });
    try {
      const run = await e.start(wf, undefined);
      expect(await run.result()).toEqual(["quick", "quick2"]);
    } finally {
      await e.close();
    }
  });
});

describe.each(BACKENDS)("%s: children in races and parallel branches", (backend) => {
  const harness = useHarness(backend);

  it("a race between a child and a step, won by either, and same-named children ending out of order", async () => {
    const h = harness();
    const r = await crashMidRun(
      h,
      (c, note) => {
        const kid = workflow({ name: "shape-race-kid", version: "1" }, async (ctx, n: number) => {
          await ctx.sleep("nap", n * 1000);
          if (n === 3) throw new FatalError(`kid ${n} failed`);
          return `kid${n}`;
        });
        const wf = workflow(
          { name: "shape-child-race", version: "1" },
          async (ctx: WorkflowContext) => {
            const log = note();
            log.push(
              await Promise.race([
                ctx.child("k", kid, 5),
                ctx.step("fast", () => delay(10).then(() => "fast")),
              ]),
            );
            log.push(
              await Promise.race([
                ctx.child("k", kid, 1),
                ctx.waitForEvent("never", { timeout: "1h" }).then(() => "wait"),
              ]),
            );
            const all = await Promise.allSettled([
              ctx.child("m", kid, 4),
              ctx.child("m", kid, 2),
              ctx.child("m", kid, 3),
              ctx.child("m", kid, 1),
            ]);
            log.push(
              all
                .map((s) => (s.status === "fulfilled" ? s.value : (s.reason as Error).message))
                .join(),
            );
            await c.die();
            log.push(
              await Promise.race([
                ctx.child("k", kid, 2),
                ctx.step("fast", () => delay(10).then(() => "fast2")),
              ]),
            );
            return log;
          },
        );
        return [wf, kid];
      },
      { advanceMs: 500 },
    );
    expectSameAsFirst(r);
    expect(r.out).toEqual(r.replays.at(-1));
    expect(r.out).toEqual(["fast", "kid1", "kid4,kid2,kid 3 failed,kid1", "fast2"]);
  });
});
