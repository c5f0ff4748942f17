// Waiting at zero compute: durable sleeps and event waits with timeouts, events
// stored before sendEvent returns and consumed once in order, parallel branches, child
// runs, and thousands of sleeping runs that hold nothing while they sleep (10,000 under
// CAIRN_SOAK=1).

import { describe, expect, it } from "vitest";
import { z } from "zod";
import { RunConflictError, RunNotFoundError, workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const DAY = 86_400_000;
const SOAK = process.env.CAIRN_SOAK === "1";

const approvalFlow = workflow({ name: "approval", version: "1" }, async (ctx) => {
  await ctx.step("prepare", () => "diff");
  const first = await ctx.waitForEvent<{ ok: boolean; by: string }>("approval", { timeout: "2d" });
  const second = first.timedOut
    ? undefined
    : await ctx.waitForEvent<{ ok: boolean; by: string }>("approval", { timeout: "1h" });
  return { first, second, at: ctx.now() };
});

async function waitingRun(h: Harness, id: string) {
  const e = h.engine([approvalFlow]);
  await e.start(approvalFlow, undefined, { id });
  await until(async () => (await e.getRun(id))?.status === "waiting", `${id} waits`);
  return e;
}

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  describe("approval with a 2-day timeout, the worker restarted while the run waits", () => {
    it("(a) an approval after 1 virtual day continues the run with its payload", async () => {
      const h = harness();
      const e1 = await waitingRun(h, "a");
      const startedAt = h.clock.now();
      await e1.close();
      await h.clock.advance(DAY);
      const e2 = h.engine([approvalFlow]);
      await e2.sendEvent("a", "approval", { ok: true, by: "ana" });
      // The approval is consumed, and the run waits for the second one (1 h), before time moves.
      await until(async () => {
        const steps = await e2.getSteps("a");
        const run = await e2.getRun("a");
        return steps[1]?.status === "completed" && run?.status === "waiting";
      }, "the first approval is consumed and the run waits again");
      await h.clock.advance(60 * 60_000);
      const out = (await e2.handle("a").result()) as { first: unknown; second: unknown };
      expect(out.first).toEqual({ timedOut: false, payload: { ok: true, by: "ana" } });
      expect(out.second).toEqual({ timedOut: true });
      expect(h.clock.now() - startedAt).toBeLessThan(2 * DAY);
    });

    it("(b) with no approval the run continues after 2 virtual days with timedOut", async () => {
      const h = harness();
      const e1 = await waitingRun(h, "b");
      const reachedAt = h.clock.now();
      const info = await e1.getRun("b");
      expect(info?.wakeAt?.getTime()).toBe(reachedAt + 2 * DAY);
      expect(info?.waitingFor).toEqual(["approval"]);
      await e1.close();
      await h.clock.advance(2 * DAY - 1000);
      const e2 = h.engine([approvalFlow]);
      await new Promise((r) => setTimeout(r, 50));
      expect((await e2.getRun("b"))?.status).toBe("waiting");
      await h.clock.advance(1000);
      const out = (await e2.handle("b").result()) as { first: unknown; at: number };
      expect(out.first).toEqual({ timedOut: true });
      // The timeout counted from when the wait was first reached, not from the replay.
      expect(out.at).toBe(reachedAt + 2 * DAY);
    });

    it("(c) an approval sent before the wait started is delivered to it", async () => {
      const h = harness();
      const client = h.engine([], { worker: false });
      await client.start(approvalFlow, undefined, { id: "c" });
      await client.sendEvent("c", "approval", { ok: true, by: "early" });
      const e = h.engine([approvalFlow]);
      const out = (await advanceUntil(h.clock, e.handle("c").result(), 60 * 60_000)) as {
        first: unknown;
      };
      expect(out.first).toEqual({ timedOut: false, payload: { ok: true, by: "early" } });
    });

    it("(d) of two approvals, the second stays for the next wait", async () => {
      const h = harness();
      const e1 = await waitingRun(h, "d");
      await e1.sendEvent("d", "approval", { ok: true, by: "one" });
      await e1.sendEvent("d", "approval", { ok: false, by: "two" });
      await e1.close();
      const e2 = h.engine([approvalFlow]);
      const out = (await e2.handle("d").result()) as { first: unknown; second: unknown };
      expect(out.first).toEqual({ timedOut: false, payload: { ok: true, by: "one" } });
      expect(out.second).toEqual({ timedOut: false, payload: { ok: false, by: "two" } });
    });
  });

  describe("events", () => {
    it("refuses events for unknown and finished runs, storing nothing", async () => {
      const h = harness();
      const done = workflow({ name: "done", version: "1" }, async () => 1);
      const e = h.engine([done]);
      await expect(e.sendEvent("nope", "approval", {})).rejects.toBeInstanceOf(RunNotFoundError);
      const run = await e.start(done, undefined);
      await run.result();
      const err = await e.sendEvent(run.id, "approval", {}).catch((x: unknown) => x);
      expect(err).toBeInstanceOf(RunConflictError);
      expect((err as Error).message).toContain(run.id);
    });

    it("delivers events in the order sent, each to one wait", async () => {
      const h = harness();
      const wf = workflow({ name: "inbox", version: "1" }, async (ctx) => {
        const got: unknown[] = [];
        for (let i = 0; i < 5; i++) {
          const r = await ctx.waitForEvent<number>("msg");
          if (!r.timedOut) got.push(r.payload);
        }
        return got;
      });
      const e = h.engine([wf]);
      const run = await e.start(wf, undefined);
      for (let i = 0; i < 5; i++) await e.sendEvent(run.id, "msg", i);
      expect(await run.result()).toEqual([0, 1, 2, 3, 4]);
    });

    it("parallel branches: a step and a wait; the run suspends only when no branch can progress", async () => {
      const h = harness();
      let stepDone = false;
      const wf = workflow({ name: "par", version: "1" }, async (ctx) => {
        const [work, approval] = await Promise.all([
          ctx.step("work", async () => {
            await new Promise((r) => setTimeout(r, 30));
            stepDone = true;
            return "built";
          }),
          ctx.waitForEvent<string>("go"),
        ]);
        return { work, approval };
      });
      const e = h.engine([wf]);
      const run = await e.start(wf, undefined);
      await until(async () => (await e.getRun(run.id))?.status === "waiting", "suspended");
      expect(stepDone).toBe(true);
      const steps = await e.getSteps(run.id);
      expect(steps.find((s) => s.key === "work")?.status).toBe("completed");
      await e.sendEvent(run.id, "go", "yes");
      expect(await run.result()).toEqual({
        work: "built",
        approval: { timedOut: false, payload: "yes" },
      });
    });

    it("an event reaches a run that is still executing another branch", async () => {
      const h = harness();
      let release!: () => void;
      const gate = new Promise<void>((r) => {
        release = r;
      });
      const wf = workflow({ name: "live", version: "1" }, async (ctx) => {
        const [, ev] = await Promise.all([
          ctx.step("slow", () => gate.then(() => 1)),
          ctx.waitForEvent("ping"),
        ]);
        return ev;
      });
      const e = h.engine([wf]);
      const run = await e.start(wf, undefined);
      await until(
        async () => (await e.getSteps(run.id)).some((s) => s.key === "ping"),
        "wait reached",
      );
      await e.sendEvent(run.id, "ping", 42);
      release();
      expect(await run.result()).toEqual({ timedOut: false, payload: 42 });
    });
  });

  describe("sleep", () => {
    it("sleeps two virtual days instantly and survives a restart while asleep", async () => {
      const h = harness();
      const wf = workflow({ name: "nap", version: "1" }, async (ctx) => {
        const t0 = ctx.now();
        await ctx.sleep("nap", "2d");
        return ctx.now() - t0;
      });
      const e1 = h.engine([wf]);
      const run = await e1.start(wf, undefined);
      await until(async () => (await e1.getRun(run.id))?.status === "waiting", "asleep");
      await e1.close();
      await h.clock.advance(2 * DAY);
      const e2 = h.engine([wf]);
      expect(await e2.handle(run.id).result()).toBe(2 * DAY);
    });
  });

  describe("a wait with a schema", () => {
    it("hands over the parsed payload, and fails the wait (catchably) on one it refuses", async () => {
      const h = harness();
      const Approval = z.object({ ok: z.boolean(), by: z.string().trim() });
      const wf = workflow({ name: "typed-wait", version: "1" }, async (ctx) => {
        const seen: string[] = [];
        for (;;) {
          try {
            const answer = await ctx.waitForEvent("approval", { schema: Approval });
            if (answer.timedOut) return seen;
            seen.push(`ok=${answer.payload.ok} by=${answer.payload.by}`);
            return seen;
          } catch (e) {
            seen.push(`${(e as Error).name}: ${(e as Error).message.replace(/.*schema: /, "")}`);
          }
        }
      });
      const e = h.engine([wf]);
      const run = await e.start(wf, undefined);
      await e.sendEvent(run.id, "approval", { ok: "yes" });
      await e.sendEvent(run.id, "approval", { ok: true, by: "  ana " });
      expect(await run.result()).toEqual([
        "InputValidationError: ok: Invalid input: expected boolean, received string; by: Invalid input: expected string, received undefined",
        "ok=true by=ana",
      ]);
      const steps = await e.getSteps(run.id);
      expect(steps.map((s) => [s.key, s.status])).toEqual([
        ["approval", "failed"],
        ["approval#2", "completed"],
      ]);
    });
  });

  describe("child runs", () => {
    it("starts a child once and hands its result (or error) to the parent", async () => {
      const h = harness();
      let childRuns = 0;
      const child = workflow({ name: "kid", version: "1" }, async (ctx, input: { n: number }) => {
        await ctx.step("work", () => childRuns++);
        if (input.n < 0) throw new Error("negative");
        return input.n * 2;
      });
      const parent = workflow({ name: "parent", version: "1" }, async (ctx) => {
        const a = await ctx.child("double", child, { n: 21 });
        let err = "";
        try {
          await ctx.child("double", child, { n: -1 });
        } catch (e) {
          err = (e as Error).message;
        }
        return { a, err };
      });
      const e = h.engine([parent, child]);
      const run = await e.start(parent, undefined, { id: "p" });
      expect(await advanceUntil(h.clock, run.result(), 2000)).toEqual({ a: 42, err: "negative" });
      expect(childRuns).toBe(2);
      const kids = await e.listRuns({ parentId: "p" });
      expect(kids.map((k) => k.id).sort()).toEqual(["p/double", "p/double#2"]);
    });
  });

  describe("zero compute while waiting", () => {
    // The default run starts 2,000 runs on SQLite and 400 on PostgreSQL (10,000 and 1,000
    // took about 50 s of the suite); CAIRN_SOAK=1 starts those.
    const N = backend === "sqlite" ? (SOAK ? 10_000 : 2_000) : SOAK ? 1_000 : 400;
    it(`${N.toLocaleString("en-US")} runs sleeping 1 virtual hour hold no executions, leases or timers, then all complete`, async () => {
      const h = harness();
      const wf = workflow({ name: "sleeper", version: "1" }, async (ctx, i: number) => {
        await ctx.sleep("hour", "1h");
        return ctx.step("after", () => i);
      });
      const e = h.engine([wf], { concurrency: 256 });
      const t0 = Date.now();
      const client = h.engine([], { worker: false });
      for (let i = 0; i < N; i++) await client.start(wf, i, { id: `s-${i}` });
      const store = h.store();
      await store.open({ clock: h.clock });
      await until(
        async () => (await store.listRuns({ status: "waiting", limit: N + 1 })).length === N,
        "all asleep",
        120_000,
      );
      const tAsleep = Date.now();
      // An execution ends just after its release commits: wait for that, not a fixed time.
      await until(() => e.metrics().activeExecutions === 0, "no execution held while all sleep");
      expect(h.clock.pendingTimers()).toBe(0);
      const waiting = await store.listRuns({ status: "waiting", limit: N + 1 });
      expect(waiting.every((r) => r.leaseOwner === null && r.leaseUntil === null)).toBe(true);
      await h.clock.advance("1h");
      await until(
        async () => (await store.listRuns({ status: "completed", limit: N + 1 })).length === N,
        "all done",
        240_000,
      );
      const tDone = Date.now();
      const sample = await e.handle(`s-${N - 7}`).result();
      expect(sample).toBe(N - 7);
      console.log(
        `zero-compute: ${N} runs asleep in ${tAsleep - t0} ms; woke and finished in ${tDone - tAsleep} ms`,
      );
      await store.close();
    }, 600_000);
  });
});
