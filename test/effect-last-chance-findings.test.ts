// The last chance of an effect out of attempts (reconcile asked once more): it never makes
// perform run again, whatever kind of failure ended the attempts, and across crashes.

import { describe, expect, it } from "vitest";
import { FatalError, workflow } from "../src/index.js";
import { crashSweep, createSideEffectCounter, createTestEngine } from "../src/testing/index.js";

describe("effect last chance (ab7ad64)", () => {
  it("maxAttempts 2, lost response on every perform: crash sweep keeps one pull request", async () => {
    const effects = createSideEffectCounter();
    const prs = new Set<string>();
    const wf = workflow({ name: "atk-effect-2", version: "1" }, async (ctx) => {
      try {
        return await ctx.effect(
          "open-pr",
          {
            perform: (key) => {
              effects.record("pull-request");
              prs.add(key);
              throw new Error("502 (created)");
            },
            reconcile: (key) => (prs.has(key) ? "pr" : undefined),
          },
          { retry: { maxAttempts: 2, initialDelay: "10ms", jitter: false } },
        );
      } catch {
        effects.record("fallback");
        return "fallback";
      }
    });
    const sweep = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: undefined,
      sideEffects: effects,
      reset: () => prs.clear(),
    });
    expect(sweep.baseline.output).toBe("pr");
    expect(sweep.failures).toEqual([]);
  });

  it("a failure final by its code (a FatalError of another copy of cairn): a crash before its outcome is recorded does not perform again", async () => {
    let performs = 0;
    let reconciles = 0;
    let finished = false;
    let t: Awaited<ReturnType<typeof createTestEngine>> | undefined;
    const wf = workflow({ name: "atk-effect-code-fatal", version: "1" }, async (ctx) => {
      try {
        return await ctx.effect(
          "charge",
          {
            perform: () => {
              performs++;
              // FatalError's code without its class: from another copy of cairn, say.
              throw Object.assign(new Error("card refused for good"), { code: "FATAL" });
            },
            reconcile: () => {
              reconciles++;
              if (reconciles === 1) {
                // The process dies here (or anywhere between the failed attempt's record
                // and the call's outcome: a deploy's restart).
                t?.crash();
                return new Promise<string | undefined>(() => {});
              }
              return undefined;
            },
          },
          { retry: { maxAttempts: 3 } },
        );
      } catch {
        finished = true;
        return "refused";
      }
    });
    t = await createTestEngine({ workflows: [wf] });
    const run = await t.start(wf, undefined);
    await t.advanceUntil(() => t?.crashed === true || finished, "the crash, or the outcome");
    if (t.crashed) await t.recover();
    const done = await t.settle(run);
    expect(done.output).toBe("refused");
    // Before the fix: the last chance was asked (the failure was final by its code, not by
    // its class), the crash recorded a lost attempt 2, and that was taken for a retry.
    expect(performs).toBe(1);
  });

  it("FatalError on the last attempt: no reconcile", async () => {
    let reconciles = 0;
    const wf = workflow({ name: "atk-effect-fatal", version: "1" }, async (ctx) => {
      try {
        return await ctx.effect(
          "x",
          {
            perform: () => {
              throw new FatalError("no");
            },
            reconcile: () => {
              reconciles++;
              return undefined;
            },
          },
          { retry: { maxAttempts: 1 } },
        );
      } catch {
        return "fallback";
      }
    });
    const t = await createTestEngine({ workflows: [wf] });
    const run = await t.start(wf, undefined);
    const done = await t.settle(run);
    expect(done.output).toBe("fallback");
    expect(reconciles).toBe(0);
  });
});
