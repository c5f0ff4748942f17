// A caller's stop landing while a loop is between its steps (in onStepFinish): the SDK
// stops the loop before its next model call, and nothing of it is recorded there. The stop
// comes from another loop's tool (a's), whose record says CALLER_ABORTED, and is marked on
// its signal when that record is handed over (caller-stop.ts). A loop (b) whose signal
// follows the caller's through AbortSignal.any was not marked: its replay made the model
// call its first execution never made, under the next number of the model's name, and was
// handed the next call's record: the run's call continuing b's conversation after the stop
// (a silent swap: b "answered" with that call's answer, which then paid for a new one),
// or, for another request, a false NonDeterminismError. So did a loop of the caller's very
// signal when a's loop had `timeout.totalMs`: a's stop was marked on the SDK's
// AbortSignal.any([caller's, its timer]) alone.

import { generateText, type ModelMessage, stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { workflow } from "../src/index.js";
import { waitForStatus } from "../src/testing/index.js";
import { USAGE } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { settle } from "./helpers/ai-tool-loop.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";

const isToolTurn = (prompt: { role: string }[]) => prompt.some((m) => m.role === "tool");
const realDelay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Turn 1 calls `lookup` ("call-1"), a tool turn or a "final" prompt answers "answer #<n>",
 *  n counting calls. */
function numberedModel() {
  let calls = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async (o) => {
      calls++;
      const text = JSON.stringify(o.prompt).includes("final") || isToolTurn(o.prompt);
      return {
        content: text
          ? [{ type: "text", text: `answer #${calls}` }]
          : [{ type: "tool-call" as const, toolCallId: "call-1", toolName: "lookup", input: "{}" }],
        finishReason: { unified: text ? "stop" : "tool-calls", raw: "x" },
        usage: USAGE,
        warnings: [],
      };
    },
  });
  return { model, calls: () => calls };
}

interface Shape {
  /** b's signal: the caller's itself, or one following it (AbortSignal.any). */
  bSignal: "same" | "any";
  /** How long a's tool runs on after its stop. */
  cleanupMs: number;
  /** How long b's log step (in its onStepFinish) runs on after the stop. */
  logMs: number;
  /** a's loop has `timeout.totalMs` (its calls' and tools' signal then follows the
   *  caller's and the SDK's timer). */
  aTotalMs?: boolean;
  /** The run's call after both loops: a prompt of its own, or b's conversation continued. */
  after: "final" | "continue-b";
}

/** Loops a and b at once over one model, then another call of it. a's tool stops the
 *  caller's controller once b's tool has ended (b is in onStepFinish, logging its step). */
async function stopInOnStepFinish(h: Harness, name: string, shape: Shape) {
  const { model, calls } = numberedModel();
  const ai = kitFor(h);
  const outcomes: string[] = [];
  const wf = workflow({ name, version: "1" }, async (ctx) => {
    const caller = new AbortController();
    const own = new AbortController();
    let bInLog!: () => void;
    const bLogging = new Promise<void>((resolve) => {
      bInLog = resolve;
    });
    const stopped = new Promise<void>((resolve) => {
      caller.signal.addEventListener("abort", () => resolve(), { once: true });
    });
    const bSoFar: ModelMessage[] = [{ role: "user", content: "loop b" }];
    const toolsOf = (which: "a" | "b") =>
      ai.tools(
        ctx,
        {
          lookup: tool({
            inputSchema: z.object({}),
            execute: async () => {
              if (which === "a") {
                await bLogging;
                caller.abort(); // the user's stop, while a's tool runs
                await realDelay(shape.cleanupMs);
              }
              return `found by ${which}`;
            },
          }),
        },
        { name: which },
      );
    const bTools = toolsOf("b");
    const loop = async (which: "a" | "b", signal: AbortSignal) => {
      try {
        const r = await generateText({
          model: ai.model(ctx, model),
          tools: which === "a" ? toolsOf("a") : bTools,
          stopWhen: stepCountIs(3),
          messages: which === "a" ? [{ role: "user", content: "loop a" }] : [...bSoFar],
          abortSignal: signal,
          ...(which === "a" && shape.aTotalMs ? { timeout: { totalMs: 600_000 } } : {}),
          onStepFinish: async (s) => {
            if (which !== "b") return;
            bSoFar.push(...s.response.messages);
            bInLog(); // b's tool has ended: a's tool stops the caller now
            // Once the stop has landed (a second log, made only if b went on, ends anyway).
            const landed = Promise.race([stopped, realDelay(1_000)]);
            const log = () => landed.then(() => realDelay(shape.logMs)).then(() => 1);
            await ctx.step("log-b", log); // a slow log write, as a step
          },
        });
        return `${which} answered: ${r.text}`;
      } catch (err) {
        return `${which} stopped: ${(err as Error).name}`;
      }
    };
    const both = await Promise.all([
      loop("a", caller.signal),
      loop(
        "b",
        shape.bSignal === "same" ? caller.signal : AbortSignal.any([caller.signal, own.signal]),
      ),
    ]);
    // After the stop, the run goes on: a call of its own, or b's conversation so far.
    const then =
      shape.after === "final"
        ? await generateText({ model: ai.model(ctx, model), prompt: "final" })
        : await generateText({
            model: ai.model(ctx, model),
            tools: bTools,
            stopWhen: stepCountIs(3),
            messages: [...bSoFar],
          });
    outcomes.push(`${both.join(" / ")} / then: ${then.text}`);
    await ctx.waitForEvent("go-on");
    return outcomes.at(-1);
  });
  const engine = h.engine([wf]);
  const run = await engine.start(wf, null);
  await waitForStatus(run, "waiting", { timeoutMs: 10_000 });
  const firstCalls = calls();
  await engine.sendEvent(run.id, "go-on", null);
  const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
  return { outcomes, r, replayCalls: calls() - firstCalls };
}

describe.each(BACKENDS)(
  "%s: a caller's stop landing while a loop is in onStepFinish",
  (backend) => {
    const harness = useHarness(backend);
    const expected = "a stopped: AbortError / b stopped: AbortError / then: answer #3";

    const shapes: Array<[string, Shape]> = [
      ["b's signal is the caller's", { bSignal: "same", cleanupMs: 0, logMs: 100, after: "final" }],
      [
        "b's signal follows the caller's (AbortSignal.any), the run then calls the model anew",
        { bSignal: "any", cleanupMs: 0, logMs: 100, after: "final" },
      ],
      [
        "b's signal follows the caller's (AbortSignal.any), the run then continues b's conversation",
        { bSignal: "any", cleanupMs: 0, logMs: 100, after: "continue-b" },
      ],
      [
        "a's loop has timeout.totalMs, b's signal is the caller's, the run then calls the model anew",
        { bSignal: "same", cleanupMs: 0, logMs: 100, aTotalMs: true, after: "final" },
      ],
      [
        "a's loop has timeout.totalMs, b's signal is the caller's, the run then continues b's conversation",
        { bSignal: "same", cleanupMs: 0, logMs: 100, aTotalMs: true, after: "continue-b" },
      ],
    ];
    for (const [title, shape] of shapes) {
      it(`${title}: b stays stopped on replay, and the replay pays for no call`, async () => {
        const h = harness();
        const name = `composite-stop-${shape.bSignal}-${shape.aTotalMs ? "total-" : ""}${shape.after}`;
        const { outcomes, r, replayCalls } = await stopInOnStepFinish(h, name, shape);
        expect(outcomes[0]).toBe(expected);
        expect(r).toEqual({ value: expected });
        expect(outcomes[1]).toBe(expected);
        expect(replayCalls).toBe(0);
      });
    }
  },
);
