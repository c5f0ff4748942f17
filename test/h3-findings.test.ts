// Found by an adversarial review of cairn/ai (h3): each test fails on the code before its
// mend.

import { streamText } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
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

/** A streamed answer of `text`; without its finish part when `cut`. */
function textParts(text: string, cut: boolean): StreamPart[] {
  const parts: StreamPart[] = [
    { type: "stream-start", warnings: [] },
    { type: "text-start", id: "t" },
    { type: "text-delta", id: "t", delta: text },
  ];
  if (cut) return parts;
  parts.push(
    { type: "text-end", id: "t" },
    { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage: USAGE },
  );
  return parts;
}

function arrayStream(parts: StreamPart[]): ReadableStream<StreamPart> {
  return new ReadableStream<StreamPart>({
    start(c) {
      for (const p of parts) c.enqueue(p);
      c.close();
    },
  });
}

describe("cairn/ai: a provider stream that ends without its finish part (sqlite)", () => {
  const harness = useHarness("sqlite");

  // A stream cut short (a proxy closed the connection cleanly, the provider's last event
  // never came) was recorded as the call's answer: the run went on with half an answer,
  // and every replay handed the same half back as if the model had finished.
  it("is a failed attempt, retried: the answer recorded is the whole one", async () => {
    const h = harness();
    let calls = 0;
    const model = new MockLanguageModelV4({
      doStream: async () => {
        calls++;
        return {
          stream: arrayStream(
            calls === 1 ? textParts("Half an ans", true) : textParts("The whole answer.", false),
          ),
        };
      },
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "stream-no-finish", version: "1" }, async (ctx) => {
      const m = ai.model(ctx, model, {
        retry: { maxAttempts: 3, initialDelay: "1s", jitter: false },
      });
      return await streamText({ model: m, prompt: "hi", onError: () => {} }).text;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
    expect(r.value).toBe("The whole answer.");
    expect(calls).toBe(2);
    const [step] = await engine.getSteps(run.id);
    expect(step?.attempts.length).toBe(2);
    expect(step?.attempts[0]?.error?.message).toMatch(
      /^Provider "mock-provider" \(model "mock-model-id"\) ended its stream without a finish part/,
    );
  });

  it("fails the call once its attempts are spent; nothing is recorded as its answer", async () => {
    const h = harness();
    let calls = 0;
    const model = new MockLanguageModelV4({
      doStream: async () => {
        calls++;
        return { stream: arrayStream(textParts("Half an ans", true)) };
      },
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "stream-never-finishes", version: "1" }, async (ctx) => {
      const m = ai.model(ctx, model, {
        retry: { maxAttempts: 2, initialDelay: "1s", jitter: false },
      });
      return await streamText({ model: m, prompt: "hi", onError: () => {} }).text;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
    expect(r.value).toBeUndefined();
    expect(r.error).toBeDefined();
    expect(calls).toBe(2);
    const [step] = await engine.getSteps(run.id);
    expect(step?.result).toBeUndefined();
    expect(step?.error?.message).toMatch(/ended its stream without a finish part/);
    expect((await run.info())?.status).toBe("failed");
  });
});
