// Found by an adversarial review of cairn/ai: a tool error replayed with another stack, a
// kit store that stops answering, a stream's error part recorded as "[object Object]", a
// misspelt byTool entry, an effect tool its caller aborted; each test fails on the code
// before its mend.

import { generateText, stepCountIs, streamText, tool } from "ai";
import { convertArrayToReadableStream, MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { effectTool } from "../src/ai/index.js";
import { workflow } from "../src/index.js";
import { checkReplay, faultyStore } from "../src/testing/index.js";
import { textAnswer, USAGE } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { advanceUntil, type Harness, useHarness } from "./helpers/engines.js";

type Mock = MockLanguageModelV4;
type StreamPart =
  Awaited<ReturnType<Mock["doStream"]>>["stream"] extends ReadableStream<infer P> ? P : never;

const settle = <T>(p: Promise<T>): Promise<{ value?: T; error?: Error }> =>
  p.then(
    (value) => ({ value }),
    (error: unknown) => ({ error: error as Error }),
  );

/** Advances the clock a second at a time, up to `seconds`, then waits (real time, up to
 *  10 s) while the promise is pending; resolves with its value, or "still running". */
async function within<T>(h: Harness, p: Promise<T>, seconds: number): Promise<T | "still running"> {
  let out: T | "still running" = "still running";
  const done = p.then((v) => {
    out = v;
  });
  done.catch(() => {});
  for (let i = 0; i < seconds && out === "still running"; i++) {
    await h.clock.advance(1_000);
    await new Promise((r) => setTimeout(r, 5));
  }
  for (let i = 0; i < 1_000 && out === "still running"; i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  return out;
}

/** Turn 1: one call of `tool` (id "c1"); turn 2: the tool's result, as text. */
function oneToolModel() {
  let calls = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async (o) => {
      calls++;
      const toolTurn = o.prompt.some((m) => m.role === "tool");
      return {
        content: toolTurn
          ? [{ type: "text", text: JSON.stringify(o.prompt.at(-1)) }]
          : [{ type: "tool-call", toolCallId: "c1", toolName: "lookup", input: "{}" }],
        finishReason: { unified: toolTurn ? "stop" : "tool-calls", raw: "x" },
        usage: USAGE,
        warnings: [],
      };
    },
  });
  return { model, calls: () => calls };
}

describe("cairn/ai: a tool that throws what is not an Error (sqlite)", () => {
  const harness = useHarness("sqlite");

  // The SDK hands a tool's error to the workflow (r.steps[i].content holds a tool-error
  // with it). A thrown value that is not an Error has no stack to record, and cairn rebuilt
  // the error with a stack of its own frames, which differ between the first execution and
  // a replay: the replay's output was another value, and checkReplay (cairn check-replay)
  // reported unchanged code as "diverged".
  it("replays the same error: checkReplay finds the code unchanged", async () => {
    const h = harness();
    const { model } = oneToolModel();
    const ai = kitFor(h);
    const lookup = tool({
      inputSchema: z.object({}),
      execute: async (): Promise<string> => {
        throw { reason: "not found" };
      },
    });
    const wf = workflow({ name: "tool-throws-value", version: "1" }, async (ctx) => {
      const r = await generateText({
        model: ai.model(ctx, model),
        tools: ai.tools(ctx, { lookup }, { retry: { maxAttempts: 1 } }),
        stopWhen: stepCountIs(3),
        prompt: "go",
      });
      const failed = r.steps[0]?.content.find((c) => c.type === "tool-error");
      return { text: r.text, error: failed?.type === "tool-error" ? failed.error : undefined };
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const out = await run.result();
    // As the SDK shows the model a thrown value that is not an Error: its JSON.
    expect((out.error as Error).message).toBe('{"reason":"not found"}');
    const [checked] = await checkReplay({ store: h.store(), workflows: [wf], runIds: [run.id] });
    expect(checked?.detail).toBe("replayed to completion");
    expect(checked?.verdict).toBe("ok");
  });
});

describe("cairn/ai: a kit store that stops answering (sqlite)", () => {
  const harness = useHarness("sqlite");

  function textStream(text: string): StreamPart[] {
    return [
      { type: "stream-start", warnings: [] },
      { type: "text-start", id: "t" },
      { type: "text-delta", id: "t", delta: text },
      { type: "text-end", id: "t" },
      { type: "finish", finishReason: { unified: "stop", raw: undefined }, usage: USAGE },
    ];
  }

  // The run's stream and the shared limiter live in the kit's store: side work that "never
  // fails the call". But the call waited for it without bound after the provider had
  // answered: a stalled connection held the answered call until its step timed out, and the
  // provider was called (and paid) again, with the first answer's spend lost; without a
  // timeout the run never moved again.
  for (const verb of ["appendStream", "settleRate"] as const) {
    it(`a stalled ${verb} neither holds an answered call nor makes it again`, async () => {
      const h = harness();
      let calls = 0;
      const model = new MockLanguageModelV4({
        doStream: async () => {
          calls++;
          return { stream: convertArrayToReadableStream(textStream("hello")) };
        },
        doGenerate: async () => {
          calls++;
          return textAnswer("hello");
        },
      });
      const logged: string[] = [];
      const ai = kitFor(h, {
        store: faultyStore(h.store(), { stalled: new Set([verb]) }),
        log: (message) => logged.push(message),
        ...(verb === "settleRate" ? { limits: { "*": { tokensPerMinute: 1_000_000 } } } : {}),
      });
      const wf = workflow({ name: `stalled-${verb}`, version: "1" }, async (ctx) => {
        const m = ai.model(ctx, model, { stream: verb === "appendStream", timeout: "20s" });
        if (verb === "settleRate") return (await generateText({ model: m, prompt: "hi" })).text;
        return await streamText({ model: m, prompt: "hi" }).text;
      });
      const engine = h.engine([wf]);
      const run = await engine.start(wf, null);
      // Past the 5 s the call waits for the kit's store, short of its 20 s timeout.
      expect(await within(h, run.result(), 12)).toBe("hello");
      expect(calls).toBe(1);
      const [step] = await engine.getSteps(run.id);
      expect(step?.attempts.length).toBe(1);
      expect(step?.spend.tokens).toBe(1200);
      expect(logged.some((l) => /the store did not answer within 5 s/.test(l))).toBe(true);
    });
  }
});

describe("cairn/ai: a provider's stream that reports an error (sqlite)", () => {
  const harness = useHarness("sqlite");

  // Providers put their event's error object in a stream's error part (Anthropic's
  // { type: "overloaded_error", message: "Overloaded" }, OpenAI's { message, type, code }).
  // It was thrown as it was, and recorded as "[object Object]": the attempt, the step and
  // the run's error said nothing of what happened, nor which provider said it.
  it("records the provider's message, naming the provider and the model", async () => {
    const h = harness();
    const model = new MockLanguageModelV4({
      doStream: async () => ({
        stream: convertArrayToReadableStream<StreamPart>([
          { type: "stream-start", warnings: [] },
          { type: "error", error: { type: "overloaded_error", message: "Overloaded" } },
        ]),
      }),
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "stream-error-object", version: "1" }, async (ctx) => {
      const m = ai.model(ctx, model, { retry: { maxAttempts: 1 } });
      return await streamText({ model: m, prompt: "hi", onError: () => {} }).text;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
    expect(r.error).toBeDefined();
    const [step] = await engine.getSteps(run.id);
    expect(step?.error?.message).toBe(
      'Provider "mock-provider" (model "mock-model-id") reported an error in its stream: Overloaded (overloaded_error)',
    );
  });
});

describe("cairn/ai: ai.tools() options (sqlite)", () => {
  const harness = useHarness("sqlite");

  // As a misspelt limit was (createAi refuses it now), a misspelt byTool entry was ignored:
  // the tool it meant ran with the shared options, here the default 3 attempts for a tool
  // that must run at most once.
  it("a byTool entry that names no tool of the set is a TypeError, not ignored", async () => {
    const h = harness();
    const { model, calls } = oneToolModel();
    let sent = 0;
    const lookup = tool({
      inputSchema: z.object({}),
      execute: async (): Promise<string> => {
        sent++;
        throw new Error("mail server said 500 after sending");
      },
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "by-tool-typo", version: "1" }, async (ctx) => {
      const r = await generateText({
        model: ai.model(ctx, model),
        tools: ai.tools(ctx, { lookup }, { byTool: { lookpu: { retry: { maxAttempts: 1 } } } }),
        stopWhen: stepCountIs(3),
        prompt: "go",
      });
      return r.text;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
    expect(r.error?.name).toBe("TypeError");
    expect(r.error?.message).toMatch(
      /^ai\.tools\(\) in run ".*": byTool\["lookpu"\] names no tool of this set \(lookup\)/,
    );
    expect(calls()).toBe(0);
    expect(sent).toBe(0);
  });
});

describe("cairn/ai: an effect tool its caller aborted (sqlite)", () => {
  const harness = useHarness("sqlite");

  // A tool call that fails once the SDK's abort fired fails at once with a FatalError (not
  // retried), as a model call does. An effectTool went through ctx.effect without that: its
  // failed perform was reconciled and performed again, with the caller's signal already
  // aborted, on every attempt.
  it("fails at once with a FatalError named as the abort's error: not reconciled, not performed again", async () => {
    const h = harness();
    const { model } = oneToolModel();
    let performed = 0;
    let reconciled = 0;
    const caller = new AbortController();
    const lookup = effectTool({
      inputSchema: z.object({}),
      perform: async (_input, { abortSignal }): Promise<string> => {
        performed++;
        caller.abort();
        abortSignal.throwIfAborted();
        return "sent";
      },
      reconcile: async () => {
        reconciled++;
        return undefined;
      },
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "effect-aborted", version: "1" }, async (ctx) => {
      const r = await generateText({
        model: ai.model(ctx, model),
        tools: ai.tools(ctx, { lookup }, { retry: { initialDelay: "1s", jitter: false } }),
        stopWhen: stepCountIs(3),
        prompt: "go",
        abortSignal: caller.signal,
      });
      return r.text;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
    expect(performed).toBe(1);
    expect(reconciled).toBe(0);
    const step = (await engine.getSteps(run.id)).find((s) => s.key === "tool:lookup:c1");
    // Its loop's own signal fired: a stop the replay ends the loop at (caller-stop.ts).
    expect(step?.error?.code).toBe("CALLER_ABORTED");
    expect(step?.error?.name).toBe("AbortError");
  });
});
