// Found by an adversarial review of the mends of cairn/ai's cut streams, its caller's aborts
// and ctx.budget's order: each test fails on the code before its mend.

import { generateText, stepCountIs, streamText, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { workflow } from "../src/index.js";
import { checkReplay, waitForStatus } from "../src/testing/index.js";
import { USAGE } from "./fixtures/ai-agent.js";
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

const START: StreamPart[] = [
  { type: "stream-start", warnings: [] },
  { type: "text-start", id: "t" },
  { type: "text-delta", id: "t", delta: "Half an ans" },
];

describe("cairn/ai: a provider stream that neither closes nor hears its signal (sqlite)", () => {
  const harness = useHarness("sqlite");

  // A provider stream that hangs (a stalled connection) and does not close when its signal
  // fires: the caller's stop was never heard by cairn's read of it, so the call's step
  // stayed in flight for ever (no step timeout): streamText had rejected with the abort, but
  // the run could neither suspend nor end, and its lease was renewed for good.
  it("ends as the caller's abort: the step is recorded and the run goes on", async () => {
    const h = harness();
    const caller = { c: new AbortController() };
    const model = new MockLanguageModelV4({
      doStream: async () => ({
        stream: new ReadableStream<StreamPart>({
          start(c) {
            for (const p of START) c.enqueue(p);
            caller.c.abort(); // the user stops it mid-answer; the stream hangs on
          },
        }),
      }),
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "stream-hangs-on-abort", version: "1" }, async (ctx) => {
      caller.c = new AbortController();
      const r = streamText({
        model: ai.model(ctx, model),
        prompt: "hi",
        abortSignal: caller.c.signal,
        onError: () => {},
      });
      const outcome = await Promise.resolve(r.text).catch((err: Error) => `stopped: ${err.name}`);
      await ctx.waitForEvent("go-on");
      return outcome;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    await waitForStatus(run, "waiting");
    const [step] = await engine.getSteps(run.id);
    expect(step?.error?.code).toBe("FATAL");
    expect(step?.error?.name).toBe("AbortError");
  });
});

describe("cairn/ai: a stalled provider stream whose step timed out (sqlite)", () => {
  const harness = useHarness("sqlite");

  // The step's timeout ended the attempt, but its body stayed in its read of the stalled
  // stream for ever: the provider's stream (and the connection under it) was never
  // cancelled, one left open per timed-out attempt.
  it("is cancelled once the step's signal fires", async () => {
    const h = harness();
    let cancelled = 0;
    const model = new MockLanguageModelV4({
      doStream: async () => ({
        stream: new ReadableStream<StreamPart>({
          start(c) {
            for (const p of START) c.enqueue(p);
          },
          cancel() {
            cancelled++;
          },
        }),
      }),
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "stream-stalls-past-timeout", version: "1" }, async (ctx) => {
      const m = ai.model(ctx, model, { timeout: "10s", retry: { maxAttempts: 1 } });
      return await streamText({ model: m, prompt: "hi", onError: () => {} }).text;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
    expect(r.error).toBeDefined();
    const [step] = await engine.getSteps(run.id);
    expect(step?.error?.name).toBe("StepTimeoutError");
    await expect.poll(() => cancelled).toBe(1);
  });
});

describe("cairn/ai: a provider call that never answers nor hears its signal (sqlite)", () => {
  const harness = useHarness("sqlite");

  // The same for doGenerate: a provider call that never settles held generateText, and the
  // run, for ever once its caller had stopped it.
  it("generateText: ends as the caller's abort; the run goes on", async () => {
    const h = harness();
    const caller = { c: new AbortController() };
    const model = new MockLanguageModelV4({
      doGenerate: () => {
        caller.c.abort();
        return new Promise<never>(() => {});
      },
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "generate-hangs-on-abort", version: "1" }, async (ctx) => {
      caller.c = new AbortController();
      const outcome = await generateText({
        model: ai.model(ctx, model),
        prompt: "hi",
        abortSignal: caller.c.signal,
      }).then(
        (r) => r.text,
        (err: Error) => `stopped: ${err.name}`,
      );
      await ctx.waitForEvent("go-on");
      return outcome;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    await waitForStatus(run, "waiting");
    const [step] = await engine.getSteps(run.id);
    expect(step?.error?.code).toBe("FATAL");
    expect(step?.error?.name).toBe("AbortError");
  });
});

describe("cairn/ai: spend of a failed streamed attempt, first run and replay (sqlite)", () => {
  const harness = useHarness("sqlite");

  // The provider reported its usage (the finish part) and then failed (an error part): that
  // attempt's spend is counted once, with the retry's, on the first run and on replay.
  it("a stream that errs after its finish part: its usage is spent once, replayed alike", async () => {
    const h = harness();
    let calls = 0;
    const model = new MockLanguageModelV4({
      doStream: async () => {
        calls++;
        const parts: StreamPart[] = [
          ...START,
          { type: "text-end", id: "t" },
          { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage: USAGE },
        ];
        if (calls === 1) parts.push({ type: "error", error: new Error("connection reset") });
        return { stream: arrayStream(parts) };
      },
    });
    const ai = kitFor(h);
    const seen: string[] = [];
    const wf = workflow({ name: "stream-errs-after-finish", version: "1" }, async (ctx) => {
      const m = ai.model(ctx, model, {
        retry: { maxAttempts: 3, initialDelay: "1s", jitter: false },
      });
      const text = await streamText({ model: m, prompt: "hi", onError: () => {} }).text;
      const spent = JSON.stringify(ctx.budget.spent);
      seen.push(spent);
      await ctx.waitForEvent("go-on");
      return { text, spent };
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    await advanceUntil(h.clock, waitForStatus(run, "waiting"), 1_000, 100);
    await engine.sendEvent(run.id, "go-on", null);
    const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
    expect(r.error).toBeUndefined();
    expect(calls).toBe(2);
    expect(seen.length).toBe(2);
    expect(seen[1]).toBe(seen[0]);
    expect((JSON.parse(seen[0] ?? "{}") as { tokens: number }).tokens).toBe(2_400);
    const [checked] = await checkReplay({ store: h.store(), workflows: [wf], runIds: [run.id] });
    expect(checked?.verdict).toBe("ok");
  });
});

function arrayStream(parts: StreamPart[]): ReadableStream<StreamPart> {
  return new ReadableStream<StreamPart>({
    start(c) {
      for (const p of parts) c.enqueue(p);
      c.close();
    },
  });
}

describe("cairn/ai: a cut stream in a tool loop with parallel tool calls (sqlite)", () => {
  const harness = useHarness("sqlite");

  // Held up: the cut attempt's tool-call part never reaches the SDK (a stream is read to
  // its finish inside the step), so no tool runs for it and the caller sees the retry only.
  it("runs each tool call once; the caller sees the retry's parts only; replays", async () => {
    const h = harness();
    let calls = 0;
    const executed: string[] = [];
    const model = new MockLanguageModelV4({
      doStream: async (o) => {
        calls++;
        const toolTurn = o.prompt.some((m) => m.role === "tool");
        const start: StreamPart = { type: "stream-start", warnings: [] };
        if (toolTurn) {
          const parts = [...START];
          parts.push(
            { type: "text-end", id: "t" },
            { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage: USAGE },
          );
          return { stream: arrayStream(parts) };
        }
        const a: StreamPart = { type: "tool-call", toolCallId: "a", toolName: "look", input: "{}" };
        const b: StreamPart = { type: "tool-call", toolCallId: "b", toolName: "look", input: "{}" };
        const fin: StreamPart = {
          type: "finish",
          finishReason: { unified: "tool-calls", raw: "tool_calls" },
          usage: USAGE,
        };
        return { stream: arrayStream(calls === 1 ? [start, a] : [start, a, b, fin]) };
      },
    });
    const ai = kitFor(h);
    const deltas: string[] = [];
    const wf = workflow({ name: "cut-parallel-tools", version: "1" }, async (ctx) => {
      const look = tool({
        inputSchema: z.object({}),
        execute: async (_i, { toolCallId }): Promise<string> => {
          executed.push(toolCallId);
          return "found";
        },
      });
      const r = streamText({
        model: ai.model(ctx, model, {
          retry: { maxAttempts: 3, initialDelay: "1s", jitter: false },
        }),
        tools: ai.tools(ctx, { look }),
        stopWhen: stepCountIs(3),
        prompt: "go",
        onError: () => {},
      });
      const mine: string[] = [];
      for await (const d of r.textStream) mine.push(d);
      deltas.push(mine.join(""));
      await ctx.waitForEvent("go-on");
      return mine.join("");
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    await advanceUntil(h.clock, waitForStatus(run, "waiting"), 1_000, 100);
    await engine.sendEvent(run.id, "go-on", null);
    const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
    expect(r.error).toBeUndefined();
    expect(r.value).toBe("Half an ans");
    expect(deltas).toEqual(["Half an ans", "Half an ans"]);
    expect(executed.sort()).toEqual(["a", "b"]);
    expect(calls).toBe(3);
    const [checked] = await checkReplay({ store: h.store(), workflows: [wf], runIds: [run.id] });
    expect(checked?.verdict).toBe("ok");
  });
});
