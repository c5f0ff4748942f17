// Findings of an adversarial review of cairn/ai: the shared limiter, run streams, provider errors. Each fails without its mend.

import { APICallError, generateText, stepCountIs, tool } from "ai";
import { convertArrayToReadableStream, MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { isLaterExecution, type RunStreamChunk } from "../src/ai/index.js";
import { workflow } from "../src/index.js";
import { textAnswer } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";

const LONG_LEASE = { leaseMs: 600_000 };

function apiError(statusCode: number, headers: Record<string, string> = {}): APICallError {
  return new APICallError({
    message: statusCode === 429 ? "Rate limit reached for requests" : "Bad request",
    url: "https://api.example.com/v1/chat",
    requestBodyValues: {},
    statusCode,
    responseHeaders: headers,
    isRetryable: statusCode === 429,
  });
}

const USAGE = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};

const settle = <T>(p: Promise<T>): Promise<{ value?: T; error?: Error }> =>
  p.then(
    (value) => ({ value }),
    (error: unknown) => ({ error: error as Error }),
  );

describe.each(BACKENDS)("cairn/ai findings (%s)", (backend) => {
  const harness = useHarness(backend);

  it("an absurd Retry-After neither fails the run with a TypeError nor blocks the key for every run", async () => {
    const h = harness();
    let calls = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async () => {
        calls++;
        // 10^14 s: past the 100,000 years cairn schedules, and past what a Date holds.
        if (calls === 1) throw apiError(429, { "retry-after": "99999999999999" });
        return textAnswer("ok");
      },
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "one-call", version: "1" }, async (ctx, _n: number) => {
      const r = await generateText({ model: ai.model(ctx, model), prompt: "hi" });
      return r.text;
    });
    const engine = h.engine([wf], LONG_LEASE);
    const first = await engine.start(wf, 1);
    const a = await advanceUntil(h.clock, settle(first.result()), 1_000, 200);
    // Today: TypeError "RateLimitError retryAfter: ... longer than 100,000 years".
    expect(a).toEqual({ value: "ok" });
    // Today: every later run of this model fails with a TypeError from ctx.sleepUntil
    // (the store holds a block 3 million years long), without reaching the provider.
    const second = await engine.start(wf, 2);
    const b = await advanceUntil(h.clock, settle(second.result()), 1_000, 200);
    expect(b).toEqual({ value: "ok" });
  });

  it("a failed run resumed within the minute does not reuse its old grant: the window holds", async () => {
    const h = harness();
    const calls: number[] = [];
    const model = new MockLanguageModelV4({
      doGenerate: async () => {
        calls.push(h.clock.now());
        if (calls.length === 1) throw apiError(400); // FatalError: the run fails
        return textAnswer("ok");
      },
    });
    const ai = kitFor(h, { limits: { "*": { requestsPerMinute: 1 } } });
    const wf = workflow({ name: "one-call", version: "1" }, async (ctx) => {
      const r = await generateText({ model: ai.model(ctx, model), prompt: "hi" });
      return r.text;
    });
    const engine = h.engine([wf], LONG_LEASE);
    const run = await engine.start(wf, null);
    expect((await settle(run.result())).error?.name).toBe("FatalError");
    // One request a minute: the provider saw one at calls[0]. Resumed at once, the call
    // made again must wait for the window (today it reuses grant "<key>:1", still held,
    // and goes straight to the provider: two requests in the same minute).
    await engine.resume(run.id);
    expect(await advanceUntil(h.clock, engine.handle(run.id).result(), 1_000, 200)).toBe("ok");
    expect(calls.length).toBe(2);
    expect(calls[1]! - calls[0]!).toBeGreaterThanOrEqual(60_000);
  });

  it("a call made again after a resume does not stream under the attempt number its failed call used", async () => {
    const h = harness();
    let calls = 0;
    const model = new MockLanguageModelV4({
      doStream: async () => {
        calls++;
        const tail =
          calls === 1
            ? [{ type: "error", error: apiError(400) }]
            : [
                { type: "text-end", id: "t" },
                { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage: USAGE },
              ];
        const parts = [
          { type: "stream-start", warnings: [] },
          { type: "text-start", id: "t" },
          { type: "text-delta", id: "t", delta: calls === 1 ? "Hello wor" : "Hello world!" },
          ...tail,
        ];
        return { stream: convertArrayToReadableStream(parts as never) };
      },
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "streamed", version: "1" }, async (ctx) => {
      const m = ai.model(ctx, model, { stream: true });
      const { stream } = await m.doStream({
        prompt: [{ role: "user", content: [{ type: "text", text: "hi" }] }],
      });
      let text = "";
      for await (const p of stream as unknown as AsyncIterable<{ type: string; delta?: string }>) {
        if (p.type === "text-delta") text += p.delta;
      }
      return text;
    });
    const engine = h.engine([wf], LONG_LEASE);
    const run = await engine.start(wf, null);
    expect((await settle(run.result())).error?.name).toBe("FatalError");
    await engine.resume(run.id);
    expect(await advanceUntil(h.clock, engine.handle(run.id).result(), 1_000, 200)).toBe(
      "Hello world!",
    );
    // What a reader shows by the documented rule: per call, the parts of its latest
    // (generation, attempt). Both executions are attempt 1; the resume is generation 1.
    const chunks: RunStreamChunk[] = [];
    for await (const c of ai.readStream(run.id, { follow: false })) chunks.push(c);
    expect([...new Set(chunks.map((c) => `${c.generation}/${c.attempt}`))]).toEqual(["0/1", "1/1"]);
    const latest = chunks.reduce((a, c) =>
      isLaterExecution(c.generation, c.attempt, a.generation, a.attempt) ? c : a,
    );
    const shown = chunks
      .filter(
        (c) =>
          c.generation === latest.generation &&
          c.attempt === latest.attempt &&
          c.part.type === "text-delta",
      )
      .map((c) => (c.part as { delta: string }).delta)
      .join("");
    // Before: "Hello worHello world!", both executions streamed as attempt 1 of the call.
    expect(shown).toBe("Hello world!");
  });

  it("ai.readStream refuses a `from` that is not a whole number >= 0, as engine.readStream does", async () => {
    const h = harness();
    const model = new MockLanguageModelV4({
      doStream: async () => ({
        stream: convertArrayToReadableStream([
          { type: "stream-start", warnings: [] },
          { type: "text-start", id: "t" },
          { type: "text-delta", id: "t", delta: "streamed" },
          { type: "text-end", id: "t" },
          { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage: USAGE },
        ] as never),
      }),
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "streamed", version: "1" }, async (ctx) => {
      const m = ai.model(ctx, model, { stream: true });
      await m.doStream({ prompt: [{ role: "user", content: [{ type: "text", text: "hi" }] }] });
      return "done";
    });
    const engine = h.engine([wf], LONG_LEASE);
    const run = await engine.start(wf, null);
    expect(await run.result()).toBe("done");
    const all: RunStreamChunk[] = [];
    for await (const c of ai.readStream(run.id)) all.push(c);
    expect(all.length).toBeGreaterThan(0);
    // `Number(lastEventId) + 1` with no id yet: NaN. Today on SQLite the finished run's
    // stream reads as empty and ends normally (on PostgreSQL: a StoreError).
    const read = async (from: number) => {
      const got: RunStreamChunk[] = [];
      for await (const c of ai.readStream(run.id, { from })) got.push(c);
      return got;
    };
    await expect(read(Number.NaN)).rejects.toThrow(TypeError);
    await expect(read(1e300)).rejects.toThrow(TypeError);
    await expect(engine.readStream(run.id, { from: Number.NaN })).rejects.toThrow(TypeError);
  });

  it("a provider's odd usage (more cached tokens than prompt tokens) neither fails the answered call nor makes it again", async () => {
    const h = harness();
    let calls = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async () => {
        calls++;
        // What @ai-sdk/openai reports when a server counts more cached tokens than prompt
        // tokens: noCache = prompt_tokens - cached_tokens < 0.
        return {
          ...textAnswer("ok"),
          usage: {
            inputTokens: { total: 100, noCache: -20, cacheRead: 120, cacheWrite: undefined },
            outputTokens: { total: 0, text: 0, reasoning: 0 },
          },
        };
      },
    });
    // 0.25 per million cached: the call prices at (-20 * 2.5 + 120 * 0.25) / 1e6 < 0.
    const ai = kitFor(h, {
      prices: { "mock-provider:mock-model-id": { input: 2.5, output: 10, cachedInput: 0.25 } },
    });
    const wf = workflow({ name: "one-call", version: "1" }, async (ctx) => {
      const r = await generateText({ model: ai.model(ctx, model), prompt: "hi" });
      return r.text;
    });
    const engine = h.engine([wf], LONG_LEASE);
    const run = await engine.start(wf, null);
    // Today: s.spend() refuses the negative usd in the attempt's finally, so the answered
    // call fails with a TypeError, is made again (and paid again) 3 times, and the run fails.
    expect(await advanceUntil(h.clock, settle(run.result()), 1_000, 100)).toEqual({ value: "ok" });
    expect(calls).toBe(1);
    const [step] = await engine.getSteps(run.id);
    expect(step?.spend.tokens).toBe(100);
    expect(step?.spend.usd ?? 0).toBeGreaterThanOrEqual(0);
  });

  it("a huge maxOutputTokens (no tokensPerMinute) is a call like any other on both backends", async () => {
    const h = harness();
    let calls = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async () => {
        calls++;
        return textAnswer("ok");
      },
    });
    // Only requests are limited: the estimate (prompt / 4 + maxOutputTokens) is not capped.
    const ai = kitFor(h, { limits: { "*": { requestsPerMinute: 100 } } });
    const wf = workflow({ name: "one-call", version: "1" }, async (ctx) => {
      const r = await generateText({
        model: ai.model(ctx, model),
        prompt: "hi",
        maxOutputTokens: 1e20,
      });
      return r.text;
    });
    const engine = h.engine([wf], LONG_LEASE);
    const run = await engine.start(wf, null);
    // Today on PostgreSQL: acquireRate fails ("out of range for type bigint") on every
    // attempt and the run fails; SQLite stores the estimate as a REAL and grants it.
    expect(await advanceUntil(h.clock, settle(run.result()), 1_000, 100)).toEqual({ value: "ok" });
    expect(calls).toBe(1);
  });

  it("a tool call id with a NUL or a lone surrogate still runs its tool, once", async () => {
    const h = harness();
    const prompts: string[] = [];
    const model = new MockLanguageModelV4({
      doGenerate: async (o) => {
        prompts.push(JSON.stringify(o.prompt.at(-1)));
        if (prompts.length > 1) return textAnswer("done");
        // The id is the provider's text: a proxy, or a model-made id, can carry anything.
        return {
          ...textAnswer(""),
          content: [
            {
              type: "tool-call",
              toolCallId: "call_\ud83d\u0000x",
              toolName: "echo",
              input: '{"s":"hi"}',
            },
          ],
          finishReason: { unified: "tool-calls", raw: "tool_calls" },
        };
      },
    });
    const ai = kitFor(h);
    let executed = 0;
    const echo = tool({
      inputSchema: z.object({ s: z.string() }),
      execute: async ({ s }) => {
        executed++;
        return `echo ${s}`;
      },
    });
    const wf = workflow({ name: "tool-id", version: "1" }, async (ctx) => {
      const r = await generateText({
        model: ai.model(ctx, model),
        tools: ai.tools(ctx, { echo }),
        stopWhen: stepCountIs(3),
        prompt: "hi",
      });
      return r.text;
    });
    const engine = h.engine([wf], LONG_LEASE);
    const run = await engine.start(wf, null);
    expect(await advanceUntil(h.clock, settle(run.result()), 1_000, 100)).toEqual({
      value: "done",
    });
    // Today the tool never runs: ctx.step refuses the name "tool:echo:call_\ud83d\u0000x",
    // and the model is handed cairn's TypeError (with the run id) as the tool's result.
    expect(executed).toBe(1);
    expect(prompts[1]).toContain("echo hi");
    const keys = (await engine.getSteps(run.id)).map((st) => st.key);
    expect(keys.filter((k) => k.startsWith("tool:echo:")).length).toBe(1);
  });
});
