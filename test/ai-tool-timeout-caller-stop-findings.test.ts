// A tool with a timeout of its own (the AI SDK's `timeout.toolMs`) is handed
// `AbortSignal.any([loop's signal, its timer])`, while the loop's model calls get the loop's
// signal. The caller's stop recorded by such a tool was marked on the tool's signal alone
// (caller-stop.ts), so a replay, whose loop signal never fired, went on past the stop: it
// began a tool call the first execution never began (toolCallConcurrency's queue), ran
// its body, and made the next model call. Each tool call is now linked to the signal of the
// model call whose answer holds it, and the stop is marked on that too.

import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { workflow } from "../src/index.js";
import { waitForStatus } from "../src/testing/index.js";
import { USAGE } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";

const isToolTurn = (prompt: { role: string }[]) => prompt.some((m) => m.role === "tool");

describe.each(BACKENDS)("%s: a caller's stop in a tool with timeout.toolMs", (backend) => {
  const harness = useHarness(backend);

  it("a tool call the stop kept from starting (toolCallConcurrency) does not run on replay, and the loop ends as it did", async () => {
    const h = harness();
    let modelCalls = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async (o) => {
        modelCalls++;
        const toolTurn = isToolTurn(o.prompt);
        return {
          content: toolTurn
            ? [{ type: "text", text: "the answer" }]
            : ["c1", "c2"].map((id) => ({
                type: "tool-call" as const,
                toolCallId: id,
                toolName: "lookup",
                input: JSON.stringify({ id }),
              })),
          finishReason: { unified: toolTurn ? "stop" : "tool-calls", raw: "x" },
          usage: USAGE,
          warnings: [],
        };
      },
    });
    const ai = kitFor(h);
    const bodies: string[] = [];
    const outcomes: string[] = [];
    const wf = workflow({ name: "tool-ms-stop", version: "1" }, async (ctx) => {
      const caller = new AbortController();
      const tools = ai.tools(ctx, {
        lookup: tool({
          inputSchema: z.object({ id: z.string() }),
          execute: async ({ id }) => {
            bodies.push(id);
            if (id === "c1") caller.abort(); // the user's stop, while c1 runs
            return `found ${id}`;
          },
        }),
      });
      let outcome: string;
      try {
        const r = await generateText({
          model: ai.model(ctx, model),
          tools,
          stopWhen: stepCountIs(3),
          prompt: "go",
          abortSignal: caller.signal,
          toolCallConcurrency: 1,
          timeout: { toolMs: 60_000 },
        });
        outcome = `answered: ${r.text}`;
      } catch (err) {
        outcome = `stopped: ${(err as Error).name}`;
      }
      outcomes.push(outcome);
      await ctx.waitForEvent("go-on");
      return outcome;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    await waitForStatus(run, "waiting");
    await engine.sendEvent(run.id, "go-on", null);
    const result = await advanceUntil(h.clock, run.result(), 1_000, 100);
    expect(outcomes).toEqual(["stopped: AbortError", "stopped: AbortError"]);
    expect(result).toBe("stopped: AbortError");
    expect(bodies).toEqual(["c1"]);
    expect(modelCalls).toBe(1);
  });
});
