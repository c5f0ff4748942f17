// Two tool loops at once in one run (generateText in Promise.all), each with its own abort
// signal, answering the same tool and tool call id (a mock's "call-1"; providers number
// calls per answer too). A tool given a signal of its own by `timeout.toolMs` is linked to
// the loop whose answer holds it, so that a caller's stop in it stops that loop's replay
// too (caller-stop.ts). The link was the newest answer's: both answers noted before either
// tool ran (an onToolExecutionStart that awaits I/O), loop one's tool took loop two's
// signal and loop two's took none. Loop two's stop then did not stop its replay, which made
// a model call the first execution never made, paid, and answered where the first execution
// had stopped; loop one's stop marked loop two's signal, and the replay of loop one made
// its next model call under another call's key and failed with NonDeterminismError.
//
// And a caller's TimeoutError (`timeout.totalMs`, `AbortSignal.timeout`) ending such a tool
// was recorded as the tool's own timeout would be: the replay went on past it.

import { generateText, stepCountIs, streamText, tool } from "ai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { workflow } from "../src/index.js";
import { waitForStatus } from "../src/testing/index.js";
import { kitFor } from "./helpers/ai.js";
import {
  firstAndReplay as loopFirstAndReplay,
  loopWorkflow,
  oneToolModel,
  settle,
} from "./helpers/ai-tool-loop.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";

/** Loops "one" and "two" at once over one model whose first answer calls `lookup` as
 *  "c1"; `stopper`'s tool stops its own loop. */
async function twoLoops(
  h: Harness,
  name: string,
  stopper: "one" | "two",
  mode: "generate" | "stream",
) {
  const { model, calls } = oneToolModel();
  const ai = kitFor(h);
  const outcomes: string[] = [];
  const wf = workflow({ name, version: "1" }, async (ctx) => {
    const loop = async (which: "one" | "two") => {
      const caller = new AbortController();
      const tools = ai.tools(
        ctx,
        {
          lookup: tool({
            inputSchema: z.object({}),
            execute: async () => {
              if (which === stopper) caller.abort(); // the user's stop, while the tool runs
              return `found by ${which}`;
            },
          }),
        },
        { name: which },
      );
      try {
        const settings = {
          model: ai.model(ctx, model),
          tools,
          stopWhen: stepCountIs(3),
          prompt: `loop ${which}`,
          abortSignal: caller.signal,
          timeout: { toolMs: 60_000 },
          // A log write: both answers are in before either tool runs.
          onToolExecutionStart: async () => {
            await new Promise((resolve) => setTimeout(resolve, 5));
          },
        };
        const text =
          mode === "generate"
            ? (await generateText(settings)).text
            : await streamText({ ...settings, onError: () => {} }).text;
        return `${which} answered: ${text}`;
      } catch (err) {
        return `${which} stopped: ${(err as Error).name}`;
      }
    };
    outcomes.push((await Promise.all([loop("one"), loop("two")])).join(" / "));
    await ctx.waitForEvent("go-on");
    return outcomes.at(-1);
  });
  const engine = h.engine([wf]);
  const run = await engine.start(wf, null);
  await waitForStatus(run, "waiting");
  const firstCalls = calls();
  await engine.sendEvent(run.id, "go-on", null);
  const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
  return { outcomes, r, firstCalls, replayCalls: calls() - firstCalls };
}

describe.each(BACKENDS)("%s: two loops at once, alike in tool and call id", (backend) => {
  const harness = useHarness(backend);

  for (const [stopper, mode] of [
    ["one", "generate"],
    ["two", "generate"],
    ["one", "stream"],
    ["two", "stream"],
  ] as const) {
    it(`${mode}: a stop in loop ${stopper}'s tool (timeout.toolMs) stops that loop's replay, and only it`, async () => {
      const h = harness();
      const { outcomes, r, firstCalls, replayCalls } = await twoLoops(
        h,
        `two-loops-${stopper}-${mode}`,
        stopper,
        mode,
      );
      const expected =
        stopper === "one"
          ? "one stopped: AbortError / two answered: the answer"
          : "one answered: the answer / two stopped: AbortError";
      expect(outcomes).toEqual([expected, expected]);
      expect(r).toEqual({ value: expected });
      expect(firstCalls).toBe(3);
      expect(replayCalls).toBe(0); // the replay paid for no model call
    });
  }
});

describe.each(BACKENDS)("%s: a caller's TimeoutError in a tool with timeout.toolMs", (backend) => {
  const harness = useHarness(backend);

  for (const mode of ["generate", "stream"] as const) {
    it(`${mode}: stops the replay's loop where the first execution's stopped`, async () => {
      const h = harness();
      const { wf, outcomes, calls } = loopWorkflow(
        h,
        `caller-timeout-${mode}`,
        mode,
        async (_signal, caller) => {
          // The caller's deadline (AbortSignal.timeout, timeout.totalMs) passes while it runs.
          caller.abort(
            new DOMException("The operation was aborted due to timeout", "TimeoutError"),
          );
          return "found";
        },
        { toolMs: 60_000 },
      );
      const { r } = await loopFirstAndReplay(h, wf);
      const stopped = "stopped: TimeoutError: The operation was aborted due to timeout";
      expect(outcomes).toEqual([stopped, stopped]);
      expect(r).toEqual({ value: stopped });
      expect(calls()).toBe(1);
    });
  }

  it("generate: timeout.totalMs passing while the tool runs stops the replay's loop too", async () => {
    const h = harness();
    const { wf, outcomes, calls } = loopWorkflow(
      h,
      "total-ms-in-tool",
      "generate",
      // Waits until its signal fires: the loop's total timeout passes first (a real timer).
      (signal) =>
        new Promise<string>((_resolve, reject) => {
          signal?.addEventListener("abort", () => reject(signal.reason));
        }),
      { toolMs: 60_000, totalMs: 300 },
    );
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    await waitForStatus(run, "waiting", { timeoutMs: 10_000 });
    const firstCalls = calls();
    await engine.sendEvent(run.id, "go-on", null);
    const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
    expect(outcomes[0]).toMatch(/^stopped: TimeoutError/);
    expect(outcomes[1]).toBe(outcomes[0]);
    expect(r).toEqual({ value: outcomes[0] });
    expect(calls()).toBe(firstCalls); // the replay made no model call
  });

  it("generate: a tool's own timeout (toolMs) that it answers with an error of its own ends no loop, first execution or replay", async () => {
    const h = harness();
    const { wf, outcomes, calls } = loopWorkflow(
      h,
      "own-timeout-own-error",
      "generate",
      (signal) =>
        new Promise<string>((_resolve, reject) => {
          signal?.addEventListener("abort", () => reject(new Error("gave up")));
        }),
      { toolMs: 20 },
    );
    const { r } = await loopFirstAndReplay(h, wf);
    expect(outcomes).toEqual(["answered: the answer", "answered: the answer"]);
    expect(r).toEqual({ value: "answered: the answer" });
    expect(calls()).toBe(2);
  });
});
