// What a crash leaves in the journal: one WORKER_LOST attempt, on the call in flight, and
// nothing charged to the calls after it; keys and events that stay what they were.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { crashableEngine } from "./helpers/crash.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("after a crash: exactly one WORKER_LOST, on the call in flight; later steps see attempt 1", async () => {
    const h = harness();
    const attempts: Record<string, number[]> = {};
    let crashNow = false;
    const note = (key: string, n: number) => {
      attempts[key] = [...(attempts[key] ?? []), n];
    };
    const wf = workflow({ name: "accounting", version: "1" }, async (ctx) => {
      const at = ctx.now();
      await ctx.step("one", (s) => note("one", s.attempt));
      await ctx.step("two", async (s) => {
        note("two", s.attempt);
        if (s.attempt === 1) {
          crashNow = true;
          await new Promise(() => {}); // the worker dies in here
        }
      });
      for (const k of ["three", "four"]) await ctx.step(k, (s) => note(k, s.attempt));
      return at > 0;
    });
    const first = crashableEngine(h, [wf]);
    const run = await first.engine.start(wf, undefined);
    await until(() => crashNow, "step two runs");
    first.crash();
    await h.clock.advance(60_000);
    const second = h.engine([wf]);
    expect(await second.handle(run.id).result()).toBe(true);
    // The crashed attempt is recorded as attempt 1 (WORKER_LOST), the retry is attempt 2.
    expect(attempts).toEqual({ one: [1], two: [1, 2], three: [1], four: [1] });
    const steps = await second.getSteps(run.id);
    const lost = steps.flatMap((s) =>
      s.attempts.filter((a) => a.error?.code === "WORKER_LOST").map(() => s.key),
    );
    expect(lost).toEqual(["two"]);
  });

  it("a step failing once sees the same idempotency key on both attempts", async () => {
    const h = harness();
    const keys: string[] = [];
    const wf = workflow({ name: "same-key", version: "1" }, async (ctx) =>
      ctx.step(
        "charge",
        (s) => {
          keys.push(s.idempotencyKey);
          if (s.attempt === 1) throw new Error("flaky");
          return "ok";
        },
        { retry: { initialDelay: 1, jitter: false } },
      ),
    );
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    expect(await advanceUntil(h.clock, run.result(), 10)).toBe("ok");
    expect(keys).toHaveLength(2);
    expect(keys[0]).toBe(keys[1]);
    expect(keys[0]).toMatch(/^ck_/);
  });

  it("each of two waits of one name consumes its own event, also across a reload", async () => {
    const h = harness();
    const wf = workflow({ name: "two-waits", version: "1" }, async (ctx) => {
      const a = await ctx.waitForEvent<string>("msg");
      const b = await ctx.waitForEvent<string>("msg");
      return [a, b].map((w) => (w.timedOut ? "-" : w.payload));
    });
    const e1 = h.engine([wf]);
    const run = await e1.start(wf, undefined);
    await until(async () => (await e1.getRun(run.id))?.status === "waiting", "the first wait");
    await e1.sendEvent(run.id, "msg", "first");
    await until(
      async () => (await e1.getSteps(run.id)).filter((s) => s.status === "completed").length === 1,
      "the first wait consumes it",
    );
    await until(async () => (await e1.getRun(run.id))?.status === "waiting", "the second wait");
    await e1.close();
    // A new worker reloads the journal between the two waits: the first event is consumed.
    const store = h.store();
    await store.open({ clock: h.clock });
    expect((await store.loadJournal(run.id)).events).toEqual([]);
    await store.close();
    const e2 = h.engine([wf]);
    await e2.sendEvent(run.id, "msg", "second");
    expect(await e2.handle(run.id).result()).toEqual(["first", "second"]);
  });
});
