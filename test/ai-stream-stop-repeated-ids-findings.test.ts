// A streamed loop's stop recorded apart (src/ai/stream-stop.ts), in a loop whose provider
// numbers tool call ids alike on every turn (call_0): the stop that landed as turn 2's
// call_0 was recorded must stop the replay at turn 2, not at turn 1's call_0.

import { stepCountIs, streamText, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { type Store, workflow } from "../src/index.js";
import { waitForStatus } from "../src/testing/index.js";
import { kitFor } from "./helpers/ai.js";
import { answerParts, settle, streamed, toolCallParts } from "./helpers/ai-tool-loop.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";

/** `store`, with `onWrite` called as a write holding the step keyed `key` is sent. */
function storeHooked(store: Store, key: string, onWrite: () => void): Store {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver);
      if (typeof v !== "function") return v;
      if (prop !== "appendRecords") return v.bind(target);
      return (writes: Parameters<Store["appendRecords"]>[0]) => {
        if (writes.some((w) => w.steps?.some((s) => s.key === key))) onWrite();
        return (v as Store["appendRecords"]).call(target, writes);
      };
    },
  });
}

/** Turns 1 and 2 each stream one call of `lookup`, id "call_0"; turn 3 "the answer". */
function sameIdModel() {
  let calls = 0;
  const model = new MockLanguageModelV4({
    doStream: async (o) => {
      calls++;
      const results = o.prompt.filter((m) => m.role === "tool").length;
      return streamed(
        results >= 2 ? answerParts() : toolCallParts([{ id: "call_0", input: "{}" }]),
      );
    },
  });
  return { model, calls: () => calls };
}

let unique = 0;

for (const backend of BACKENDS) {
  describe(`a streamed loop's stop, tool call ids alike on every turn (${backend})`, () => {
    const harness = useHarness(backend);

    it("the stop at turn 2's call_0 stops the replay at turn 2", async () => {
      const h = harness();
      const { model, calls } = sameIdModel();
      const ai = kitFor(h);
      const outcomes: string[] = [];
      let bodies = 0;
      let caller = new AbortController();
      let armed = true;
      const wf = workflow({ name: `same-id-${++unique}`, version: "1" }, async (ctx) => {
        caller = new AbortController();
        const tools = ai.tools(ctx, {
          lookup: tool({
            inputSchema: z.object({}),
            execute: async () => `found ${++bodies}`,
          }),
        });
        let first: string;
        try {
          const text = await streamText({
            model: ai.model(ctx, model),
            tools,
            prompt: "go",
            abortSignal: caller.signal,
            stopWhen: stepCountIs(5),
            onError: () => {},
          }).text;
          first = `answered: ${text}`;
        } catch (err) {
          first = `stopped: ${(err as Error).name}`;
        }
        const n = await ctx.step("between", async () => 7);
        outcomes.push(`${first} / ${n}`);
        await ctx.waitForEvent("go-on");
        return outcomes.at(-1);
      });
      const engine = h.engine([wf], {
        replayStallMs: 3_000,
        store: storeHooked(h.store(), "tool:lookup:call_0#2", () => {
          if (!armed) return;
          armed = false;
          caller.abort();
        }),
      });
      const run = await engine.start(wf, null);
      await waitForStatus(run, "waiting");
      expect(calls()).toBe(2);
      await engine.sendEvent(run.id, "go-on", null);
      const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
      expect(r.error).toBeUndefined();
      expect(outcomes[0]).toBe("stopped: AbortError / 7");
      expect(outcomes[1]).toBe(outcomes[0]);
      expect(calls()).toBe(2);
      expect(bodies).toBe(2);
    });
  });
}
