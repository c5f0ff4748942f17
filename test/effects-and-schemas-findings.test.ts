// Effects, waits and approvals: findings of an adversarial review, one regression test
// each (each fails without its mend).

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { crashSweep, createSideEffectCounter, createTestEngine } from "../src/testing/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

describe("ctx.effect with reconcile", () => {
  it("maxAttempts 1: a crash between perform and its record asks reconcile, not 'worker lost'", async () => {
    const effects = createSideEffectCounter();
    const prs = new Set<string>();
    const wf = workflow({ name: "findings-effect-once", version: "1" }, async (ctx) => {
      let pr: string;
      try {
        pr = await ctx.effect(
          "open-pr",
          {
            perform: (key) => {
              effects.record("pull-request");
              prs.add(key);
              return key;
            },
            reconcile: (key) => (prs.has(key) ? key : undefined),
          },
          { retry: { maxAttempts: 1 } },
        );
      } catch {
        // The workflow's fallback when the pull request could not be opened.
        pr = await ctx.effect("open-issue-instead", {
          perform: () => {
            effects.record("issue");
            return "issue";
          },
          reconcile: () => undefined,
        });
      }
      return pr === "issue" ? "issue" : "pr";
    });
    const sweep = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: undefined,
      sideEffects: effects,
      reset: () => prs.clear(),
      filter: (b) => b.key === "open-pr",
    });
    expect(sweep.baseline.output).toBe("pr");
    // A kill between the intent and perform uses up the one attempt (the guard against an
    // effect that kills its process), and reconcile rightly finds nothing: the fallback.
    // Before the intent nothing began, and after perform reconcile finds the pull request.
    expect(sweep.failures.filter((f) => !f.includes("intent and its perform"))).toEqual([]);
    expect(sweep.boundaries.filter((b) => !b.crashed)).toEqual([]);
  });

  it("maxAttempts 1: perform that made the pull request but threw (a lost response) is reconciled, not failed", async () => {
    const prs = new Set<string>();
    const wf = workflow({ name: "findings-effect-lost-response", version: "1" }, async (ctx) => {
      try {
        return await ctx.effect(
          "open-pr",
          {
            perform: (key) => {
              prs.add(key);
              throw new Error("502 Bad Gateway (the pull request was created)");
            },
            reconcile: (key) => (prs.has(key) ? "pr" : undefined),
          },
          { retry: { maxAttempts: 1 } },
        );
      } catch {
        prs.add("fallback");
        return "fallback";
      }
    });
    const t = await createTestEngine({ workflows: [wf] });
    const run = await t.start(wf, undefined);
    const done = await t.settle(run);
    expect(done.output).toBe("pr");
    expect([...prs].filter((p) => p === "fallback")).toEqual([]);
    const [step] = await t.engine.getSteps(run.id);
    expect(step?.effect).toBe("reconciled");
  });
  it("the last chance is asked once: a reconcile cut by a crash is not asked again after the recovery", async () => {
    const prs = new Set<string>();
    let reconciles = 0;
    let t: Awaited<ReturnType<typeof createTestEngine>> | undefined;
    const wf = workflow({ name: "effect-last-chance-once", version: "1" }, async (ctx) => {
      try {
        return await ctx.effect(
          "open-pr",
          {
            perform: (key) => {
              prs.add(key);
              throw new Error("502 Bad Gateway (the pull request was created)");
            },
            reconcile: (key) => {
              reconciles++;
              if (reconciles === 1) {
                // Dies while asking: a reconcile that kills its process every time would
                // otherwise be asked again on every recovery, for ever.
                t?.crash();
                return new Promise<string | undefined>(() => {});
              }
              return prs.has(key) ? "pr" : undefined;
            },
          },
          { retry: { maxAttempts: 1 } },
        );
      } catch {
        return "fallback";
      }
    });
    t = await createTestEngine({ workflows: [wf] });
    const run = await t.start(wf, undefined);
    await t.advanceUntil(() => t?.crashed === true, "the crash in reconcile");
    await t.recover();
    const done = await t.settle(run);
    expect(reconciles).toBe(1);
    expect(done.output).toBe("fallback");
  });
});

describe.each(BACKENDS)("waits (%s)", (backend) => {
  const harness = useHarness(backend);

  it("a wait's async schema that rejects does not hand the run back to be claimed again forever", async () => {
    const h = harness();
    let validations = 0;
    const throwing = {
      "~standard": {
        version: 1 as const,
        vendor: "test",
        // An async validator (Standard Schema allows one) that rejects.
        validate: async (): Promise<never> => {
          validations++;
          throw new Error("the validator itself is broken");
        },
      },
    };
    const wf = workflow({ name: "findings-throwing-schema", version: "1" }, async (ctx) => {
      try {
        await ctx.waitForEvent("go", { schema: throwing });
        return "passed";
      } catch (err) {
        return `caught: ${(err as Error).message}`;
      }
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: `throwing-${backend}` });
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits");
    await e.sendEvent(run.id, "go", { x: 1 });
    // Either outcome is sound (the wait fails, or the run does): a loop of claims is not.
    await until(
      async () =>
        validations >= 5 ||
        (await e.getRun(run.id))?.status === "completed" ||
        (await e.getRun(run.id))?.status === "failed",
      "the run ends, or the validator is called again and again",
    );
    expect(validations).toBe(1);
  });

  it("a wait's schema that throws once: the replay sees what the first execution saw", async () => {
    const h = harness();
    let validations = 0;
    const flaky = {
      "~standard": {
        version: 1 as const,
        vendor: "test",
        validate: (value: unknown) => {
          validations++;
          if (validations === 1) throw new Error("the validator's service is down");
          return { value: value as { x: number } };
        },
      },
    };
    const wf = workflow({ name: "findings-flaky-schema", version: "1" }, async (ctx) => {
      let seen: unknown;
      try {
        const got = await ctx.waitForEvent("go", { schema: flaky });
        seen = got.timedOut ? "timed out" : got.payload;
      } catch (err) {
        seen = `caught: ${(err as Error).message}`;
      }
      const used = await ctx.step("use", () => seen);
      await ctx.sleep("nap", "1h");
      return { seen, used };
    });
    // Unfixed, the replay stalls on "use" (the wait's unrecorded throw came first): short.
    const e = h.engine([wf], { replayStallMs: 2_000 });
    const run = await e.start(wf, undefined, { id: `flaky-${backend}` });
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits");
    await e.sendEvent(run.id, "go", { x: 1 });
    await until(async () => (await e.getSteps(run.id)).some((s) => s.key === "nap"), "it naps");
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run sleeps");
    await h.clock.advance(60 * 60_000 + 1);
    const out = (await run.result()) as { seen: unknown; used: unknown };
    expect(out.seen).toEqual(out.used);
  });

  it("an approval's answer schema that throws once: the replay sees what the first execution saw", async () => {
    const h = harness();
    let validations = 0;
    const flaky = {
      "~standard": {
        version: 1 as const,
        vendor: "test",
        validate: (value: unknown) => {
          validations++;
          if (validations === 1) throw new Error("the validator's service is down");
          return { value: value as { choice: string } };
        },
      },
    };
    const wf = workflow({ name: "findings-flaky-answer", version: "1" }, async (ctx) => {
      let seen: unknown;
      try {
        seen = (await ctx.approval("pick", { request: "which?", schema: { answer: flaky } }))
          .answer;
      } catch (err) {
        seen = `caught: ${(err as Error).message}`;
      }
      const used = await ctx.step("use", () => seen);
      await ctx.sleep("nap", "1h");
      return { seen, used };
    });
    const e = h.engine([wf], { replayStallMs: 2_000 });
    const run = await e.start(wf, undefined, { id: `flaky-answer-${backend}` });
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run asks");
    await e.approve(run.id, "pick", { by: "u", answer: { choice: "a" } });
    await until(async () => (await e.getSteps(run.id)).some((s) => s.key === "nap"), "it naps");
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run sleeps");
    await h.clock.advance(60 * 60_000 + 1);
    const out = (await run.result()) as { seen: unknown; used: unknown };
    expect(out.seen).toEqual(out.used);
  });
});
