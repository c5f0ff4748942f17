// Replay is exact under the shapes agents use: parallel branches that reuse step names,
// Promise.race against a deadline, I/O between calls, failures the workflow caught, child
// runs, a worker that stops while a run backs off, spend of aborted attempts, values drawn
// with ctx.uuid(), and close() in the middle of a run. Each case forces a replay (the run
// waits for an event, or its worker dies) and compares it with the first run, on both
// backends.

import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import {
  FatalError,
  NonDeterminismError,
  RunCanceledError,
  realClock,
  workflow,
} from "../src/index.js";
import { faultyStore, writesStep } from "../src/testing/index.js";
import { crashableEngine } from "./helpers/crash.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("parallel branches that reuse step names get their own results on replay", async () => {
    const h = harness();
    const bodies: string[] = [];
    const wf = workflow({ name: "fanout", version: "1" }, async (ctx) => {
      const items = [
        { id: "A", ms: 80 },
        { id: "B", ms: 5 },
      ];
      const summaries = await Promise.all(
        items.map(async (it) => {
          const page = await ctx.step("fetch", async () => {
            bodies.push(`fetch ${it.id}`);
            await delay(it.ms);
            return `page-${it.id}`;
          });
          return ctx.step("summarize", () => {
            bodies.push(`summarize ${page}`);
            return `summary of ${page}`;
          });
        }),
      );
      // Forces a replay: the run is released here and executed again from its journal.
      await ctx.waitForEvent("go");
      return summaries;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits");
    await e.sendEvent(run.id, "go");
    expect(await run.result()).toEqual(["summary of page-A", "summary of page-B"]);
    expect(bodies.sort()).toEqual(["fetch A", "fetch B", "summarize page-A", "summarize page-B"]);
  });

  it("Promise.race against a deadline takes the same winner on replay", async () => {
    const h = harness();
    let generated = 0;
    const wf = workflow({ name: "race", version: "1" }, async (ctx) => {
      const winner = await Promise.race([
        ctx.sleep("deadline", 100).then(() => "deadline"),
        ctx
          .step("generate", async () => {
            generated++;
            await delay(300);
            return "text";
          })
          .then(() => "generated"),
      ]);
      await ctx.waitForEvent("go");
      return winner;
    });
    const e = h.engine([wf], { clock: realClock });
    const run = await e.start(wf, undefined);
    // Both records exist by the time the replay starts.
    await until(async () => {
      const steps = await e.getSteps(run.id);
      const done = steps.filter((s) => s.status === "completed").length;
      return done === 2 && (await e.getRun(run.id))?.status === "waiting";
    }, "the race is recorded and the run waits");
    await e.sendEvent(run.id, "go");
    expect(await run.result()).toBe("deadline");
    expect(generated).toBe(1);
  });

  it("a branch that awaits I/O between calls is not mistaken for divergence", async () => {
    const h = harness();
    const ran: string[] = [];
    let slowStarted = 0;
    const wf = workflow({ name: "io", version: "1" }, async (ctx) => {
      const [one, two] = await Promise.all([
        (async () => {
          await ctx.step("a", () => ran.push("a"));
          const prompt = await readFile(new URL(import.meta.url), "utf8");
          return ctx.step("b", () => {
            ran.push("b");
            return prompt.length > 0;
          });
        })(),
        (async () => {
          await ctx.step("c", () => ran.push("c"));
          return ctx.step("d", async () => {
            ran.push("d");
            slowStarted++;
            if (slowStarted === 1) await new Promise(() => {}); // the first worker dies here
            return "d";
          });
        })(),
      ]);
      return { one, two };
    });
    const first = crashableEngine(h, [wf]);
    const run = await first.engine.start(wf, undefined);
    await until(async () => {
      const keys = (await first.engine.getSteps(run.id))
        .filter((s) => s.status === "completed")
        .map((s) => s.key);
      return keys.includes("b") && keys.includes("c") && slowStarted === 1;
    }, "a, b and c are recorded while d runs");
    first.crash();
    await h.clock.advance(60_000);
    const second = h.engine([wf]);
    expect(await advanceUntil(h.clock, second.handle(run.id).result(), 30_000)).toEqual({
      one: true,
      two: "d",
    });
    expect(ran.filter((r) => r !== "d")).toEqual(["a", "c", "b"]);
  });

  it("a call after Promise.all of a step and a timer of the workflow's own replays in whichever cascade it comes", async () => {
    // Generative finding (ip-sqlite:415/326): the first run finds the timer done before the
    // step's outcome and calls "after" inside that outcome's cascade; a replay hands the
    // recorded outcome over at once, before the timer fires, so the call comes later.
    const h = harness();
    const ran: string[] = [];
    const wf = workflow({ name: "joined", version: "1" }, async (ctx) => {
      await Promise.all([
        ctx.step("slow", async () => {
          ran.push("slow");
          await delay(30);
          return 1;
        }),
        delay(0),
      ]);
      const after = await ctx.step("after", () => {
        ran.push("after");
        return "after";
      });
      await ctx.waitForEvent("go");
      await Promise.all([ctx.step("quick", () => ran.push("quick")), delay(40)]);
      return after;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits");
    await e.sendEvent(run.id, "go");
    expect(await run.result()).toBe("after");
    expect(ran).toEqual(["slow", "after", "quick"]);
  });

  it("a failure the workflow caught is replayed, not executed again, after resume", async () => {
    const h = harness();
    let notified = 0;
    let xRuns = 0;
    let broken = true;
    const wf = workflow({ name: "caught", version: "1" }, async (ctx) => {
      let note = "sent";
      try {
        await ctx.step("notify", () => {
          notified++;
          throw new FatalError("mail server refused");
        });
      } catch (e) {
        note = `not sent: ${(e as Error).message}`;
      }
      await ctx.step("x", () => ++xRuns);
      const y = await ctx.step("y", () => {
        if (broken) throw new FatalError("y is broken");
        return "y";
      });
      return { note, y };
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await expect(run.result()).rejects.toThrow("y is broken");
    broken = false;
    await e.resume(run.id);
    expect(await run.result()).toEqual({ note: "not sent: mail server refused", y: "y" });
    expect(notified).toBe(1);
    expect(xRuns).toBe(1);
  });

  it("a parent failed by its child continues with the child's outcome once both are resumed", async () => {
    const h = harness();
    let childOk = false;
    const kid = workflow({ name: "kid", version: "1" }, async (ctx) =>
      ctx.step("work", () => {
        if (!childOk) throw new FatalError("kid failed");
        return 7;
      }),
    );
    const parent = workflow({ name: "parent", version: "1" }, async (ctx) => {
      const n = await ctx.child("kid", kid, undefined);
      return n * 6;
    });
    const e = h.engine([parent, kid]);
    const run = await e.start(parent, undefined, { id: "par" });
    await expect(run.result()).rejects.toThrow("kid failed");
    childOk = true;
    const [child] = await e.listRuns({ parentId: "par" });
    expect(child?.status).toBe("failed");
    await e.resume(child!.id);
    expect(await e.handle(child!.id).result()).toBe(7);
    await e.resume(run.id);
    expect(await run.result()).toBe(42);
  });

  it("fork after a caught failure replays it on unchanged code; fork from the failed step", async () => {
    const h = harness();
    let calls = 0;
    let broken = true;
    const wf = workflow({ name: "forky", version: "1" }, async (ctx) => {
      let caught = "";
      try {
        await ctx.step("first", (s) => {
          calls++;
          s.spend({ usd: 0.5 });
          throw new FatalError("first failed");
        });
      } catch (e) {
        caught = (e as Error).message;
      }
      await ctx.step("middle", () => "m");
      const last = await ctx.step("last", () => {
        if (broken) throw new FatalError("last failed");
        return "done";
      });
      return { caught, last };
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    await expect(run.result()).rejects.toThrow("last failed");
    broken = false;
    const fork = await e.fork(run.id, { fromStep: "last" });
    expect(await fork.result()).toEqual({ caught: "first failed", last: "done" });
    expect(calls).toBe(1);
    expect((await fork.info())?.budget.spent).toEqual({ usd: 0.5 });

    // The step that failed the run is a valid fromStep, even when it is the first one.
    const failsFirst = workflow({ name: "first-fails", version: "1" }, async (ctx) =>
      ctx.step("only", () => {
        if (broken) throw new FatalError("nope");
        return "fixed";
      }),
    );
    const e2 = h.engine([failsFirst]);
    broken = true;
    const r2 = await e2.start(failsFirst, undefined);
    await expect(r2.result()).rejects.toThrow("nope");
    broken = false;
    const f2 = await e2.fork(r2.id, { fromStep: "only" });
    expect(await f2.result()).toBe("fixed");
  });

  it("a worker closed during an in-process backoff leaves no phantom crash attempt", async () => {
    const h = harness();
    let attempts = 0;
    const wf = workflow({ name: "backoff", version: "1" }, async (ctx) =>
      ctx.step(
        "flaky",
        () => {
          attempts++;
          if (attempts === 1) throw new Error("transient");
          return "ok";
        },
        { retry: { maxAttempts: 2, initialDelay: "2s", jitter: false } },
      ),
    );
    const e1 = h.engine([wf]);
    const run = await e1.start(wf, undefined);
    await until(async () => (await e1.getSteps(run.id))[0]?.status === "retrying", "it backs off");
    await e1.close();
    const e2 = h.engine([wf]);
    expect(await advanceUntil(h.clock, e2.handle(run.id).result(), 500)).toBe("ok");
    const [step] = await e2.getSteps(run.id);
    // Two real attempts; no WORKER_LOST in between.
    expect(step?.attempts.map((a) => a.error?.message ?? "ok")).toEqual(["transient", "ok"]);
  });

  it("records the spend of a timed-out attempt, of a canceled attempt, and refuses a late s.spend", async () => {
    const h = harness();
    const logged: string[] = [];
    let captured: { spend(a: Record<string, number>): void } | undefined;
    const timedOut = workflow({ name: "slowpoke", version: "1" }, async (ctx) => {
      try {
        await ctx.step(
          "call",
          async (s) => {
            await new Promise<void>((resolve) =>
              s.signal.addEventListener("abort", () => resolve()),
            );
            s.spend({ usd: 1 }); // the provider billed the aborted request
            throw new Error("aborted");
          },
          { timeout: 50, retry: { maxAttempts: 1 } },
        );
      } catch {}
      await ctx.step("late", (s) => {
        captured = s;
        return 1;
      });
      return "ok";
    });
    const e = h.engine([timedOut], { log: (m) => logged.push(m) });
    const run = await e.start(timedOut, undefined);
    expect(await advanceUntil(h.clock, run.result(), 100)).toBe("ok");
    expect((await e.getRun(run.id))?.budget.spent).toEqual({ usd: 1 });
    expect(() => captured?.spend({ usd: 2 })).toThrow(/after attempt 1 had ended/);
    expect(logged.some((m) => /after attempt 1 had ended/.test(m))).toBe(true);
    expect((await e.getRun(run.id))?.budget.spent).toEqual({ usd: 1 });

    let working = false;
    const canceled = workflow({ name: "cancel-me", version: "1" }, async (ctx) => {
      await ctx.step("work", async (s) => {
        s.spend({ tokens: 500 });
        working = true;
        await new Promise<void>((resolve) => s.signal.addEventListener("abort", () => resolve()));
        s.spend({ tokens: 20 });
        throw s.signal.reason;
      });
      return "never";
    });
    const e2 = h.engine([canceled]);
    const r2 = await e2.start(canceled, undefined);
    await until(() => working, "the step body runs");
    await e2.cancel(r2.id);
    await expect(r2.result()).rejects.toBeInstanceOf(RunCanceledError);
    expect((await e2.getRun(r2.id))?.budget.spent).toEqual({ tokens: 520 });
    const [work] = await e2.getSteps(r2.id);
    expect(work?.attempts).toHaveLength(1);
    expect(work?.attempts[0]?.error?.code).toBe("RUN_CANCELED");
  });

  it("a ctx.uuid() is durable before the next step's body runs", async () => {
    const h = harness();
    const reader = h.store();
    await reader.open({ clock: h.clock });
    const seen: Array<{ id: string; stored: string | undefined }> = [];
    const wf = workflow({ name: "uuid", version: "1" }, async (ctx) => {
      const id = ctx.uuid();
      await ctx.step("use", async () => {
        const j = await reader.loadJournal(ctx.runId);
        const rec = j.steps.find((s) => s.key === "@uuid");
        seen.push({ id, stored: rec?.result ?? undefined });
      });
      return id;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    const id = await run.result();
    expect(seen).toHaveLength(1);
    expect(seen[0]?.stored).toBe(JSON.stringify([id]));
    await reader.close();
  });

  it("close() starts no new step; the step in flight finishes and the run is handed back", async () => {
    const h = harness();
    const bodies: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const wf = workflow({ name: "closing", version: "1" }, async (ctx) => {
      await ctx.step("one", async () => {
        bodies.push("one");
        await gate;
      });
      await ctx.step("two", () => bodies.push("two"));
      await ctx.step("three", () => bodies.push("three"));
      return bodies.length;
    });
    const e1 = h.engine([wf], { closeGraceMs: 10_000 });
    const run = await e1.start(wf, undefined);
    await until(() => bodies.length === 1, "step one runs");
    const closed = e1.close();
    await delay(30);
    release();
    await closed;
    expect(bodies).toEqual(["one"]);
    const info = await h.engine([], { worker: false }).getRun(run.id);
    expect(info?.status).toBe("pending");
    const e2 = h.engine([wf]);
    expect(await e2.handle(run.id).result()).toBe(3);
    expect(bodies).toEqual(["one", "two", "three"]);
    const attempts = (await e2.getSteps(run.id)).flatMap((s) => s.attempts);
    expect(attempts.filter((a) => a.error?.code === "WORKER_LOST")).toEqual([]);
  });

  it("close() past its grace lets queued records land before the worker's runs are claimable", async () => {
    const h = harness();
    let bodies = 0;
    let openGate!: () => void;
    const gate = new Promise<void>((r) => {
      openGate = r;
    });
    const wf = workflow({ name: "slow-commit", version: "1" }, async (ctx) => {
      await ctx.step("one", () => ++bodies);
      await ctx.waitForEvent("never", { timeout: "1h" });
      return bodies;
    });
    // The record of step "one" is stuck in a slow commit when the grace period ends.
    const store = faultyStore(h.store(), {
      beforeAppend: async (writes) => {
        if (writesStep(writes, "one")) await gate;
      },
    });
    const e1 = h.engine([wf], { store, closeGraceMs: 50 });
    const run = await e1.start(wf, undefined);
    await until(() => bodies === 1, "step one ran");
    // Another worker is live all along, ready to take over whatever becomes claimable.
    const e2 = h.engine([wf]);
    const closed = e1.close();
    await delay(300);
    openGate();
    await closed;
    await until(async () => (await e2.getRun(run.id))?.status === "waiting", "it waits");
    expect(bodies).toBe(1);
    const [one] = await e2.getSteps(run.id);
    expect(one?.status).toBe("completed");
  });

  it("an event stored by another store instance reaches a wait blocked in process", async () => {
    const h = harness();
    const wf = workflow({ name: "xproc", version: "1" }, async (ctx) => {
      const [answer] = await Promise.all([
        ctx.waitForEvent<string>("answer", { timeout: "3s" }),
        ctx.step("busy", () => delay(1500)),
      ]);
      return answer;
    });
    const e = h.engine([wf], { clock: realClock });
    const run = await e.start(wf, undefined);
    await until(async () => (await e.getSteps(run.id)).some((s) => s.key === "answer"), "waits");
    // Another process: its own store instance (no in-process hint reaches the worker).
    const other = h.store();
    await other.open({ clock: realClock });
    await other.sendEvent({ runId: run.id, name: "answer", payload: JSON.stringify(["yes"]) });
    await other.close();
    expect(await run.result()).toEqual({ timedOut: false, payload: "yes" });
  });

  it("a run does not suspend while a branch is busy with a timer or file read of its own", async () => {
    const h = harness();
    const wf = workflow({ name: "busy-branch", version: "1" }, async (ctx) => {
      const cancel = ctx.waitForEvent("cancel");
      const work = (async () => {
        await new Promise((r) => setTimeout(r, 300));
        const text = await readFile(new URL(import.meta.url), "utf8");
        return ctx.step("work", () => text.length > 0);
      })();
      return Promise.race([cancel.then(() => "canceled"), work]);
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    // Nothing but the event wait would be left if the run suspended mid-way: it would wait
    // for "cancel" forever.
    expect(await run.result()).toBe(true);
  });

  it("refuses a name reused by concurrent branches in an order only timing decides", async () => {
    const h = harness();
    const wf = workflow({ name: "ambiguous", version: "1" }, async (ctx) =>
      Promise.all(
        ["x", "y"].map(async (it) => {
          await delay(it === "x" ? 5 : 20);
          return ctx.step("summarize", () => it);
        }),
      ),
    );
    const e = h.engine([wf]);
    const err = await (await e.start(wf, undefined)).result().catch((x: unknown) => x);
    expect(err).toBeInstanceOf(NonDeterminismError);
    expect((err as Error).message).toMatch(
      /calls step "summarize" again, and cairn cannot tell that this call always comes after/,
    );
    expect((err as Error).message).toMatch(/summarize:\$\{item\.id\}/);

    // The same shape with per-item names, or with the I/O inside the step, is fine.
    const named = workflow({ name: "named", version: "1" }, async (ctx) =>
      Promise.all(
        ["x", "y"].map(async (it) => {
          await delay(it === "x" ? 5 : 20);
          return ctx.step(`summarize:${it}`, () => it);
        }),
      ),
    );
    const e2 = h.engine([named]);
    expect(await (await e2.start(named, undefined)).result()).toEqual(["x", "y"]);
  });

  it("refuses a ctx call made inside a step body", async () => {
    const h = harness();
    const wf = workflow({ name: "nested", version: "1" }, async (ctx) =>
      ctx.step("outer", () => ctx.step("inner", () => 1)),
    );
    const e = h.engine([wf]);
    const err = await (await e.start(wf, undefined)).result().catch((x: unknown) => x);
    expect((err as Error).message).toMatch(/called inside the body of step "outer"/);
  });
});

describe("budgets and parallel attempts", () => {
  const harness = useHarness("sqlite");

  it("estimates are reserved while attempts run: parallel calls cannot all pass the check", async () => {
    const h = harness();
    const make = (estimate: boolean, spendEach: number) =>
      workflow({ name: `parallel-${estimate}-${spendEach}`, version: "1" }, async (ctx) =>
        Promise.all(
          [1, 2, 3].map((i) =>
            ctx.step(
              `call:${i}`,
              async (s) => {
                await delay(20);
                s.spend({ tokens: spendEach });
                return i;
              },
              estimate ? { estimate: { tokens: 200 } } : {},
            ),
          ),
        ),
      );
    const e = h.engine([make(false, 300), make(true, 300), make(true, 150)]);
    const paused = async (wf: ReturnType<typeof make>) => {
      const run = await e.start(wf, undefined, { budget: { tokens: 500 } });
      await until(async () => {
        const s = (await e.getRun(run.id))?.status;
        return s === "paused" || s === "completed";
      }, "the run pauses or completes");
      return (await e.getRun(run.id))!;
    };
    // Without estimates, all three pass the check before any has spent: 900 of 500.
    const blind = await paused(make(false, 300));
    expect(blind.budget.spent).toEqual({ tokens: 900 });
    // With them, the third waits for the first two, then finds the budget spent: 600.
    const reserved = await paused(make(true, 300));
    expect(reserved.status).toBe("paused");
    expect(reserved.budget.spent).toEqual({ tokens: 600 });
    expect(reserved.reason).toBe("budget: tokens 600 of 500 spent");
    // When the first two spend less than estimated, the third fits and runs.
    const fits = await paused(make(true, 150));
    expect(fits.status).toBe("completed");
    expect(fits.budget.spent).toEqual({ tokens: 450 });
  });
});
