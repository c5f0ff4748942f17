// A replay stops a tool loop where the caller's abort stopped it in the first execution
// (caller-stop.ts): the model call the SDK then makes with the loop's signal fails with that
// abort. It was made as a step, and so took the next number of the model's name
// (model:x#2), whose record belongs to the next call of that model in the first execution:
// the run's next generateText, or another loop's turn. The replay handed the stopped loop
// that call's answer when its request was alike (the conversation so far, continued after
// the stop), and the next call made a new, paid model call: the run ended with another
// output, silently. Otherwise it failed with NonDeterminismError though nothing changed.
// The stopped call now fails before its step, and takes no number.

import { generateText, type ModelMessage, stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { type WorkflowContext, workflow } from "../src/index.js";
import { waitForStatus } from "../src/testing/index.js";
import { USAGE } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { settle } from "./helpers/ai-tool-loop.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";

const isToolTurn = (prompt: { role: string }[]) => prompt.some((m) => m.role === "tool");

/** Turn 1 calls `lookup` (id "call-1"); turn 2 answers "answer #<n>", n counting calls. */
function numberedModel() {
  let calls = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async (o) => {
      calls++;
      const toolTurn = isToolTurn(o.prompt);
      return {
        content: toolTurn
          ? [{ type: "text", text: `answer #${calls}` }]
          : [{ type: "tool-call" as const, toolCallId: "call-1", toolName: "lookup", input: "{}" }],
        finishReason: { unified: toolTurn ? "stop" : "tool-calls", raw: "x" },
        usage: USAGE,
        warnings: [],
      };
    },
  });
  return { model, calls: () => calls };
}

type Body = (
  ctx: WorkflowContext,
  ai: ReturnType<typeof kitFor>,
  model: MockLanguageModelV4,
) => Promise<string>;

/** Runs `body` to its wait, replays it (an event), and returns both outcomes and the model
 *  calls each execution made. */
async function firstAndReplay(h: Harness, name: string, body: Body) {
  const { model, calls } = numberedModel();
  const ai = kitFor(h);
  const outcomes: string[] = [];
  const wf = workflow({ name, version: "1" }, async (ctx) => {
    outcomes.push(await body(ctx, ai, model));
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

/** A loop over `lookup`, whose tool aborts the loop's signal when `stops`. */
async function loop(
  ctx: WorkflowContext,
  ai: ReturnType<typeof kitFor>,
  model: MockLanguageModelV4,
  prompt: string,
  stops: boolean,
): Promise<string> {
  const caller = new AbortController();
  const tools = ai.tools(ctx, {
    lookup: tool({
      inputSchema: z.object({}),
      execute: async () => {
        if (stops) caller.abort(); // the user's stop, while the tool runs
        return "found";
      },
    }),
  });
  try {
    const r = await generateText({
      model: ai.model(ctx, model),
      tools,
      stopWhen: stepCountIs(3),
      prompt,
      abortSignal: caller.signal,
    });
    return `${prompt} answered: ${r.text}`;
  } catch (err) {
    return `${prompt} stopped: ${(err as Error).name}`;
  }
}

describe.each(BACKENDS)("%s: the call a caller's stop kept a loop from making", (backend) => {
  const harness = useHarness(backend);

  it("does not take the answer of the conversation continued after the stop", async () => {
    const h = harness();
    const { outcomes, r, firstCalls, replayCalls } = await firstAndReplay(
      h,
      "stop-then-continue",
      async (ctx, ai, model) => {
        const caller = new AbortController();
        const tools = ai.tools(ctx, {
          lookup: tool({
            inputSchema: z.object({}),
            execute: async () => {
              caller.abort();
              return "found";
            },
          }),
        });
        const sofar: ModelMessage[] = [{ role: "user", content: "hello" }];
        const settings = { model: ai.model(ctx, model), tools, stopWhen: stepCountIs(3) };
        let first: string;
        try {
          const r1 = await generateText({
            ...settings,
            messages: sofar,
            abortSignal: caller.signal,
            onStepFinish: (s) => {
              sofar.push(...s.response.messages);
            },
          });
          first = `answered: ${r1.text}`;
        } catch (err) {
          first = `stopped: ${(err as Error).name}`;
        }
        // The user stopped the loop: go on from the conversation so far.
        const r2 = await generateText({ ...settings, messages: [...sofar] });
        return `${first} / then: ${r2.text}`;
      },
    );
    expect(outcomes[0]).toBe("stopped: AbortError / then: answer #2");
    expect(outcomes[1]).toBe(outcomes[0]);
    expect(r).toEqual({ value: outcomes[0] });
    expect(firstCalls).toBe(2);
    expect(replayCalls).toBe(0);
  });

  it("a later call of the same model replays (the run's next loop, after a step)", async () => {
    const h = harness();
    const { outcomes, r, replayCalls } = await firstAndReplay(
      h,
      "stop-then-next-loop",
      async (ctx, ai, model) => {
        const one = await loop(ctx, ai, model, "one", true);
        const n = await ctx.step("between", async () => 7);
        const two = await loop(ctx, ai, model, "two", false);
        return `${one} / ${n} / ${two}`;
      },
    );
    expect(outcomes[0]).toBe("one stopped: AbortError / 7 / two answered: answer #3");
    expect(r).toEqual({ value: outcomes[0] });
    expect(outcomes[1]).toBe(outcomes[0]);
    expect(replayCalls).toBe(0);
  });

  it("a loop running beside the stopped one replays (Promise.all)", async () => {
    const h = harness();
    const { outcomes, r, replayCalls } = await firstAndReplay(
      h,
      "stop-beside-loop",
      async (ctx, ai, model) =>
        (
          await Promise.all([loop(ctx, ai, model, "one", true), loop(ctx, ai, model, "two", false)])
        ).join(" / "),
    );
    expect(outcomes[0]).toBe("one stopped: AbortError / two answered: answer #3");
    expect(r).toEqual({ value: outcomes[0] });
    expect(outcomes[1]).toBe(outcomes[0]);
    expect(replayCalls).toBe(0);
  });
});
