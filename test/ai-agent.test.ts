// cairn/ai: an AI SDK agent loop (generateText / streamText over a durable model and
// durable tools) records each model call and each tool call once, replays them without
// calling the provider or the tools, prices usage into the run's budget, and checks that
// replayed code sends each recorded call the same request.

import { generateText, stepCountIs, ToolLoopAgent, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createAi } from "../src/ai/index.js";
import { FatalError, NonDeterminismError, workflow } from "../src/index.js";
import { checkReplay } from "../src/testing/index.js";
import {
  type AgentOutput,
  agentModel,
  agentWorkflow,
  PRICES,
  textAnswer,
  USAGE,
  USD_PER_CALL,
} from "./fixtures/ai-agent.js";
import { kitFor, memoryDeps, near, recordedSpend } from "./helpers/ai.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const TOOL_NAMES = ["search", "fetchPage", "calculate", "writeNote", "openPullRequest"];

describe.each(BACKENDS)("durable agent loop (%s)", (backend) => {
  const harness = useHarness(backend);

  for (const stream of [false, true]) {
    it(`${stream ? "streamText" : "generateText"}: every model call and tool call is recorded once, keyed by its tool call id`, async () => {
      const h = harness();
      const deps = memoryDeps();
      const model = agentModel({ deps });
      const wf = agentWorkflow(kitFor(h), model, deps, { stream });
      const engine = h.engine([wf]);
      const run = await engine.start(wf, { topic: "durability" });
      const out = (await run.result()) as AgentOutput;
      expect(out.turns).toBe(3);
      expect(out.text).toBe(
        'Done with durability: search=3 results for durability; fetchPage=page https://example.com/durability (30 bytes); calculate=42; writeNote=note saved (29 chars); openPullRequest=opened "Notes on durability"',
      );
      expect(deps.count("model")).toBe(3);
      for (const t of TOOL_NAMES) expect(deps.count(`tool ${t}`), t).toBe(1);
      expect(deps.count("reconcile")).toBe(0);

      const steps = await engine.getSteps(run.id);
      const keys = steps.map((s) => s.key);
      const modelKeys = ["model:mock-model-id", "model:mock-model-id#2", "model:mock-model-id#3"];
      expect(keys.filter((k) => k.startsWith("model:"))).toEqual(modelKeys);
      // Tool calls: named after the tool and the id from the recorded response.
      const first = steps[0]!.result as {
        generate?: { content: Array<{ toolCallId?: string }> };
        parts?: Array<{ type: string; toolCallId?: string }>;
      };
      const ids = (first.parts ?? first.generate?.content ?? [])
        .filter((p) => p.toolCallId !== undefined)
        .map((p) => p.toolCallId);
      expect(keys).toContain(`tool:search:${ids?.[0]}`);
      expect(keys).toContain(`tool:fetchPage:${ids?.[1]}`);
      expect(keys).toContain(`tool:calculate:${ids?.[2]}`);
      expect(keys.filter((k) => k.startsWith("tool:")).length).toBe(5);
      const pr = steps.find((s) => s.key.startsWith("tool:openPullRequest:"));
      expect(pr?.kind).toBe("effect");

      // Spend: each model call's usage, priced; tools spend nothing.
      for (const k of modelKeys) {
        const s = steps.find((x) => x.key === k)!;
        expect(s.spend.tokens).toBe(1200);
        expect(s.spend.inputTokens).toBe(1000);
        expect(s.spend.outputTokens).toBe(200);
        expect(s.spend.cachedInputTokens).toBe(100);
        expect(s.spend.reasoningTokens).toBe(50);
        expect(near(s.spend.usd ?? 0, USD_PER_CALL)).toBe(true);
      }
      const info = await run.info();
      expect(near(info?.budget.spent.usd ?? 0, 3 * USD_PER_CALL)).toBe(true);
      expect(info?.budget.spent.tokens).toBe(3600);
    });
  }

  it("a replay returns recorded responses without calling the provider or the tools", async () => {
    const h = harness();
    const deps = memoryDeps();
    const wf = agentWorkflow(kitFor(h), agentModel({ deps }), deps);
    const engine = h.engine([wf]);
    const run = await engine.start(wf, { topic: "replay" });
    const out = await run.result();
    const before = deps.lines.length;
    // A fork from the last model call replays every earlier record and executes that call
    // again: one provider call, no tool.
    const fork = await engine.fork(run.id, { fromStep: "model:mock-model-id#3" });
    expect(await fork.result()).toEqual(out);
    expect(deps.lines.slice(before)).toEqual(["model"]);
  });

  it("a budget of $0.01 pauses the run with a reason naming usd; raising it completes it", async () => {
    const h = harness();
    const deps = memoryDeps();
    // 700 output tokens: $0.009375 a call. After the first call the run is under $0.01;
    // the second makes $0.01875, and the budget, checked before every attempt, pauses the
    // run before anything else starts: the parallel tool calls of turn 2.
    const usage = { ...USAGE, outputTokens: { total: 700, text: 650, reasoning: 50 } };
    const wf = agentWorkflow(kitFor(h), agentModel({ deps, usage }), deps);
    const engine = h.engine([wf]);
    const run = await engine.start(wf, { topic: "budget" }, { budget: { usd: 0.01 } });
    const paused = await until(async () => {
      const info = await run.info();
      return info?.status === "paused" ? info : undefined;
    }, "the run paused for its budget");
    expect(paused.reason).toBe("budget: usd 0.01875 of 0.01 spent");
    expect(near(paused.budget.spent.usd ?? 0, 2 * 0.009375)).toBe(true);
    expect(deps.count("model")).toBe(2);
    expect(deps.count("tool writeNote")).toBe(0);
    expect(deps.count("tool openPullRequest")).toBe(0);
    await engine.resume(run.id, { budget: { usd: 1 } });
    const out = (await run.result()) as AgentOutput;
    expect(out.turns).toBe(3);
    expect(deps.count("model")).toBe(3);
    for (const t of TOOL_NAMES) expect(deps.count(`tool ${t}`), t).toBe(1);
    // The pause came before the effect's first attempt, but after its intent was recorded
    // (ctx.effect writes the intent before the budget check), so the resume asks reconcile
    // once although perform never ran. Harmless (reconcile finds nothing), and reported.
    expect(deps.count("reconcile openPullRequest")).toBeLessThanOrEqual(1);
    expect(near(await recordedSpend(engine, run.id, "usd"), 3 * 0.009375)).toBe(true);
    expect(near((await run.info())?.budget.spent.usd ?? 0, 3 * 0.009375)).toBe(true);
  });

  it("a replay whose code sends a recorded call another prompt fails with NonDeterminismError", async () => {
    const h = harness();
    const deps = memoryDeps();
    const ai = kitFor(h);
    const model = agentModel({ deps });
    const v1 = agentWorkflow(ai, model, deps, { version: "1" });
    const v2 = agentWorkflow(ai, model, deps, { version: "2", system: "You are terse." });
    const engine = h.engine([v1, v2]);
    const run = await engine.start(v1, { topic: "drift" });
    await run.result();
    const calls = deps.count("model");
    const fork = await engine.fork(run.id, { fromStep: "model:mock-model-id#3", version: "2" });
    await expect(fork.result()).rejects.toThrow(NonDeterminismError);
    await expect(fork.result()).rejects.toThrow(/model call "model:mock-model-id" was recorded/);
    expect(deps.count("model")).toBe(calls);
    // The replay check (cairn check-replay) says so before a deploy: the same code replays,
    // a changed prompt under the same version diverges; nothing is called.
    const same = await checkReplay({ store: h.store(), workflows: [v1], runIds: [run.id] });
    expect(same.map((r) => r.verdict)).toEqual(["ok"]);
    const terse = agentWorkflow(ai, model, deps, { version: "1", system: "You are terse." });
    const changed = await checkReplay({ store: h.store(), workflows: [terse], runIds: [run.id] });
    expect(changed.map((r) => r.verdict)).toEqual(["diverged"]);
    expect(changed[0]?.detail).toMatch(/was recorded as the answer to another request/);
    expect(deps.count("model")).toBe(calls);
  });
});

describe("durable model and tools (sqlite)", () => {
  const harness = useHarness("sqlite");

  it("the provider's errors: a refused request fails at once, a 500 is retried by cairn, not by the SDK", async () => {
    const h = harness();
    let calls = 0;
    const failing = (status: number) =>
      new MockLanguageModelV4({
        doGenerate: async () => {
          calls++;
          if (calls === 1 || status === 400) {
            throw Object.assign(new Error(`HTTP ${status}`), {
              statusCode: status,
              isRetryable: status >= 500,
              responseHeaders: {},
            });
          }
          return textAnswer("ok");
        },
      });
    const ai = kitFor(h);
    const wf = workflow({ name: "errs", version: "1" }, async (ctx, status: number) => {
      const r = await generateText({ model: ai.model(ctx, failing(status)), prompt: "hi" });
      return r.text;
    });
    const engine = h.engine([wf], { inProcessRetryMs: 60_000 });

    calls = 0;
    const refused = await engine.start(wf, 400);
    await expect(refused.result()).rejects.toThrow(FatalError);
    expect(calls).toBe(1);
    const [r] = await engine.getSteps(refused.id);
    expect(r?.status).toBe("failed");
    expect(r?.error?.code).toBe("FATAL");
    expect(r?.error?.message).toMatch(/refused the call \(HTTP 400\)/);

    calls = 0;
    const flaky = engine.start(wf, 500);
    const run = await flaky;
    // cairn's backoff (first retry within 1 s) runs on the virtual clock.
    const done = run.result();
    for (let i = 0; i < 100 && calls < 2; i++) {
      await h.clock.advance(1_000);
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(await done).toBe("ok");
    expect(calls).toBe(2);
    const [s] = await engine.getSteps(run.id);
    expect(s?.attempts.map((a) => a.error?.message ?? "ok")).toEqual(["HTTP 500", "ok"]);
  });

  it("a provider's stream that reports an error is cancelled: its connection is not left open", async () => {
    const h = harness();
    let cancelled = 0;
    const model = new MockLanguageModelV4({
      doStream: async () => ({
        stream: new ReadableStream({
          start(controller) {
            controller.enqueue({ type: "stream-start", warnings: [] });
            controller.enqueue({
              type: "error",
              error: Object.assign(new Error("HTTP 400"), {
                statusCode: 400,
                isRetryable: false,
                responseHeaders: {},
              }),
            });
            // The provider's connection stays open: more parts may come.
          },
          cancel() {
            cancelled++;
          },
        }),
      }),
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "stream-error", version: "1" }, async (ctx) => {
      const r = await ai.model(ctx, model).doStream({
        prompt: [{ role: "user", content: [{ type: "text", text: "hi" }] }],
      });
      for await (const _ of r.stream) {
        // the recorded parts
      }
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, undefined);
    await expect(run.result()).rejects.toThrow(/HTTP 400/);
    expect(cancelled).toBe(1);
  });

  it("a tool gets the same idempotency key on every attempt; a tool's final error is recorded and replayed as a tool error", async () => {
    const h = harness();
    const keys: string[] = [];
    let flakyRuns = 0;
    let brokenRuns = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async (o) => {
        const toolTurn = o.prompt.some((m) => m.role === "tool");
        return {
          content: toolTurn
            ? [{ type: "text", text: JSON.stringify(o.prompt.at(-1)) }]
            : [
                { type: "tool-call", toolCallId: "a1", toolName: "flaky", input: "{}" },
                { type: "tool-call", toolCallId: "b1", toolName: "broken", input: "{}" },
              ],
          finishReason: { unified: toolTurn ? "stop" : "tool-calls", raw: "x" },
          usage: USAGE,
          warnings: [],
        };
      },
    });
    const ai = kitFor(h);
    const tools = {
      flaky: tool({
        inputSchema: z.object({}),
        execute: async (_i, o) => {
          flakyRuns++;
          keys.push((o as unknown as { idempotencyKey: string }).idempotencyKey);
          if (flakyRuns === 1) throw new Error("transient");
          return "fine";
        },
      }),
      broken: tool({
        inputSchema: z.object({}),
        execute: async (): Promise<string> => {
          brokenRuns++;
          throw new FatalError("the disk is gone");
        },
      }),
    };
    const wf = workflow({ name: "tools", version: "1" }, async (ctx) => {
      const r = await generateText({
        model: ai.model(ctx, model),
        tools: ai.tools(ctx, tools, { retry: { initialDelay: "1ms", jitter: false } }),
        stopWhen: stepCountIs(3),
        prompt: "go",
      });
      return r.text;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    // The retry's 1 ms backoff runs on the virtual clock.
    const text = (await advanceUntil(h.clock, run.result(), 1)) as string;
    expect(text).toContain("the disk is gone");
    expect(keys.length).toBe(2);
    expect(keys[0]).toBe(keys[1]);
    expect(keys[0]).toMatch(/^ck_/);
    expect(brokenRuns).toBe(1);
    const steps = await engine.getSteps(run.id);
    expect(steps.find((s) => s.key === "tool:broken:b1")?.status).toBe("failed");
    const fork = await engine.fork(run.id, { fromStep: "model:mock-model-id#2" });
    expect(await fork.result()).toBe(text);
    expect(flakyRuns).toBe(2);
    expect(brokenRuns).toBe(1);
  });

  it("the SDK's ToolLoopAgent runs on the durable model and tools as well", async () => {
    const h = harness();
    const deps = memoryDeps();
    const ai = kitFor(h);
    const model = agentModel({ deps });
    const wf = workflow({ name: "agent-class", version: "1" }, async (ctx, topic: string) => {
      const agent = new ToolLoopAgent({
        model: ai.model(ctx, model),
        tools: ai.tools(ctx, (await import("./fixtures/ai-agent.js")).agentTools(deps)),
        stopWhen: stepCountIs(10),
      });
      const r = await agent.generate({ prompt: `Research ${topic} please.` });
      return r.text;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, "agents");
    expect(await run.result()).toMatch(/^Done with agents: /);
    expect(deps.count("model")).toBe(3);
  });

  it("an estimate given to ai.model or ai.tools is reserved as for ctx.step: parallel calls cannot all pass the budget check", async () => {
    const h = harness();
    let modelCalls = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async () => {
        modelCalls++;
        await new Promise((r) => setTimeout(r, 20));
        return textAnswer("ok");
      },
    });
    const ai = kitFor(h);
    // Three model calls at once, each using 1,200 tokens, under a limit of 2,000.
    const parallel = (estimate: boolean) =>
      workflow({ name: `parallel-models-${estimate}`, version: "1" }, async (ctx) => {
        const m = ai.model(ctx, model, estimate ? { estimate: { tokens: 1_200 } } : {});
        const rs = await Promise.all(
          [1, 2, 3].map((i) => generateText({ model: m, prompt: `q${i}` })),
        );
        return rs.map((r) => r.text);
      });
    let toolRuns = 0;
    const search = tool({
      description: "search",
      inputSchema: z.object({ q: z.string() }),
      execute: async () => {
        toolRuns++;
        return "found";
      },
    });
    // A tool whose estimate alone is over the limit never starts.
    const toolWf = workflow({ name: "estimated-tool", version: "1" }, async (ctx) => {
      const tools = ai.tools(
        ctx,
        { search },
        { byTool: { search: { estimate: { tokens: 500 } } } },
      );
      return tools.search.execute?.(
        { q: "x" },
        { toolCallId: "call-1", messages: [], context: {} },
      );
    });
    const engine = h.engine([parallel(false), parallel(true), toolWf]);
    const settled = async (id: string) => {
      await until(async () => {
        const s = (await engine.getRun(id))?.status;
        return s === "paused" || s === "completed";
      }, `run ${id} pauses or completes`);
      return (await engine.getRun(id))!;
    };

    const blind = await settled(
      (await engine.start(parallel(false), undefined, { budget: { tokens: 2_000 } })).id,
    );
    expect(blind.budget.spent.tokens).toBe(3_600);
    expect(modelCalls).toBe(3);

    modelCalls = 0;
    const reserved = await settled(
      (await engine.start(parallel(true), undefined, { budget: { tokens: 2_000 } })).id,
    );
    expect(reserved.status).toBe("paused");
    expect(reserved.budget.spent.tokens).toBe(1_200);
    expect(modelCalls).toBe(1);

    const capped = await settled(
      (await engine.start(toolWf, undefined, { budget: { tokens: 100 } })).id,
    );
    expect(capped.status).toBe("paused");
    expect(toolRuns).toBe(0);
  });

  it("refuses a model without a price when there is a price table, or when the run has a usd budget", async () => {
    const h = harness();
    const unpriced = new MockLanguageModelV4({ modelId: "other" });
    const priced = kitFor(h);
    const free = createAi({ clock: h.clock });
    const wf = workflow({ name: "prices", version: "1" }, async (ctx, which: string) => {
      if (which === "table") priced.model(ctx, unpriced);
      else free.model(ctx, unpriced);
      return "made";
    });
    const engine = h.engine([wf]);
    await expect((await engine.start(wf, "table")).result()).rejects.toThrow(
      /no entry for "mock-provider:other"/,
    );
    await expect(
      (await engine.start(wf, "budget", { budget: { usd: 1 } })).result(),
    ).rejects.toThrow(/has a budget in usd, but model "mock-provider:other" has no price/);
    expect(await (await engine.start(wf, "free")).result()).toBe("made");
    expect(Object.keys(PRICES)).toEqual(["mock-provider:mock-model-id"]);
  });
});
