// Found by an adversarial review of cairn/ai: each test fails on the code before its
// mend.

import { generateText, stepCountIs, streamText, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { workflow } from "../src/index.js";
import { checkReplay, waitForStatus } from "../src/testing/index.js";
import { USAGE } from "./fixtures/ai-agent.js";
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

/** Turn 1: one call of `lookup` (id "c1"); turn 2: the tool's result, as text. */
function oneToolModel() {
  let calls = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async (o) => {
      calls++;
      const toolTurn = o.prompt.some((m) => m.role === "tool");
      return {
        content: toolTurn
          ? [{ type: "text", text: "the answer" }]
          : [{ type: "tool-call", toolCallId: "c1", toolName: "lookup", input: "{}" }],
        finishReason: { unified: toolTurn ? "stop" : "tool-calls", raw: "x" },
        usage: USAGE,
        warnings: [],
      };
    },
  });
  return { model, calls: () => calls };
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

describe("cairn/ai: the caller's abort between two model calls of a tool loop (sqlite)", () => {
  const harness = useHarness("sqlite");

  // The SDK checks the caller's signal before each model call of its loop after the first,
  // and throws its reason without calling the model: no cairn code runs, nothing is
  // recorded. The first execution stops there; a replay, whose signal has not fired (a
  // timeout's timer, a user's stop that came while a tool ran: the tool is not run again),
  // goes past it and makes the next model call, paid, and the run completes with another
  // output than its first execution had. Mended: the stop is recorded as the tool call's
  // outcome, and the replay's next model call fails with it (src/ai/caller-stop.ts).
  it("a replay stops where the first execution stopped, with the same error", async () => {
    const h = harness();
    const { model, calls } = oneToolModel();
    let executions = 0;
    const wf = workflow({ name: "abort-between-steps", version: "1" }, async (ctx) => {
      executions++;
      const caller = new AbortController();
      const lookup = tool({
        inputSchema: z.object({}),
        execute: async (): Promise<string> => {
          caller.abort(); // the user's stop lands while the tool runs (first execution only)
          return "found";
        },
      });
      let outcome: string;
      try {
        const r = await generateText({
          model: ai.model(ctx, model),
          tools: ai.tools(ctx, { lookup }),
          stopWhen: stepCountIs(3),
          prompt: "go",
          abortSignal: caller.signal,
        });
        outcome = `answered: ${r.text}`;
      } catch (err) {
        outcome = `stopped: ${(err as Error).name}`;
      }
      await ctx.waitForEvent("go-on");
      return outcome;
    });
    const ai = kitFor(h);
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    await waitForStatus(run, "waiting");
    await engine.sendEvent(run.id, "go-on", null);
    const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
    expect(executions).toBe(2); // the wait released the run: the event's execution replays
    expect(r.error).toBeUndefined();
    expect(r.value).toBe("stopped: AbortError");
    expect(calls()).toBe(1); // the model was not called past the abort, nor paid
  });
});

describe("ctx.budget.spent, first run and replay (sqlite)", () => {
  const harness = useHarness("sqlite");

  // The first execution summed spend in the order cairn/ai reports it (tokens, inputTokens,
  // ..., usd); a replay, in the order the store hands the records back. The same amounts in
  // another key order: an agent that told the model what it had spent sent a replay another
  // prompt, and the run failed with NonDeterminismError; checkReplay called the unchanged
  // code "diverged".
  it("has the same keys in the same order: a prompt made from it replays", async () => {
    const h = harness();
    let calls = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async () => {
        calls++;
        return {
          content: [{ type: "text", text: `answer ${calls}` }],
          finishReason: { unified: "stop", raw: "stop" },
          usage: USAGE,
          warnings: [],
        };
      },
    });
    const ai = kitFor(h);
    const wf = workflow({ name: "spent-in-prompt", version: "1" }, async (ctx) => {
      const m = ai.model(ctx, model);
      await generateText({ model: m, prompt: "first" });
      const spent = JSON.stringify(ctx.budget.spent);
      const r = await generateText({ model: m, prompt: `you have spent ${spent}` });
      await ctx.waitForEvent("go-on");
      return { text: r.text, spent };
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    await waitForStatus(run, "waiting");
    await engine.sendEvent(run.id, "go-on", null);
    const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
    expect(r.error).toBeUndefined();
    expect(r.value?.text).toBe("answer 2");
    expect(calls).toBe(2);
    const [checked] = await checkReplay({ store: h.store(), workflows: [wf], runIds: [run.id] });
    expect(checked?.verdict).toBe("ok");
  });
});

describe("ctx.budget.limit (sqlite)", () => {
  const harness = useHarness("sqlite");

  // Its order was the same on every execution (the workflow's budget, then the run's own
  // names): sorting it with spent changed it under runs recorded before, and a run that had
  // put JSON.stringify(ctx.budget.limit) in a child's input or a prompt failed its replay
  // after the upgrade with NonDeterminismError.
  it("keeps the order its names were given in, on the first execution and on a replay", async () => {
    const h = harness();
    const wf = workflow(
      { name: "limit-order", version: "1", budget: { usd: 5, tokens: 1000 } },
      async (ctx) => {
        const first = JSON.stringify(ctx.budget.limit);
        await ctx.step("note", () => first);
        await ctx.waitForEvent("go-on");
        return { first, replayed: JSON.stringify(ctx.budget.limit) };
      },
    );
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null, { budget: { calls: 3 } });
    await waitForStatus(run, "waiting");
    await engine.sendEvent(run.id, "go-on", null);
    const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
    expect(r.error).toBeUndefined();
    expect(r.value?.first).toBe('{"usd":5,"tokens":1000,"calls":3}');
    expect(r.value?.replayed).toBe(r.value?.first);
  });
});

describe("cairn/ai: a provider stream that ends cleanly once aborted (sqlite)", () => {
  const harness = useHarness("sqlite");

  /** A streamed call that closes (no error, no finish) once its signal fires, and the
   *  caller's stop landing while it streams; `outcomes` holds what each execution saw. */
  function stoppedStream() {
    const state = { calls: 0, caller: new AbortController(), outcomes: [] as string[] };
    const model = new MockLanguageModelV4({
      doStream: async (o) => {
        state.calls++;
        const parts = textParts("Half an ans", true);
        return {
          stream: new ReadableStream<StreamPart>({
            start(c) {
              for (const p of parts) c.enqueue(p);
              o.abortSignal?.addEventListener("abort", () => c.close());
              state.caller.abort(); // the user stops it mid-answer
            },
          }),
        };
      },
    });
    return { state, model };
  }

  function stoppedWorkflow(h: Harness, name: string) {
    const { state, model } = stoppedStream();
    const ai = kitFor(h);
    const wf = workflow({ name, version: "1" }, async (ctx) => {
      state.caller = new AbortController();
      const r = streamText({
        model: ai.model(ctx, model),
        prompt: "hi",
        abortSignal: state.caller.signal,
        onError: () => {},
      });
      const outcome = await Promise.resolve(r.text).catch((err: Error) => `stopped: ${err.name}`);
      state.outcomes.push(outcome);
      await ctx.waitForEvent("go-on");
      return outcome;
    });
    return { state, wf };
  }

  // Read as a cut stream, the caller's abort was recorded under the cut stream's message,
  // named "Error", a failure like any other, rather than as the abort it was.
  it("is recorded as the caller's abort: a FatalError named as the abort's error", async () => {
    const h = harness();
    const { state, wf } = stoppedWorkflow(h, "stream-closed-on-abort");
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    await waitForStatus(run, "waiting");
    const [step] = await engine.getSteps(run.id);
    expect(step?.error?.code).toBe("FATAL");
    expect(step?.error?.name).toBe("AbortError");
    expect(step?.error?.message).not.toMatch(/finish part/);
    expect(state.calls).toBe(1);
  });

  // streamText rejects with the caller's signal's reason when it fires (its own listener);
  // a replay, whose signal has not fired, is handed the recorded abort from doStream and
  // rejects with NoOutputGeneratedError: the SDK reads the caller's live signal, which a
  // replay does not have. Mended: the recorded abort carries the SDK's mark that makes
  // streamText reject with it (src/ai/caller-abort.ts, asStreamEnd).
  it("a replay stops with the error the first execution stopped with", async () => {
    const h = harness();
    const { state, wf } = stoppedWorkflow(h, "stream-closed-on-abort-replayed");
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    await waitForStatus(run, "waiting");
    await engine.sendEvent(run.id, "go-on", null);
    const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
    expect(state.outcomes).toEqual(["stopped: AbortError", "stopped: AbortError"]);
    expect(r.value).toBe("stopped: AbortError");
  });
});
