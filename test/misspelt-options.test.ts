// Options a call does not take were dropped silently: `ctx.approval("merge", { request,
// timeOut: "1h" })` waited forever (no deadline), `ctx.waitForEvent("e", { timout })` too,
// `ctx.workspace("repo", { ignores: ["dist"] })` stored what it meant to ignore, and
// `ai.model(ctx, m, { retries: 5 })` / `ai.tools(ctx, t, { byTool: { t: { retries } } })`
// ran with the default policy. TypeScript refuses such a literal, but not an options object
// built elsewhere, nor plain JavaScript. Each call now fails with a TypeError naming the call,
// the run, the option and the options there are, before anything of it is recorded.
import { tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createAi } from "../src/ai/index.js";
import { type WorkflowContext, workflow } from "../src/index.js";
import { createTestEngine } from "../src/testing/index.js";

/** A run that makes one call with `options` handed as they were built (not a literal). */
async function failureOf(id: string, call: (ctx: WorkflowContext) => Promise<unknown>) {
  const wf = workflow({ name: `options-${id}`, version: "1" }, async (ctx) => {
    await call(ctx);
    return "went on";
  });
  const t = await createTestEngine({ workflows: [wf] });
  const run = await t.start(wf, undefined, { id });
  const done = await t.settle(run);
  const steps = await t.engine.getSteps(id);
  return { status: done.status, name: done.error?.name, message: done.error?.message, steps };
}

const built = (o: Record<string, unknown>) => o as never;

describe("misspelt options are refused, naming them", () => {
  it("ctx.approval: timeOut", async () => {
    const r = await failureOf("approval", (ctx) =>
      ctx.approval("merge", built({ request: { title: "t" }, timeOut: "1h" })),
    );
    expect(r).toMatchObject({ status: "failed", name: "TypeError" });
    expect(r.message).toBe(
      'ctx.approval("merge") in run "approval": unknown option "timeOut"; the options are request, timeout, onTimeout, schema',
    );
    expect(r.steps).toEqual([]);
  });

  it("ctx.waitForEvent: timout", async () => {
    const r = await failureOf("wait", (ctx) => ctx.waitForEvent("go", built({ timout: "1s" })));
    expect(r.message).toBe(
      'ctx.waitForEvent("go") in run "wait": unknown option "timout"; the options are timeout, schema',
    );
    expect(r.steps).toEqual([]);
  });

  it("ctx.workspace: ignores", async () => {
    const r = await failureOf("workspace", (ctx) =>
      ctx.workspace("repo", built({ ignores: ["dist"], maxBytes: 1 })),
    );
    expect(r.message).toBe(
      'ctx.workspace("repo") in run "workspace": unknown options "ignores", "maxBytes"; the options are dir, ignore, defaultIgnore, gitignore, maxFileBytes, maxCheckpointBytes',
    );
    expect(r.steps).toEqual([]);
  });

  it("ai.model: retries; ai.tools: retries, and byTool's own", async () => {
    const ai = createAi();
    const model = new MockLanguageModelV4({});
    const search = tool({ inputSchema: z.object({}), execute: async () => "found" });
    const m = await failureOf("model", async (ctx) => ai.model(ctx, model, built({ retries: 5 })));
    expect(m.message).toBe(
      'ai.model() in run "model": unknown option "retries"; the options are name, stream, checkRequest, download, retry, timeout, estimate',
    );
    const t = await failureOf("tools", async (ctx) =>
      ai.tools(ctx, { search }, built({ retries: 5 })),
    );
    expect(t.message).toBe(
      'ai.tools() in run "tools": unknown option "retries"; the options are name, byTool, workspace, retry, timeout, estimate',
    );
    const b = await failureOf("by-tool", async (ctx) =>
      ai.tools(ctx, { search }, built({ byTool: { search: { retries: 5 } } })),
    );
    expect(b.message).toBe(
      'ai.tools() in run "by-tool": byTool["search"]: unknown option "retries"; the options are retry, timeout, estimate',
    );
    await ai.close();
  });

  it("workflow(): retries (Inngest's name), and a retry field of another name", () => {
    const body = async () => "done";
    expect(() => workflow(built({ name: "w", version: "1", retries: 5 }), body)).toThrow(
      new TypeError(
        'workflow(): "w": unknown option "retries"; the options are name, version, input, retry, budget',
      ),
    );
    expect(() => workflow(built({ name: "w", version: "1", retry: { max: 5 } }), body)).toThrow(
      new TypeError(
        'workflow(): "w": retry: unknown option "max"; the options are maxAttempts, initialDelay, maxDelay, factor, jitter',
      ),
    );
    const ok = workflow(
      { name: "w", version: "1", retry: { maxAttempts: 5, jitter: false } },
      body,
    );
    expect(ok.id).toBe("w@1");
  });

  // Mended by h18 (test/step-options.test.ts): a step's own options are checked too.
  it("ctx.step: retries (a step's own options) is refused too", async () => {
    const r = await failureOf("step", (ctx) =>
      ctx.step("flaky", async () => "ok", built({ retries: 5 })),
    );
    expect(r.message).toBe(
      'ctx.step("flaky") in run "step": unknown option "retries"; the options are retry, timeout, estimate',
    );
    expect(r.steps).toEqual([]);
  });

  it("the options as documented still work", async () => {
    const ai = createAi();
    const model = new MockLanguageModelV4({});
    const search = tool({ inputSchema: z.object({}), execute: async () => "found" });
    const r = await failureOf("documented", async (ctx) => {
      ai.model(ctx, model, {
        name: "m",
        retry: { maxAttempts: 2 },
        timeout: "1m",
        checkRequest: true,
      });
      ai.tools(ctx, { search }, { name: "t", byTool: { search: { timeout: "1m" } }, retry: {} });
      await ctx.workspace("repo", { ignore: ["dist"], gitignore: false, defaultIgnore: true });
      await ctx.waitForEvent("go", { timeout: "1s" });
      await ctx.approval("merge", { request: 1, timeout: "1s", onTimeout: "approve" });
    });
    expect(r).toMatchObject({ status: "completed" });
    await ai.close();
  });
});
