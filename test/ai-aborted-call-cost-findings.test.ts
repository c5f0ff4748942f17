// A model call made with a signal that already fired (a loop started again on the caller's
// stopped signal: the SDK reads it only before the second call of a loop) was handed to the
// provider, and its answer thrown away: a provider that does not read the signal before it
// sends (a mock, a custom one) was paid for it, and no spend was recorded.

import { generateText } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { textAnswer } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { firstAndReplay } from "./helpers/ai-tool-loop.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

let unique = 0;

for (const backend of BACKENDS) {
  describe(`a model call made with a fired signal (${backend})`, () => {
    const harness = useHarness(backend);

    it("is not handed to the provider, and ends with the stop, first execution and replay", async () => {
      const h = harness();
      const ai = kitFor(h);
      let calls = 0;
      const model = new MockLanguageModelV4({
        doGenerate: async () => {
          calls++;
          return textAnswer("paid");
        },
      });
      const outcomes: string[] = [];
      const wf = workflow({ name: `fired-${++unique}`, version: "1" }, async (ctx) => {
        const caller = new AbortController();
        caller.abort(); // stopped before (a loop the workflow caught, say)
        let said: string;
        try {
          said = `answered: ${(await generateText({ model: ai.model(ctx, model), prompt: "go", abortSignal: caller.signal })).text}`;
        } catch (err) {
          said = `stopped: ${(err as Error).name}`;
        }
        outcomes.push(said);
        await ctx.waitForEvent("go-on");
        return said;
      });
      const { r } = await firstAndReplay(h, wf);
      expect(outcomes).toEqual(["stopped: AbortError", "stopped: AbortError"]);
      expect(r.value).toBe("stopped: AbortError");
      expect(calls).toBe(0);
    });
  });
}
