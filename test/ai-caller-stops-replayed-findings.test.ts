// The caller's abort read by the AI SDK itself (before each model call of a tool loop
// after the first; streamText's own listener) is recorded as the outcome of the call it
// landed in, so a replay, whose signal has not fired, stops where the first execution
// stopped, with the same error (src/ai/caller-stop.ts). Each case compares what the first
// execution and its replay (after a wait) saw, and counts the provider's calls.

import { generateText, stepCountIs, streamText, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { FatalError, workflow } from "../src/index.js";
import { checkReplay, waitForStatus } from "../src/testing/index.js";
import { USAGE } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";

type StreamPart =
  Awaited<ReturnType<MockLanguageModelV4["doStream"]>>["stream"] extends ReadableStream<infer P>
    ? P
    : never;

const settle = <T>(p: Promise<T>): Promise<{ value?: T; error?: Error }> =>
  p.then(
    (value) => ({ value }),
    (error: unknown) => ({ error: error as Error }),
  );

const isToolTurn = (prompt: { role: string }[]) => prompt.some((m) => m.role === "tool");

/** Turn 1: one call of `lookup` (id "c1"); turn 2: "the answer". Generated and streamed. */
function oneToolModel() {
  let calls = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async (o) => {
      calls++;
      const toolTurn = isToolTurn(o.prompt);
      return {
        content: toolTurn
          ? [{ type: "text", text: "the answer" }]
          : [{ type: "tool-call", toolCallId: "c1", toolName: "lookup", input: "{}" }],
        finishReason: { unified: toolTurn ? "stop" : "tool-calls", raw: "x" },
        usage: USAGE,
        warnings: [],
      };
    },
    doStream: async (o) => {
      calls++;
      const toolTurn = isToolTurn(o.prompt);
      const parts: StreamPart[] = toolTurn
        ? [
            { type: "stream-start", warnings: [] },
            { type: "text-start", id: "t" },
            { type: "text-delta", id: "t", delta: "the answer" },
            { type: "text-end", id: "t" },
            { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage: USAGE },
          ]
        : [
            { type: "stream-start", warnings: [] },
            { type: "tool-call", toolCallId: "c1", toolName: "lookup", input: "{}" },
            { type: "finish", finishReason: { unified: "tool-calls", raw: "x" }, usage: USAGE },
          ];
      return {
        stream: new ReadableStream<StreamPart>({
          start(c) {
            for (const p of parts) c.enqueue(p);
            c.close();
          },
        }),
      };
    },
  });
  return { model, calls: () => calls };
}

type Lookup = (signal: AbortSignal | undefined, caller: AbortController) => Promise<string>;

/** A workflow running a two-turn tool loop (generated or streamed) whose `lookup` tool is
 *  `lookup`; it records what each execution's loop ended with, then waits for "go-on". */
function loopWorkflow(
  h: Harness,
  name: string,
  mode: "generate" | "stream",
  lookup: Lookup,
  timeout?: { toolMs: number },
) {
  const { model, calls } = oneToolModel();
  const ai = kitFor(h);
  const outcomes: string[] = [];
  const wf = workflow({ name, version: "1" }, async (ctx) => {
    const caller = new AbortController();
    const tools = ai.tools(ctx, {
      lookup: tool({
        inputSchema: z.object({}),
        execute: (_input, o) => lookup(o.abortSignal, caller),
      }),
    });
    const settings = {
      model: ai.model(ctx, model),
      tools,
      stopWhen: stepCountIs(3),
      prompt: "go",
      abortSignal: caller.signal,
      ...(timeout ? { timeout } : {}),
    };
    let outcome: string;
    try {
      const text =
        mode === "generate"
          ? (await generateText(settings)).text
          : await streamText({ ...settings, onError: () => {} }).text;
      outcome = `answered: ${text}`;
    } catch (err) {
      outcome = `stopped: ${(err as Error).name}: ${(err as Error).message}`;
    }
    outcomes.push(outcome);
    await ctx.waitForEvent("go-on");
    return outcome;
  });
  return { wf, outcomes, calls };
}

/** Runs `wf` to its wait, sends the event (the replay), and returns its result. */
async function firstAndReplay(h: Harness, wf: ReturnType<typeof loopWorkflow>["wf"]) {
  const engine = h.engine([wf]);
  const run = await engine.start(wf, null);
  await waitForStatus(run, "waiting");
  await engine.sendEvent(run.id, "go-on", null);
  const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
  return { r, run, engine };
}

let firstOnly = 0; // a fresh "first execution" flag per workflow below
const STOPPED = "stopped: AbortError: This operation was aborted";

for (const backend of BACKENDS) {
  describe(`cairn/ai: the caller's abort the SDK reads itself, replayed (${backend})`, () => {
    const harness = useHarness(backend);

    for (const mode of ["generate", "stream"] as const) {
      it(`${mode}: a stop landing while a tool runs ends the replay's loop there too`, async () => {
        const h = harness();
        const mine = ++firstOnly;
        let executions = 0;
        const { wf, outcomes, calls } = loopWorkflow(
          h,
          `stop-in-tool-${mode}-${mine}`,
          mode,
          async (_s, caller) => {
            executions++;
            caller.abort(); // the user's stop, while the tool runs (the first execution only)
            return "found";
          },
        );
        const { r, run, engine } = await firstAndReplay(h, wf);
        expect(executions).toBe(1);
        expect(r.error).toBeUndefined();
        expect(outcomes).toEqual([STOPPED, STOPPED]);
        expect(calls()).toBe(1); // the model was not called past the stop, nor paid
        const steps = await engine.getSteps(run.id);
        const tool = steps.find((s) => s.name.startsWith("tool:"));
        expect(tool?.error?.name).toBe("AbortError");
        expect(tool?.error?.code).toBe("FATAL");
        const [checked] = await checkReplay({
          store: h.store(),
          workflows: [wf],
          runIds: [run.id],
        });
        expect(checked?.verdict).toBe("ok");
      });

      it(`${mode}: a tool that hears the stop and rejects ends the replay's loop there too`, async () => {
        const h = harness();
        const mine = ++firstOnly;
        const { wf, outcomes, calls } = loopWorkflow(
          h,
          `stop-heard-${mode}-${mine}`,
          mode,
          (signal, caller) => {
            caller.abort();
            return Promise.reject(signal?.reason);
          },
        );
        const { r } = await firstAndReplay(h, wf);
        expect(r.error).toBeUndefined();
        expect(outcomes).toEqual([STOPPED, STOPPED]);
        expect(calls()).toBe(1);
      });

      it(`${mode}: a tool's own error named AbortError, with no stop, does not end the loop`, async () => {
        const h = harness();
        const mine = ++firstOnly;
        const { wf, outcomes, calls } = loopWorkflow(
          h,
          `no-stop-${mode}-${mine}`,
          mode,
          async () => {
            const e = new FatalError("not a stop");
            e.name = "AbortError";
            throw e;
          },
        );
        const { r } = await firstAndReplay(h, wf);
        expect(r.error).toBeUndefined();
        expect(outcomes).toEqual(["answered: the answer", "answered: the answer"]);
        expect(calls()).toBe(2);
      });
    }

    // The SDK's tool timeout aborts a signal of the tool's own: its loop goes on (the
    // model hears of the timeout as a tool error), and so does the replay's.
    it("generate: a tool's own timeout does not end the loop, first execution or replay", async () => {
      const h = harness();
      const mine = ++firstOnly;
      const { wf, outcomes, calls } = loopWorkflow(
        h,
        `tool-timeout-${mine}`,
        "generate",
        (signal) =>
          new Promise((_resolve, reject) => {
            signal?.addEventListener("abort", () => reject(signal.reason), { once: true });
          }),
        { toolMs: 20 },
      );
      const { r } = await firstAndReplay(h, wf);
      expect(r.error).toBeUndefined();
      expect(outcomes).toEqual(["answered: the answer", "answered: the answer"]);
      expect(calls()).toBe(2);
    });

    it("stream: a stop landing during the provider's stream ends the replay with it", async () => {
      const h = harness();
      const ai = kitFor(h);
      const state = { calls: 0, caller: new AbortController(), outcomes: [] as string[] };
      const model = new MockLanguageModelV4({
        doStream: async (o) => {
          state.calls++;
          return {
            stream: new ReadableStream<StreamPart>({
              start(c) {
                c.enqueue({ type: "stream-start", warnings: [] });
                c.enqueue({ type: "text-start", id: "t" });
                c.enqueue({ type: "text-delta", id: "t", delta: "Half an ans" });
                o.abortSignal?.addEventListener("abort", () => c.error(o.abortSignal?.reason));
                state.caller.abort(); // the user stops it mid-answer
              },
            }),
          };
        },
      });
      const wf = workflow({ name: `stop-in-stream-${++firstOnly}`, version: "1" }, async (ctx) => {
        state.caller = new AbortController();
        const r = streamText({
          model: ai.model(ctx, model),
          prompt: "hi",
          abortSignal: state.caller.signal,
          onError: () => {},
        });
        const outcome = await Promise.resolve(r.text).catch(
          (err: Error) => `stopped: ${err.name}: ${err.message}`,
        );
        state.outcomes.push(outcome);
        await ctx.waitForEvent("go-on");
        return outcome;
      });
      const { r } = await firstAndReplay(h, wf);
      expect(r.error).toBeUndefined();
      expect(state.outcomes).toEqual([STOPPED, STOPPED]);
      expect(state.calls).toBe(1);
    });
  });
}
