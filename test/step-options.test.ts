// ctx.step's and ctx.effect's own options were not checked: `ctx.step("x", fn, { retries: 5 })`
// (an options object built elsewhere, or plain JavaScript: TypeScript refuses the literal) ran
// with the workflow's policy, 3 attempts, silently; an effect's likewise. Both now fail with a
// TypeError naming the call, the run, the option and the options there are, before anything
// of the call is recorded (an effect's intent included). Every option docs/API.md documents
// for them is still taken, and does what it says.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { type WorkflowContext, workflow } from "../src/index.js";
import { createTestEngine } from "../src/testing/index.js";

const built = (o: Record<string, unknown>) => o as never;

async function runOf(id: string, body: (ctx: WorkflowContext) => Promise<unknown>) {
  const wf = workflow({ name: `step-options-${id}`, version: "1" }, body);
  const t = await createTestEngine({ workflows: [wf] });
  const run = await t.start(wf, undefined, { id });
  const done = await t.settle(run);
  const steps = await t.engine.getSteps(id);
  return { done, steps };
}

describe("ctx.step and ctx.effect refuse options they do not take", () => {
  it("ctx.step: retries is refused, the body never runs, nothing recorded", async () => {
    let ran = 0;
    const { done, steps } = await runOf("step", async (ctx) =>
      ctx.step(
        "flaky",
        async () => {
          ran++;
          throw new Error("flaky");
        },
        built({ retries: 5 }),
      ),
    );
    expect(done.status).toBe("failed");
    expect(done.error?.name).toBe("TypeError");
    expect(done.error?.message).toBe(
      'ctx.step("flaky") in run "step": unknown option "retries"; the options are retry, timeout, estimate',
    );
    expect(ran).toBe(0);
    expect(steps).toEqual([]);
  });

  it("ctx.effect: timeOut and maxAttempts are refused before its intent is recorded", async () => {
    let performed = 0;
    const { done, steps } = await runOf("effect", async (ctx) =>
      ctx.effect(
        "charge",
        {
          perform: async () => {
            performed++;
            return "charged";
          },
          reconcile: async () => undefined,
        },
        built({ timeOut: "1s", maxAttempts: 1 }),
      ),
    );
    expect(done.error?.message).toBe(
      'ctx.effect("charge") in run "effect": unknown options "timeOut", "maxAttempts"; the options are retry, timeout, estimate',
    );
    expect(performed).toBe(0);
    expect(steps).toEqual([]);
  });

  it("docs/API.md documents these step options, no more", () => {
    const api = readFileSync(new URL("../docs/API.md", import.meta.url), "utf8");
    const para = api.slice(api.indexOf("Step options:"), api.indexOf("A Duration is"));
    const names = [...para.matchAll(/`(\w+)` \(/g)].map((m) => m[1]);
    expect(names).toEqual(["retry", "timeout", "estimate"]); // the ones the next test passes
  });

  it("every option docs/API.md documents for them is taken, and honoured", async () => {
    let stepAttempts = 0;
    let effectAttempts = 0;
    const { done, steps } = await runOf("documented", async (ctx) => {
      const a = await ctx.step(
        "s",
        async () => {
          stepAttempts++;
          if (stepAttempts < 4) throw new Error("again");
          return "s-ok";
        },
        { retry: { maxAttempts: 4, initialDelay: 0 }, timeout: "1m", estimate: { tokens: 1 } },
      );
      const b = await ctx.effect(
        "e",
        {
          perform: async () => {
            effectAttempts++;
            if (effectAttempts < 2) throw new Error("again");
            return "e-ok";
          },
          reconcile: async () => undefined,
        },
        { retry: { maxAttempts: 2, initialDelay: 0 }, timeout: 60_000, estimate: {} },
      );
      // Absent values of documented options, and an empty options object, are taken too.
      const c = await ctx.step("u", () => "u-ok", {
        retry: undefined,
        timeout: undefined,
        estimate: undefined,
      });
      const d = await ctx.step("empty", () => "d-ok", {});
      return [a, b, c, d];
    });
    expect(done.status).toBe("completed");
    expect(done.output).toEqual(["s-ok", "e-ok", "u-ok", "d-ok"]);
    expect(stepAttempts).toBe(4); // retry.maxAttempts honoured (the default is 3)
    expect(effectAttempts).toBe(2);
    expect(steps.map((s) => s.name)).toEqual(["s", "e", "u", "empty"]);
  });

  it("an options object's inherited names are not its own: a class instance is taken", async () => {
    class Opts {
      retry = { maxAttempts: 1 };
      describe() {
        return "one try";
      }
    }
    const { done } = await runOf("instance", async (ctx) =>
      ctx.step("once", () => "ok", new Opts()),
    );
    expect(done.status).toBe("completed");
  });
});
