// Findings of an adversarial review of cairn/ai (prices, model names, replays of SDK-side
// work). Each test fails on the code before its mend.

import { generateText, smoothStream, stepCountIs, streamText, type Tool, tool } from "ai";
import { convertArrayToReadableStream, MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createAi } from "../src/ai/index.js";
import { workflow } from "../src/index.js";
import { textAnswer, USAGE } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { advanceUntil, useHarness } from "./helpers/engines.js";

type Mock = MockLanguageModelV4;
type StreamPart =
  Awaited<ReturnType<Mock["doStream"]>>["stream"] extends ReadableStream<infer P> ? P : never;

const settle = <T>(p: Promise<T>): Promise<{ value?: T; error?: Error }> =>
  p.then(
    (value) => ({ value }),
    (error: unknown) => ({ error: error as Error }),
  );

function textStream(text: string): StreamPart[] {
  return [
    { type: "stream-start", warnings: [] },
    { type: "text-start", id: "t" },
    { type: "text-delta", id: "t", delta: text },
    { type: "text-end", id: "t" },
    { type: "finish", finishReason: { unified: "stop", raw: undefined }, usage: USAGE },
  ];
}

describe("cairn/ai kit options (sqlite)", () => {
  const harness = useHarness("sqlite");

  it("a price without `output` (a misspelt field, a price table read from JSON) is refused by createAi, not paid for again on every attempt", async () => {
    const h = harness();
    let calls = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async () => {
        calls++;
        return textAnswer("ok");
      },
    });
    // "outputs" for "output": today createAi accepts it, every answered call's usd is NaN,
    // s.spend() refuses it after the provider answered, and the call is made again: the
    // provider is paid 3 times and the run fails with nothing recorded.
    const prices = JSON.parse('{ "*": { "input": 2.5, "outputs": 10 } }');
    let refused: Error | undefined;
    try {
      const ai = kitFor(h, { prices });
      const wf = workflow({ name: "one-call", version: "1" }, async (ctx) => {
        return (await generateText({ model: ai.model(ctx, model), prompt: "hi" })).text;
      });
      const engine = h.engine([wf]);
      const run = await engine.start(wf, null);
      await advanceUntil(h.clock, settle(run.result()), 1_000, 300);
    } catch (err) {
      refused = err as Error;
    }
    expect(calls).toBe(0);
    expect(refused).toBeInstanceOf(TypeError);
    expect(refused?.message).toMatch(/prices\["\*"\]\.outputs is not a price/);
    // A missing output, and a price of Infinity (usd Infinity: the same repeat), too.
    expect(() => createAi({ prices: { "*": { input: 1 } as never } })).toThrow(
      /prices\["\*"\]\.output is missing/,
    );
    expect(() =>
      createAi({ prices: { "openai:gpt-4o": { input: Number.POSITIVE_INFINITY, output: 1 } } }),
    ).toThrow(/prices\["openai:gpt-4o"\]\.input must be a finite number >= 0/);
  });

  it("a misspelt limit is refused by createAi, not silently left unenforced", async () => {
    const h = harness();
    // Before the mend, { requestPerMinute: 10 } passes, and the model runs with no limit at all.
    expect(() =>
      createAi({ store: h.store(), limits: { "*": { requestPerMinute: 10 } as never } }),
    ).toThrow(/limits\["\*"\]\.requestPerMinute is not a limit/);
    expect(() => createAi({ store: h.store(), limits: { "*": null as never } })).toThrow(
      /limits\["\*"\] must be/,
    );
  });

  it("a model `name` no step may have is refused by ai.model(), not hidden by streamText as 'No output generated'", async () => {
    const h = harness();
    let calls = 0;
    const model = new MockLanguageModelV4({
      doStream: async () => {
        calls++;
        return { stream: convertArrayToReadableStream(textStream("hello")) };
      },
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "named", version: "1" }, async (ctx) => {
      const r = streamText({
        model: ai.model(ctx, model, { name: "planner #1" }),
        prompt: "hi",
        onError: () => {},
      });
      return await r.text;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 300);
    // Before the mend: AI_NoOutputGeneratedError "No output generated. Check the stream for errors."
    expect(r.error?.name).toBe("TypeError");
    expect(r.error?.message).toMatch(/ai\.model\(\) in run ".*": name "planner #1"/);
    expect(calls).toBe(0);
  });
});

describe("cairn/ai and the SDK's own async work between steps (sqlite)", () => {
  const harness = useHarness("sqlite");

  // Every model call reaches the durable model from the SDK's loop in the workflow's ROOT
  // scope (the causal chain does not pass through the SDK), so the core accepted
  // "model:x" used again only when no timer or I/O of the workflow's ran in between. An
  // onStepFinish that logs a step (a database write, an HTTP call), a prepareStep or onChunk
  // that awaits I/O: the loop's second model call failed the run's FIRST execution with
  // NonDeterminismError, in generateText and streamText alike. Mended in model.ts: a call
  // whose prompt continues an earlier call's answer is made from that call's place.
  it("generateText whose onStepFinish awaits I/O completes a multi-step tool loop", async () => {
    const h = harness();
    let acted = 0;
    let calls = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async (o) => {
        calls++;
        const turn = o.prompt.filter((m) => m.role === "assistant").length;
        return {
          content:
            turn === 0
              ? [{ type: "tool-call", toolCallId: "call_1", toolName: "act", input: "{}" }]
              : [{ type: "text", text: "done" }],
          finishReason: { unified: turn === 0 ? "tool-calls" : "stop", raw: undefined },
          usage: USAGE,
          warnings: [],
        };
      },
    });
    const act = tool({
      inputSchema: z.object({}),
      execute: async () => {
        acted++;
        return "acted";
      },
    });
    const logged: number[] = [];
    const ai = kitFor(h);
    const wf = workflow({ name: "logged-agent", version: "1" }, async (ctx) => {
      const r = await generateText({
        model: ai.model(ctx, model),
        tools: ai.tools(ctx, { act }),
        prompt: "hi",
        stopWhen: stepCountIs(5),
        // A step log written somewhere (here: a timer standing for the write's I/O).
        onStepFinish: async (step) => {
          await new Promise((resolve) => setTimeout(resolve, 1));
          logged.push(step.stepNumber);
        },
      });
      // Released here, and replayed from the top when the event comes: the replay takes
      // the same way through the loop, without calling the model or the tool again.
      await ctx.waitForEvent("go");
      return r.text;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const waiting = await advanceUntil(
      h.clock,
      (async () => {
        for (;;) {
          const info = await run.info();
          if (info?.status === "waiting" || info?.status === "failed") return info.status;
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
      })(),
      100,
      300,
    );
    // Before the mend: "failed", NonDeterminismError at the second model call.
    expect(waiting).toBe("waiting");
    await engine.sendEvent(run.id, "go", null);
    const r = await advanceUntil(h.clock, settle(run.result()), 100, 300);
    expect(r.error).toBeUndefined();
    expect(r.value).toBe("done");
    expect(calls).toBe(2);
    expect(acted).toBe(1);
  });

  // streamText's experimental_transform smoothStream() (the SDK's documented way to pace a
  // chat's text) delays chunks with real timers, and the SDK's next step waits for the
  // transformed stream: the same failure as above, without any code of the user's.
  it("streamText with smoothStream() and tools completes a multi-step loop", async () => {
    const h = harness();
    let calls = 0;
    let acted = 0;
    const model = new MockLanguageModelV4({
      doStream: async (o) => {
        calls++;
        const turn = o.prompt.filter((m) => m.role === "assistant").length;
        const parts: StreamPart[] = [
          { type: "stream-start", warnings: [] },
          { type: "text-start", id: "t" },
          { type: "text-delta", id: "t", delta: `turn ${turn} says a few words ` },
          { type: "text-end", id: "t" },
        ];
        if (turn === 0) {
          parts.push({ type: "tool-call", toolCallId: "call_1", toolName: "act", input: "{}" });
        }
        parts.push({
          type: "finish",
          finishReason: { unified: turn === 0 ? "tool-calls" : "stop", raw: undefined },
          usage: USAGE,
        });
        return { stream: convertArrayToReadableStream(parts) };
      },
    });
    const act = tool({
      inputSchema: z.object({}),
      execute: async () => {
        acted++;
        return "acted";
      },
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "smooth-agent", version: "1" }, async (ctx) => {
      const r = streamText({
        model: ai.model(ctx, model),
        tools: ai.tools(ctx, { act }),
        prompt: "hi",
        stopWhen: stepCountIs(5),
        experimental_transform: smoothStream({ delayInMs: 1 }),
      });
      return await r.text;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const r = await advanceUntil(h.clock, settle(run.result()), 100, 300);
    // Before the mend: NonDeterminismError 'calls step "model:mock-model-id" again, and cairn cannot
    // tell that this call always comes after the one keyed "model:mock-model-id"'.
    expect(r.error).toBeUndefined();
    expect(r.value).toBe("turn 1 says a few words ");
    expect(calls).toBe(2);
    expect(acted).toBe(1);
  });
});

/** A tool as a class: its execute is a method reading `this`, as the SDK allows (it calls
 *  tool.execute(input, options)). */
class Greeter {
  description = "Greets someone";
  inputSchema = z.object({ name: z.string() });
  constructor(private readonly greeting: string) {}
  async execute({ name }: { name: string }): Promise<string> {
    return `${this.greeting}, ${name}`;
  }
}

describe("cairn/ai durable tools (sqlite)", () => {
  const harness = useHarness("sqlite");

  it("a tool call its caller aborted (the SDK's abortSignal) fails at once, as a model call does: the tool is not run again with a dead signal", async () => {
    const h = harness();
    let executions = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async (o) => {
        const turn = o.prompt.filter((m) => m.role === "assistant").length;
        return {
          content:
            turn === 0
              ? [{ type: "tool-call", toolCallId: "call_1", toolName: "deploy", input: "{}" }]
              : [{ type: "text", text: "done" }],
          finishReason: { unified: turn === 0 ? "tool-calls" : "stop", raw: undefined },
          usage: USAGE,
          warnings: [],
        };
      },
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "aborted-tool", version: "1" }, async (ctx) => {
      const caller = new AbortController();
      const deploy = tool({
        inputSchema: z.object({}),
        execute: async (_input, { abortSignal }) => {
          executions++; // work done before the tool's first abortable await
          caller.abort(); // the caller gives up meanwhile (a UI's stop, the SDK's toolMs)
          abortSignal?.throwIfAborted();
          return "deployed";
        },
      });
      try {
        const r = await generateText({
          model: ai.model(ctx, model),
          tools: ai.tools(ctx, { deploy }),
          prompt: "deploy",
          stopWhen: stepCountIs(3),
          abortSignal: caller.signal,
        });
        return r.text;
      } catch (err) {
        return `caught ${(err as Error).name}`;
      }
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 300);
    expect(r).toEqual({ value: "caught AbortError" });
    // Before the mend: 3 (each retry of the tool's step ran it again, its signal already aborted).
    expect(executions).toBe(1);
    const step = (await engine.getSteps(run.id)).find((x) => x.key === "tool:deploy:call_1");
    expect(step?.error?.name).toBe("AbortError");
    expect(step?.attempts.length).toBe(1);
  });

  it("a tool whose execute is a method reading `this` runs as the SDK runs it", async () => {
    const h = harness();
    const model = new MockLanguageModelV4({
      doGenerate: async (o) => {
        const turn = o.prompt.filter((m) => m.role === "assistant").length;
        return {
          content:
            turn === 0
              ? [
                  {
                    type: "tool-call",
                    toolCallId: "call_1",
                    toolName: "greet",
                    input: '{"name":"Ada"}',
                  },
                ]
              : [{ type: "text", text: "done" }],
          finishReason: { unified: turn === 0 ? "tool-calls" : "stop", raw: undefined },
          usage: USAGE,
          warnings: [],
        };
      },
    });
    const greet = new Greeter("Hello") as unknown as Tool;
    // The SDK alone: the method gets its tool as `this`.
    const plain = await generateText({
      model,
      tools: { greet },
      prompt: "hi",
      stopWhen: stepCountIs(3),
    });
    expect(plain.steps[0]?.toolResults.map((r) => r.output)).toEqual(["Hello, Ada"]);
    const ai = kitFor(h);
    const wf = workflow({ name: "greeter", version: "1" }, async (ctx) => {
      const r = await generateText({
        model: ai.model(ctx, model),
        tools: ai.tools(ctx, { greet }),
        prompt: "hi",
        stopWhen: stepCountIs(3),
      });
      return r.steps[0]?.toolResults.map((x) => x.output);
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 300);
    // Before the mend: execute is called without its tool, "Cannot read properties of undefined
    // (reading 'greeting')" is recorded as the tool's final error and handed to the model.
    expect(r).toEqual({ value: ["Hello, Ada"] });
    const steps = await engine.getSteps(run.id);
    expect(steps.find((x) => x.key === "tool:greet:call_1")?.result).toBe("Hello, Ada");
  });
});
