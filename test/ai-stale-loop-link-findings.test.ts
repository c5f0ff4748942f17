// cairn/ai links each tool call to the signal of the model call whose answer holds it
// (caller-stop.ts, noteLoopSignal), by tool name and call id, and takes the link when the
// tool call is made. A tool call the SDK never made (its input failed the tool's schema, so
// the SDK answered the model with a tool error itself) left its link behind; a later loop of
// the same run whose answer reuses that id (providers number calls per answer: `call_0`)
// found two signals and linked the call to none. A caller's stop in that tool, given a
// signal of its own by `timeout.toolMs`, then did not stop the replay's loop: the replay
// made the model call the first execution never made, and answered where it had stopped.

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
const asks = (prompt: { role: string; content: unknown }[], text: string) =>
  JSON.stringify(prompt).includes(text);

describe.each(BACKENDS)("%s: a tool call's link to its loop", (backend) => {
  const harness = useHarness(backend);

  it("a link a tool call never made left behind does not keep a later loop's stop from its replay", async () => {
    const h = harness();
    let modelCalls = 0;
    const model = new MockLanguageModelV4({
      doGenerate: async (o) => {
        modelCalls++;
        const toolTurn = isToolTurn(o.prompt);
        // Loop one's call_0 fails the tool's schema; loop two's is valid.
        const input = asks(o.prompt, "loop one") ? '{"wrong":1}' : '{"id":"x"}';
        return {
          content: toolTurn
            ? [{ type: "text", text: "the answer" }]
            : [{ type: "tool-call" as const, toolCallId: "call_0", toolName: "lookup", input }],
          finishReason: { unified: toolTurn ? "stop" : "tool-calls", raw: "x" },
          usage: USAGE,
          warnings: [],
        };
      },
    });
    const ai = kitFor(h);
    const outcomes: string[] = [];
    const wf = workflow({ name: "stale-loop-link", version: "1" }, async (ctx) => {
      const loop = async (prompt: string) => {
        const caller = new AbortController();
        const tools = ai.tools(ctx, {
          lookup: tool({
            inputSchema: z.object({ id: z.string() }),
            execute: async ({ id }) => {
              caller.abort(); // the user's stop, while the tool runs
              return `found ${id}`;
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
            timeout: { toolMs: 60_000 },
          });
          return `answered: ${r.text}`;
        } catch (err) {
          return `stopped: ${(err as Error).name}`;
        }
      };
      const one = await loop("loop one");
      const two = await loop("loop two");
      outcomes.push(`${one} / ${two}`);
      await ctx.waitForEvent("go-on");
      return two;
    });
    const engine = h.engine([wf]);
    const run = await engine.start(wf, null);
    await waitForStatus(run, "waiting");
    expect(outcomes).toEqual(["answered: the answer / stopped: AbortError"]);
    const callsBefore = modelCalls;
    await engine.sendEvent(run.id, "go-on", null);
    const result = await advanceUntil(h.clock, run.result(), 1_000, 100);
    expect(outcomes[1]).toBe(outcomes[0]);
    expect(result).toBe("stopped: AbortError");
    expect(modelCalls).toBe(callsBefore); // the replay paid for no model call
  });
});
