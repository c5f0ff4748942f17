// The caller's abort read by the AI SDK itself (before each model call of a tool loop
// after the first; streamText's own listener) is recorded as the outcome of the call it
// landed in, so a replay, whose signal has not fired, stops where the first execution
// stopped, with the same error (src/ai/caller-stop.ts). Each case compares what the first
// execution and its replay (after a wait) saw, and counts the provider's calls.

import { streamText } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { FatalError, workflow } from "../src/index.js";
import { checkReplay } from "../src/testing/index.js";
import { kitFor } from "./helpers/ai.js";
import { firstAndReplay, loopWorkflow, type StreamPart } from "./helpers/ai-tool-loop.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

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
        // The loop's own signal had fired: a certain stop (a tool's own error so named is FATAL).
        expect(tool?.error?.code).toBe("CALLER_ABORTED");
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
