import { describe, expect, it } from "vitest";
import { RateLimitError, workflow } from "../index.js";
import { crashSweep, createSideEffectCounter } from "./index.js";

describe("crashSweep", () => {
  it("a safe workflow: every boundary ends as the undisturbed run did", async () => {
    const fx = createSideEffectCounter();
    const opened = new Map<string, number>();
    const wf = workflow({ name: "safe", version: "1" }, async (ctx, input: { n: number }) => {
      const a = await ctx.step("fetch", () => input.n * 2);
      const pr = await ctx.effect("open-pr", {
        perform: (key) => {
          fx.record("pull-request");
          opened.set(key, a);
          return a;
        },
        reconcile: (key) => opened.get(key),
      });
      const approved = await ctx.waitForEvent<boolean>("approve", { timeout: "2d" });
      await ctx.sleep("cool-down", "1h");
      const b = await ctx.step("flaky", (s) => {
        if (s.attempt === 1) throw new RateLimitError("slow", { retryAfter: "2s" });
        return pr + 1;
      });
      return { b, approved: !approved.timedOut && approved.payload };
    });
    const res = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: { n: 3 },
      events: [{ name: "approve", payload: true }],
      sideEffects: fx,
      reset: () => opened.clear(),
    });
    expect(res.baseline).toEqual({
      status: "completed",
      output: { b: 7, approved: true },
      sideEffects: { "pull-request": 1 },
    });
    const points = new Set(res.boundaries.map((b) => b.boundary.point));
    expect([...points].sort()).toEqual(
      [
        "after-intent",
        "after-record",
        "backoff",
        "before-function",
        "before-intent",
        "before-record",
      ].sort(),
    );
    expect(res.failures).toEqual([]);
    expect(res.boundaries.length).toBeGreaterThan(15);
    // A boundary the crashing execution never reached tested nothing: all of them must be.
    expect(res.boundaries.filter((b) => !b.crashed).map((b) => b.boundary.label)).toEqual([]);
  });

  it("catches a side effect outside any step and an effect without a working reconcile", async () => {
    const fx = createSideEffectCounter();
    const wf = workflow({ name: "broken", version: "1" }, async (ctx) => {
      fx.record("email"); // outside any step: runs again on every replay
      await ctx.effect("open-pr", {
        perform: () => {
          fx.record("pull-request");
          return 1;
        },
        reconcile: () => undefined, // never finds what perform did
      });
      return "done";
    });
    const res = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: undefined,
      sideEffects: fx,
    });
    expect(res.failures).toContain(
      `crash between effect "open-pr"'s perform and its completion record (run "crash-sweep"): side effect "email" happened 2 times (undisturbed: 1); side effect "pull-request" happened 2 times (undisturbed: 1)`,
    );
    expect(res.failures.filter((f) => f.includes('"email" happened 2 times'))).toHaveLength(
      res.boundaries.length,
    );
  });

  it("refuses a workflow it was not given, and a baseline that never finishes, saying why", async () => {
    const wf = workflow({ name: "waits-forever", version: "1" }, async (ctx) =>
      ctx.waitForEvent("never"),
    );
    const other = workflow({ name: "other", version: "1" }, async () => 1);
    await expect(
      crashSweep({ workflows: [other], workflow: wf, input: undefined }),
    ).rejects.toThrow(/workflow "waits-forever@1" is not among workflows \("other@1"\)/);
    await expect(crashSweep({ workflows: [wf], workflow: wf, input: undefined })).rejects.toThrow(
      /undisturbed run "crash-sweep" ended running \(.*run "crash-sweep" waits for never.*\); it must complete or fail/,
    );
  });

  it("a step with an unkeyed side effect is caught exactly where its body runs twice", async () => {
    const fx = createSideEffectCounter();
    const wf = workflow({ name: "emails", version: "1" }, async (ctx) => {
      await ctx.step("send-email", () => {
        fx.record("email"); // no idempotency key: a second attempt sends a second email
        return "sent";
      });
      return ctx.step("log", () => "logged");
    });
    const res = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: undefined,
      sideEffects: fx,
    });
    expect(res.failures).toEqual([
      `crash after step "send-email" returned, before its record (run "crash-sweep"): side effect "email" happened 2 times (undisturbed: 1)`,
    ]);
    // The same body keyed by s.idempotencyKey (a provider that dedupes) passes.
    const keyed = workflow({ name: "emails", version: "2" }, async (ctx) =>
      ctx.step("send-email", (s) => {
        fx.record("email", s.idempotencyKey);
        return "sent";
      }),
    );
    const ok = await crashSweep({
      workflows: [keyed],
      workflow: keyed,
      input: undefined,
      sideEffects: fx,
    });
    expect(ok.failures).toEqual([]);
    expect(ok.boundaries.map((b) => b.boundary.label)).toContain(
      `after step "send-email" returned, before its record`,
    );
  });

  it("normalize drops what depends on when the crash happened; every boundary was reached", async () => {
    const wf = workflow({ name: "timed", version: "1" }, async (ctx) => {
      await ctx.step("work", () => 1);
      return { value: 1, finishedAt: ctx.now("end") };
    });
    const raw = await crashSweep({ workflows: [wf], workflow: wf, input: undefined });
    expect(raw.failures.some((f) => /its output differs at \.finishedAt: /.test(f))).toBe(true);
    const res = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: undefined,
      normalize: (o) => ({ ...(o as object), finishedAt: "(any)" }),
    });
    expect(res.failures).toEqual([]);
    expect(res.boundaries.every((b) => b.crashed)).toBe(true);
  });
});
