// A caller's stop landing as a generateText loop's model call is recorded, the answer's
// tool calls failing their schema and handed to `repairToolCall`: the SDK waits for the
// repair with its signal, which rejected at once in the first execution (the stop had
// landed) and never in a replay (its signal does not fire). The replay ran the repaired
// tool call where the journal held the loop's next model call, and was refused. The wait
// is now told the signal has not fired (stop-after-record.ts), and the repaired calls record
// the stop, as their replay finds them.

import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { type Store, workflow } from "../src/index.js";
import { waitForStatus } from "../src/testing/index.js";
import { USAGE } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { settle } from "./helpers/ai-tool-loop.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";

/** `store`, with `onWrite` called as a write holding a model call's record is sent. */
function storeHooked(store: Store, onWrite: () => void): Store {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver);
      if (typeof v !== "function") return v;
      if (prop !== "appendRecords") return v.bind(target);
      return (writes: Parameters<Store["appendRecords"]>[0]) => {
        if (writes.some((w) => w.steps?.some((s) => s.name.startsWith("model:")))) onWrite();
        return (v as Store["appendRecords"]).call(target, writes);
      };
    },
  });
}

/** Turn 1 calls `lookup` once per input; turn 2 answers "the answer". */
function inputsModel(inputs: unknown[]) {
  let calls = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async (o) => {
      calls++;
      const toolTurn = o.prompt.some((m) => m.role === "tool");
      return {
        content: toolTurn
          ? [{ type: "text", text: "the answer" }]
          : inputs.map((input, i) => ({
              type: "tool-call" as const,
              toolCallId: `c${i + 1}`,
              toolName: "lookup",
              input: JSON.stringify(input),
            })),
        finishReason: { unified: toolTurn ? "stop" : "tool-calls", raw: "x" },
        usage: USAGE,
        warnings: [],
      };
    },
  });
  return { model, calls: () => calls };
}

let unique = 0;

for (const backend of BACKENDS) {
  describe(`a stop landing as the model call is recorded, its tool calls repaired (${backend})`, () => {
    const harness = useHarness(backend);

    async function stopAtRepair(
      inputs: unknown[],
      repair: (id: unknown) => string | null,
      toolCallConcurrency?: number,
    ) {
      const h = harness();
      const { model, calls } = inputsModel(inputs);
      const ai = kitFor(h);
      const outcomes: string[] = [];
      const bodies: string[] = [];
      const repairs: string[] = [];
      let caller = new AbortController();
      let armed = true;
      const wf = workflow({ name: `repair-${++unique}`, version: "1" }, async (ctx) => {
        caller = new AbortController();
        const tools = ai.tools(ctx, {
          lookup: tool({
            inputSchema: z.object({ id: z.string() }),
            execute: async ({ id }) => {
              bodies.push(id);
              return `found ${id}`;
            },
          }),
        });
        try {
          const r = await generateText({
            model: ai.model(ctx, model),
            tools,
            prompt: "go",
            abortSignal: caller.signal,
            stopWhen: stepCountIs(3),
            ...(toolCallConcurrency ? { toolCallConcurrency } : {}),
            repairToolCall: async ({ toolCall }) => {
              repairs.push(toolCall.toolCallId);
              const input = repair(JSON.parse(toolCall.input).id);
              return input === null ? null : { ...toolCall, input };
            },
          });
          outcomes.push(`answered: ${r.text}`);
        } catch (err) {
          outcomes.push(`stopped: ${(err as Error).name}: ${(err as Error).message}`);
        }
        await ctx.waitForEvent("go-on");
        return outcomes.at(-1);
      });
      const engine = h.engine([wf], {
        replayStallMs: 3_000,
        store: storeHooked(h.store(), () => {
          if (!armed) return;
          armed = false;
          caller.abort(); // the user's stop, as the model call's record is written
        }),
      });
      const run = await engine.start(wf, null);
      await waitForStatus(run, "waiting");
      const firstCalls = calls();
      const firstBodies = [...bodies];
      await engine.sendEvent(run.id, "go-on", null);
      const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
      expect(r.error).toBeUndefined();
      expect(outcomes[0]).toMatch(/^stopped: AbortError/);
      expect(outcomes[1]).toBe(outcomes[0]);
      expect(firstCalls).toBe(1);
      expect(calls()).toBe(1); // the replay pays for no model call
      expect(firstBodies).toEqual([]);
      expect(bodies).toEqual([]); // no tool ran, in either execution
      return { repairs };
    }

    const fixed = () => JSON.stringify({ id: "repaired" });

    it("two tool calls, both repaired, run at once", async () => {
      const { repairs } = await stopAtRepair([{ id: 1 }, { id: 2 }], fixed);
      expect(repairs).toEqual(["c1", "c2", "c1", "c2"]); // the replay repairs as the first did
    });

    it("two tool calls, both repaired, toolCallConcurrency 1", () =>
      stopAtRepair([{ id: 1 }, { id: 2 }], fixed, 1));

    it("one valid tool call beside one repaired", () =>
      stopAtRepair([{ id: "ok" }, { id: 2 }], fixed));

    it("one repaired, one the repair gives up on (null)", () =>
      stopAtRepair([{ id: 1 }, { id: 2 }], (id) => (id === 1 ? fixed() : null)));
  });
}
