// Failures under control: retries with backoff and recorded attempts, rate limits,
// budgets as a durable ledger, cancellation, step timeouts, resume of failed runs, fork.

import { describe, expect, it } from "vitest";
import {
  createEngine,
  FatalError,
  RateLimitError,
  RunCanceledError,
  RunConflictError,
  StepTimeoutError,
  workflow,
} from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  describe("retries and rate limits", () => {
    it("rate limit on step 7 of 12: waits >= retryAfter between attempts, other steps run once", async () => {
      for (const restartDuringBackoff of [false, true]) {
        const h = harness();
        const calls = new Map<number, number>();
        const wf = workflow({ name: "rl", version: "1" }, async (ctx) => {
          for (let k = 1; k <= 12; k++) {
            await ctx.step(`step-${k}`, () => {
              const n = (calls.get(k) ?? 0) + 1;
              calls.set(k, n);
              if (k === 7 && n <= 2)
                throw new RateLimitError("429 from provider", { retryAfter: "30s" });
              return k;
            });
          }
          return "ok";
        });
        let engine = h.engine([wf]);
        const run = await engine.start(wf, undefined);
        await until(async () => (await engine.getRun(run.id))?.status === "waiting", "backoff 1");
        if (restartDuringBackoff) {
          await engine.close();
          engine = h.engine([wf]);
        }
        const info = await engine.getRun(run.id);
        expect(info?.wakeAt?.getTime()).toBeGreaterThanOrEqual(h.clock.now() + 30_000 - 1000);
        const out = await advanceUntil(h.clock, engine.handle(run.id).result(), 5_000);
        expect(out).toBe("ok");
        for (let k = 1; k <= 12; k++) expect(calls.get(k)).toBe(k === 7 ? 3 : 1);
        const steps = await engine.getSteps(run.id);
        const s7 = steps.find((s) => s.key === "step-7")!;
        expect(s7.attempts.map((a) => a.error?.code ?? "ok")).toEqual([
          "RATE_LIMIT",
          "RATE_LIMIT",
          "ok",
        ]);
        for (let i = 1; i < 3; i++) {
          const gap = s7.attempts[i]!.startedAt.getTime() - s7.attempts[i - 1]!.endedAt!.getTime();
          expect(gap).toBeGreaterThanOrEqual(30_000);
        }
        expect(steps.filter((s) => s.key !== "step-7").every((s) => s.attempts.length === 1)).toBe(
          true,
        );
      }
    });

    it("records every failed attempt with its error; FatalError fails at once", async () => {
      const h = harness();
      let n = 0;
      const wf = workflow({ name: "retry", version: "1" }, async (ctx) => {
        const v = await ctx.step(
          "flaky",
          () => {
            n++;
            if (n < 3) throw new TypeError(`boom ${n}`);
            return n;
          },
          { retry: { maxAttempts: 3, initialDelay: "100ms", jitter: false } },
        );
        await ctx.step("fatal", () => {
          throw new FatalError("bad request, do not retry");
        });
        return v;
      });
      const engine = h.engine([wf]);
      const run = await engine.start(wf, undefined);
      const err = await advanceUntil(
        h.clock,
        run.result().catch((e: unknown) => e),
        100,
      );
      expect(err).toBeInstanceOf(FatalError);
      const [flaky, fatal] = await engine.getSteps(run.id);
      expect(flaky?.attempts.map((a) => a.error?.message ?? "ok")).toEqual([
        "boom 1",
        "boom 2",
        "ok",
      ]);
      expect(flaky?.attempts[0]?.error?.name).toBe("TypeError");
      expect(flaky?.attempts[0]?.error?.stack).toContain("boom 1");
      expect(fatal?.attempts.length).toBe(1);
      expect(fatal?.status).toBe("failed");
      const info = await engine.getRun(run.id);
      expect(info?.status).toBe("failed");
      expect(info?.error?.code).toBe("FATAL");
    });

    it("a step whose attempts keep failing fails the run; resume gives it fresh attempts after a fix", async () => {
      const h = harness();
      const ran: string[] = [];
      const broken = workflow({ name: "fixme", version: "1" }, async (ctx) => {
        await ctx.step("a", () => ran.push("a"));
        await ctx.step(
          "b",
          () => {
            ran.push("b");
            throw new Error("bug");
          },
          { retry: { maxAttempts: 2, initialDelay: 1 } },
        );
        return "unreachable";
      });
      let engine = h.engine([broken]);
      const run = await engine.start(broken, undefined);
      await expect(advanceUntil(h.clock, run.result(), 10)).rejects.toThrow("bug");
      await engine.close();
      const fixed = workflow({ name: "fixme", version: "1" }, async (ctx) => {
        await ctx.step("a", () => ran.push("a"));
        await ctx.step("b", () => ran.push("b-fixed"), {
          retry: { maxAttempts: 2, initialDelay: 1 },
        });
        return "fixed";
      });
      engine = h.engine([fixed]);
      await expect(engine.resume(run.id, {})).resolves.toBeDefined();
      expect(await engine.handle(run.id).result()).toBe("fixed");
      expect(ran).toEqual(["a", "b", "b", "b-fixed"]);
      const b = (await engine.getSteps(run.id)).find((s) => s.key === "b")!;
      expect(b.status).toBe("completed");
      expect(b.attempts.length).toBe(3);
      await expect(engine.resume(run.id)).rejects.toBeInstanceOf(RunConflictError);
    });
  });

  describe("budgets", () => {
    it("pauses before the step that would start over budget, counts failed spend, resumes with a raised limit", async () => {
      const h = harness();
      const ran: string[] = [];
      let failOnce = true;
      const wf = workflow({ name: "budget", version: "1" }, async (ctx) => {
        for (let k = 1; k <= 4; k++) {
          await ctx.step(
            `call-${k}`,
            (s) => {
              ran.push(`call-${k}#${s.attempt}`);
              if (k === 2 && failOnce) {
                failOnce = false;
                s.spend({ usd: 0.3, tokens: 300 });
                throw new Error("model timeout after spending");
              }
              s.spend({ usd: 0.4, tokens: 400 });
              return k;
            },
            { retry: { initialDelay: 1, jitter: false } },
          );
        }
        return ctx.budget;
      });
      const engine = h.engine([wf]);
      const run = await engine.start(wf, undefined, { budget: { usd: 1 } });
      const paused = await advanceUntil(
        h.clock,
        until(async () => {
          const r = await engine.getRun(run.id);
          return r?.status === "paused" ? r : undefined;
        }, "paused on budget"),
        10,
      );
      expect(paused.reason).toBe("budget: usd 1.1 of 1 spent");
      expect(paused.budget.spent.usd).toBeCloseTo(1.1);
      expect(ran).toEqual(["call-1#1", "call-2#1", "call-2#2"]);
      await engine.resume(run.id, { budget: { usd: 2 } });
      const out = (await advanceUntil(h.clock, engine.handle(run.id).result(), 10)) as {
        limit: Record<string, number>;
        spent: Record<string, number>;
      };
      expect(ran).toEqual(["call-1#1", "call-2#1", "call-2#2", "call-3#1", "call-4#1"]);
      expect(out.limit).toEqual({ usd: 2 });
      expect(out.spent.usd).toBeCloseTo(1.9);
      const steps = await engine.getSteps(run.id);
      const perAttempt = steps.flatMap((s) => s.attempts.map((a) => a.spend.usd ?? 0));
      const sum = perAttempt.reduce((a, b) => a + b, 0);
      const final = await engine.getRun(run.id);
      expect(final?.budget.spent.usd).toBeCloseTo(sum);
      expect(final?.budget.spent.tokens).toBe(1900);
      expect(steps.find((s) => s.key === "call-2")?.spend).toEqual({ usd: 0.7, tokens: 700 });
    });
  });

  describe("cancellation", () => {
    it("cancels a running step (its signal aborts), a waiting run and a pending run", async () => {
      const h = harness();
      let sawAbort = false;
      let started = false;
      let after = 0;
      const busy = workflow({ name: "busy", version: "1" }, async (ctx) => {
        await ctx.step(
          "long",
          (s) =>
            new Promise((_resolve, reject) => {
              started = true;
              s.signal.addEventListener("abort", () => {
                sawAbort = true;
                reject(s.signal.reason);
              });
            }),
        );
        after++;
      });
      const waits = workflow({ name: "waits", version: "1" }, async (ctx) => {
        await ctx.waitForEvent("never");
        after++;
      });
      const engine = h.engine([busy, waits]);
      const r1 = await engine.start(busy, undefined);
      await until(() => started, "step started");
      await engine.cancel(r1.id, "user pressed stop");
      const e1 = await r1.result().catch((e: unknown) => e);
      expect(e1).toBeInstanceOf(RunCanceledError);
      expect((e1 as Error).message).toContain("user pressed stop");
      expect(sawAbort).toBe(true);
      const r2 = await engine.start(waits, undefined);
      await until(async () => (await engine.getRun(r2.id))?.status === "waiting", "waiting");
      await engine.cancel(r2.id);
      await expect(r2.result()).rejects.toBeInstanceOf(RunCanceledError);
      const client = h.engine([], { worker: false });
      // Served by no worker here, so it stays pending until canceled.
      const unserved = workflow({ name: "unserved", version: "1" }, async () => {
        after++;
      });
      const r3 = await client.start(unserved, undefined);
      await client.cancel(r3.id, "not needed");
      await client.cancel(r3.id, "again"); // idempotent
      expect((await client.getRun(r3.id))?.status).toBe("canceled");
      expect((await client.getRun(r3.id))?.reason).toBe("not needed");
      await expect(client.sendEvent(r2.id, "never")).rejects.toBeInstanceOf(RunConflictError);
      expect(after).toBe(0);
      const done = workflow({ name: "done", version: "1" }, async () => 1);
      const e2 = h.engine([done]);
      const r4 = await e2.start(done, undefined);
      await r4.result();
      await expect(e2.cancel(r4.id)).rejects.toBeInstanceOf(RunConflictError);
    });

    it("a cancel from another process reaches the executing worker within a heartbeat", async () => {
      const h = harness();
      let sawAbort = false;
      let started = false;
      const wf = workflow({ name: "remote-cancel", version: "1" }, async (ctx) => {
        await ctx.step(
          "long",
          (s) =>
            new Promise((_r, reject) => {
              started = true;
              s.signal.addEventListener("abort", () => {
                sawAbort = true;
                reject(s.signal.reason);
              });
            }),
        );
      });
      const worker = h.engine([wf], { leaseMs: 300 });
      const run = await worker.start(wf, undefined);
      await until(() => started, "started");
      const other = createEngine({ store: h.store(), worker: false });
      await other.cancel(run.id, "from elsewhere");
      await other.close();
      await expect(worker.handle(run.id).result()).rejects.toBeInstanceOf(RunCanceledError);
      expect(sawAbort).toBe(true);
    });
  });

  describe("timeouts", () => {
    it("a step that ignores its deadline fails the attempt with StepTimeoutError and is retried", async () => {
      const h = harness();
      let calls = 0;
      let aborted = false;
      const wf = workflow({ name: "slowpoke", version: "1" }, async (ctx) =>
        ctx.step(
          "hang",
          (s) => {
            calls++;
            if (calls === 1) {
              s.signal.addEventListener("abort", () => {
                aborted = true;
              });
              return new Promise<string>(() => {}); // ignores its signal
            }
            return "second try";
          },
          { timeout: "1m", retry: { initialDelay: "1s", jitter: false } },
        ),
      );
      const engine = h.engine([wf]);
      const run = await engine.start(wf, undefined);
      expect(await advanceUntil(h.clock, run.result(), 10_000)).toBe("second try");
      expect(aborted).toBe(true);
      const [hang] = await engine.getSteps(run.id);
      expect(hang?.attempts.map((a) => a.error?.code ?? "ok")).toEqual(["STEP_TIMEOUT", "ok"]);
    });

    it("a body that first reads its signal after the deadline finds it aborted", async () => {
      // The signal is made when the body first asks for it: one asked for late must still
      // carry the timeout that already happened.
      const h = harness();
      let late: { aborted: boolean; reason: unknown } | undefined;
      let release!: () => void;
      const gate = new Promise<void>((r) => {
        release = r;
      });
      const wf = workflow({ name: "late-reader", version: "1" }, async (ctx) =>
        ctx.step(
          "hang",
          async (s) => {
            await gate;
            late = { aborted: s.signal.aborted, reason: s.signal.reason };
            return "done";
          },
          { timeout: "1m", retry: { maxAttempts: 1 } },
        ),
      );
      const engine = h.engine([wf]);
      const run = await engine.start(wf, undefined);
      const err = await advanceUntil(
        h.clock,
        run.result().catch((e: unknown) => e),
        10_000,
      );
      expect(err).toBeInstanceOf(StepTimeoutError);
      release();
      await until(() => late !== undefined, "the body read its signal");
      expect(late?.aborted).toBe(true);
      expect(late?.reason).toBeInstanceOf(StepTimeoutError);
    });

    it("a step that never finishes cannot hold the run forever", async () => {
      const h = harness();
      const wf = workflow({ name: "forever", version: "1" }, async (ctx) =>
        ctx.step("hang", () => new Promise<never>(() => {}), {
          timeout: "30s",
          retry: { maxAttempts: 2, initialDelay: 1 },
        }),
      );
      const engine = h.engine([wf]);
      const run = await engine.start(wf, undefined);
      const err = await advanceUntil(
        h.clock,
        run.result().catch((e: unknown) => e),
        10_000,
      );
      expect(err).toBeInstanceOf(StepTimeoutError);
      expect((await engine.getRun(run.id))?.status).toBe("failed");
    });
  });

  describe("fork", () => {
    it("forks a completed 10-step run from step 6 onto v2 without touching the original", async () => {
      const h = harness();
      const ran: string[] = [];
      const make = (version: string) =>
        workflow({ name: "forkme", version }, async (ctx) => {
          const out: string[] = [];
          for (let k = 1; k <= 10; k++) {
            out.push(
              await ctx.step(`step-${k}`, () => {
                ran.push(`${k}@v${version}`);
                return `${k}@v${version}`;
              }),
            );
          }
          return out;
        });
      const v1 = make("1");
      const v2 = make("2");
      const engine = h.engine([v1, v2]);
      const run = await engine.start(v1, undefined);
      await run.result();
      const store = h.store();
      await store.open({ clock: h.clock });
      const before = JSON.stringify(await store.loadJournal(run.id));
      const forked = await engine.fork(run.id, { fromStep: "step-6", version: "2", id: "forked" });
      const out = await forked.result();
      expect(out).toEqual([
        ...[1, 2, 3, 4, 5].map((k) => `${k}@v1`),
        ...[6, 7, 8, 9, 10].map((k) => `${k}@v2`),
      ]);
      expect(ran.slice(10)).toEqual([6, 7, 8, 9, 10].map((k) => `${k}@v2`));
      expect(JSON.stringify(await store.loadJournal(run.id))).toBe(before);
      expect((await engine.getRun("forked"))?.version).toBe("2");
      const err = await engine.fork(run.id, { fromStep: "nope" }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RunConflictError);
      expect((err as Error).message).toContain("step-1, step-2");
      await store.close();
    });
  });
});
