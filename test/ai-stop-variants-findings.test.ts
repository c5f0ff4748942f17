// Variants of a caller's stop landing as a generateText loop's call is being recorded (the
// first execution only: a replay's signal never fires): where it lands, the loop's timeouts,
// its tool queue, and a loop the workflow starts again on the same signal. Each replay must
// end where its first execution ended, and pay for no model call.

import { generateText, type ModelMessage, stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { type Store, workflow } from "../src/index.js";
import { waitForStatus } from "../src/testing/index.js";
import { USAGE } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { settle } from "./helpers/ai-tool-loop.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";

/** `store`, with `onWrite` called as a write holding a step whose name starts with
 *  `prefix` is sent (before it is durable). */
function storeHooked(store: Store, prefix: string, onWrite: () => void): Store {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver);
      if (typeof v !== "function") return v;
      if (prop !== "appendRecords") return v.bind(target);
      return (writes: Parameters<Store["appendRecords"]>[0]) => {
        if (writes.some((w) => w.steps?.some((s) => s.name.startsWith(prefix)))) onWrite();
        return (v as Store["appendRecords"]).call(target, writes);
      };
    },
  });
}

/** Turn 1 calls `lookup` `n` times (ids c1..cn); turn 2 answers "the answer". */
function toolsModel(n: number, invalid = false) {
  let calls = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async (o) => {
      calls++;
      const toolTurn = o.prompt.some((m) => m.role === "tool");
      return {
        content: toolTurn
          ? [{ type: "text", text: "the answer" }]
          : Array.from({ length: n }, (_, i) => ({
              type: "tool-call" as const,
              toolCallId: `c${i + 1}`,
              toolName: "lookup",
              input: JSON.stringify({ id: invalid ? i : `c${i + 1}` }),
            })),
        finishReason: { unified: toolTurn ? "stop" : "tool-calls", raw: "x" },
        usage: USAGE,
        warnings: [],
      };
    },
  });
  return { model, calls: () => calls };
}

interface Variant {
  /** How many tool calls turn 1 makes. */
  tools?: number;
  /** The name prefix of the write the stop lands at. */
  at?: string;
  settings?: {
    timeout?: { totalMs?: number; toolMs?: number };
    toolCallConcurrency?: number;
    repairToolCall?: Parameters<typeof generateText>[0]["repairToolCall"];
  };
  /** Steps of the first loop (stepCountIs). */
  steps?: number;
  /** After the first loop, a second generateText on the same signal: "prompt" (a new one)
   *  or "continue" (the first loop's messages). */
  again?: "prompt" | "continue";
  /** Turn 1's tool call inputs fail the tool's schema. */
  invalidInput?: boolean;
  /** Tool bodies but c1's end only once the stop landed. */
  laterTools?: boolean;
}

let unique = 0;

for (const backend of BACKENDS) {
  describe(`a caller's stop landing at a record, variants (${backend})`, () => {
    const harness = useHarness(backend);

    async function stopAt(h: Harness, v: Variant) {
      const { model, calls } = toolsModel(v.tools ?? 1, v.invalidInput);
      const ai = kitFor(h);
      const outcomes: string[] = [];
      const bodies: string[] = [];
      let caller = new AbortController();
      let armed = true;
      let landed: () => void = () => {};
      const wf = workflow({ name: `variant-${++unique}`, version: "1" }, async (ctx) => {
        caller = new AbortController();
        const stopped = new Promise<void>((resolve) => {
          landed = resolve;
        });
        const tools = ai.tools(ctx, {
          lookup: tool({
            inputSchema: z.object({ id: z.string() }),
            execute: async ({ id }) => {
              bodies.push(id);
              if (v.laterTools && id !== "c1") await stopped;
              return `found ${id}`;
            },
          }),
        });
        const settings = {
          model: ai.model(ctx, model),
          tools,
          prompt: "go",
          abortSignal: caller.signal,
          ...v.settings,
          stopWhen: stepCountIs(v.steps ?? 3),
        };
        const said: string[] = [];
        let messages: ModelMessage[] = [];
        try {
          const r = await generateText(settings);
          messages = [{ role: "user", content: "go" }, ...r.response.messages];
          said.push(`answered: ${r.text}`);
        } catch (err) {
          said.push(`stopped: ${(err as Error).name}`);
        }
        if (v.again) {
          const { prompt: _p, ...rest } = settings;
          try {
            const r = await generateText(
              (v.again === "continue"
                ? { ...rest, messages }
                : { ...rest, prompt: "again" }) as Parameters<typeof generateText>[0],
            );
            said.push(`answered: ${r.text}`);
          } catch (err) {
            said.push(`stopped: ${(err as Error).name}`);
          }
        }
        outcomes.push(said.join(" / "));
        await ctx.waitForEvent("go-on");
        return outcomes.at(-1);
      });
      const engine = h.engine([wf], {
        replayStallMs: 3_000,
        store: storeHooked(h.store(), v.at ?? "tool:", () => {
          if (!armed) return;
          armed = false;
          caller.abort(); // the user's stop, as the record is written
          setImmediate(() => landed());
        }),
      });
      const run = await engine.start(wf, null);
      await waitForStatus(run, "waiting");
      const firstCalls = calls();
      const firstBodies = [...bodies];
      await engine.sendEvent(run.id, "go-on", null);
      const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
      return {
        outcomes,
        r,
        firstCalls,
        replayCalls: calls() - firstCalls,
        firstBodies,
        replayBodies: bodies.slice(firstBodies.length),
      };
    }

    async function expectReplayAlike(v: Variant) {
      const x = await stopAt(harness(), v);
      expect(x.r.error).toBeUndefined();
      expect(x.outcomes[0]).toMatch(/stopped: AbortError/);
      expect(x.outcomes[1]).toBe(x.outcomes[0]);
      expect(x.replayCalls).toBe(0);
      expect(x.replayBodies).toEqual([]); // no tool the first execution did not run
      return x;
    }

    it("the stop landing as the first model call is recorded", () =>
      expectReplayAlike({ at: "model:" }));

    // The SDK reads its signal as it parses a tool call whose input fails the tool's schema
    // (parseToolCall's catch): a stop landing as the model call's record is written ends the
    // loop there, where no cairn code runs, and nothing records it. The replay, whose signal
    // has not fired, hands the model the tool's input error and makes the next model call:
    // paid, answered where the first execution stopped.
    it("the stop landing as the model call is recorded, its tool call's input invalid", () =>
      expectReplayAlike({ at: "model:", invalidInput: true }));

    // NOT MENDED (loud now, silent before): with a repair function the SDK waits for the
    // repair with its signal (waitForPromiseWithAbortSignal), which rejects at once in the
    // first execution (the stop landed): the call stays invalid, and the loop's next call
    // records the stop. The replay's signal has not fired: its repair succeeds and it makes
    // the repaired tool call where the journal holds that next model call, and is refused
    // (NonDeterminismError). Before the 2026-12-07 mend the check before the repair threw,
    // unrecorded, and the replay ran the repaired tool (a body the first execution never
    // ran) and made the next model call, paid, answering where the first execution stopped.
    // Mending it needs the replay to fail the repair as the first execution did: nothing
    // recorded before the repair says the stop had landed.
    it("the stop landing as the model call is recorded, its tool call's input repaired", () =>
      expectReplayAlike({
        at: "model:",
        invalidInput: true,
        settings: {
          repairToolCall: async ({ toolCall }) => ({
            ...toolCall,
            input: JSON.stringify({ id: "repaired" }),
          }),
        },
      }));

    it("timeout.totalMs: the loop's merged signal", () =>
      expectReplayAlike({ settings: { timeout: { totalMs: 600_000 } } }));

    it("timeout.toolMs: the tool's own signal", () =>
      expectReplayAlike({ settings: { timeout: { toolMs: 600_000 } } }));

    for (const toolCallConcurrency of [1, 2, undefined]) {
      it(`three tool calls, toolCallConcurrency ${toolCallConcurrency ?? "unbounded"}, the others ending after the stop`, () =>
        expectReplayAlike({
          tools: 3,
          laterTools: true,
          settings: toolCallConcurrency ? { toolCallConcurrency } : {},
        }));
    }

    // With toolCallConcurrency 2, the first execution's queue started one tool call after
    // the stop (its check let go on once) and then stopped; the replay's queue, whose signal
    // has not fired, starts two at once, and the second, with no record and begun before the
    // first's recorded stop was handed back, ran its body: a tool the first execution never
    // ran. Each queue check now goes on while the turn has tool calls not begun, each
    // recording the stop (no body), as the replay's queue starts them all.
    for (const toolCallConcurrency of [1, 2, undefined]) {
      it(`the stop landing as the model call is recorded, three tool calls, toolCallConcurrency ${toolCallConcurrency ?? "unbounded"}`, () =>
        expectReplayAlike({
          at: "model:",
          tools: 3,
          settings: toolCallConcurrency ? { toolCallConcurrency } : {},
        }));
    }

    // The same at a tool's record: two tool calls end before the stop, and the queue's
    // two checks begin c3 and c4 in the replay.
    it("four tool calls, toolCallConcurrency 2, the stop landing at the first two's records", () =>
      expectReplayAlike({ tools: 4, settings: { toolCallConcurrency: 2 } }));

    for (const again of ["prompt", "continue"] as const) {
      it(`a second generateText on the stopped signal (${again})`, () =>
        expectReplayAlike({ again }));

      it(`a loop ending on its own as the stop lands, then a second generateText on its signal (${again})`, async () => {
        const x = await stopAt(harness(), { steps: 1, again });
        expect(x.r.error).toBeUndefined();
        expect(x.outcomes[0]).toMatch(/^answered: {2}\/ stopped: AbortError$/);
        expect(x.outcomes[1]).toBe(x.outcomes[0]);
        expect(x.replayCalls).toBe(0);
      });
    }
  });
}
