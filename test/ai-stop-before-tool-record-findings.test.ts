// A caller's stop that lands before the stopping tool call's record is written: the SDK
// reads its signal where no cairn call is in flight, so no record says the loop stopped.
// The first execution stops; its replay (after a wait) must stop at the same place, with
// the same outcome, without refusing the run and without a second (paid) model call.

import { generateText, stepCountIs, streamText, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { effectTool } from "../src/ai/index.js";
import { type Store, workflow } from "../src/index.js";
import { waitForStatus } from "../src/testing/index.js";
import { USAGE } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { oneToolModel, settle } from "./helpers/ai-tool-loop.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";

/** `store`, with `onToolRecord` called as a write holding a tool call's record is sent
 *  (before it is durable): the moment a stop lands between a tool's end and its record. */
function storeHooked(store: Store, onToolRecord: () => void): Store {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver);
      if (typeof v !== "function") return v;
      if (prop !== "appendRecords") return v.bind(target); // its private fields are the target's
      return (writes: Parameters<Store["appendRecords"]>[0]) => {
        if (writes.some((w) => w.steps?.some((s) => s.name.startsWith("tool:")))) onToolRecord();
        return (v as Store["appendRecords"]).call(target, writes);
      };
    },
  });
}

type Mode = "generate" | "stream";

async function runLoop(
  mode: Mode,
  settings: Parameters<typeof generateText>[0] & Parameters<typeof streamText>[0],
) {
  try {
    const text =
      mode === "generate"
        ? (await generateText(settings)).text
        : await streamText({ ...settings, onError: () => {} }).text;
    return `answered: ${text}`;
  } catch (err) {
    return `stopped: ${(err as Error).name}: ${(err as Error).message}`;
  }
}

let unique = 0;

for (const backend of BACKENDS) {
  describe(`cairn/ai: a caller's stop landing before the tool's record (${backend})`, () => {
    const harness = useHarness(backend);

    /** A loop whose stop lands as its tool's record is written (first execution only),
     *  then a step and a second conversation of the same model; replayed by an event. */
    async function stopAtRecord(h: Harness, mode: Mode, steps = 3, then = true) {
      const { model, calls } = oneToolModel();
      const ai = kitFor(h);
      const outcomes: string[] = [];
      let caller = new AbortController();
      let armed = true;
      const wf = workflow(
        { name: `stop-at-record-${mode}-${++unique}`, version: "1" },
        async (ctx) => {
          caller = new AbortController();
          const tools = ai.tools(ctx, {
            lookup: tool({ inputSchema: z.object({}), execute: async () => "found" }),
          });
          const base = { model: ai.model(ctx, model), tools, stopWhen: stepCountIs(3) };
          const first = await runLoop(mode, {
            ...base,
            prompt: "go",
            abortSignal: caller.signal,
            stopWhen: stepCountIs(steps),
          });
          const n = await ctx.step("between", async () => 7);
          const second = then ? await runLoop(mode, { ...base, prompt: "again" }) : "-";
          outcomes.push(`${first} / ${n} / ${second}`);
          await ctx.waitForEvent("go-on");
          return outcomes.at(-1);
        },
      );
      const engine = h.engine([wf], {
        replayStallMs: 3_000, // a replay that waits for a call never made is refused soon
        store: storeHooked(h.store(), () => {
          if (!armed) return;
          armed = false;
          caller.abort(); // the user's stop, between the tool's end and its record
        }),
      });
      const run = await engine.start(wf, null);
      await waitForStatus(run, "waiting");
      const firstCalls = calls();
      await engine.sendEvent(run.id, "go-on", null);
      const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
      return { outcomes, r, firstCalls, replayCalls: calls() - firstCalls };
    }

    async function expectSameStop(mode: Mode) {
      const { outcomes, r, firstCalls, replayCalls } = await stopAtRecord(harness(), mode);
      expect(outcomes[0]).toMatch(/^stopped: AbortError: .* \/ 7 \/ answered: the answer$/);
      expect(r.error).toBeUndefined();
      expect(outcomes[1]).toBe(outcomes[0]);
      expect(r.value).toBe(outcomes[0]);
      expect(firstCalls).toBe(3);
      expect(replayCalls).toBe(0);
    }

    // The stop is recorded as the loop's next model call (src/ai/stop-after-record.ts).
    it("generate: the replay stops where the first execution did", () =>
      expectSameStop("generate"));

    // The loop ends on its own after its tool turn (stepCountIs(1)) as the stop lands: the
    // SDK makes no next call, in the first execution or its replay. The stop recorded as
    // that call is no other call's: a later call of the model takes its own record.
    for (const then of [true, false]) {
      it(`generate: a loop ending on its own as the stop lands replays (${then ? "a later call of the model" : "nothing after"})`, async () => {
        const { outcomes, r, firstCalls, replayCalls } = await stopAtRecord(
          harness(),
          "generate",
          1,
          then,
        );
        expect(outcomes[0]).toBe(`answered:  / 7 / ${then ? "answered: the answer" : "-"}`);
        expect(r.error).toBeUndefined();
        expect(outcomes[1]).toBe(outcomes[0]);
        expect(firstCalls).toBe(then ? 3 : 1);
        expect(replayCalls).toBe(0);
      });
    }

    // With toolCallConcurrency 1, a stop landing as c1's record is written made the SDK start
    // no further tool call (its queue reads the signal), and nothing recorded the stop: the
    // replay, whose signal does not fire, ran c2's body (a tool the first execution never
    // ran), made the loop's next model call, and answered where the first execution had
    // stopped. The queue's check now goes on too, and c2's call records the stop
    // (stop-after-record.ts).
    it("generate, toolCallConcurrency 1: the replay runs no tool the first execution did not", async () => {
      const h = harness();
      const ai = kitFor(h);
      let calls = 0;
      const model = new MockLanguageModelV4({
        doGenerate: async (o) => {
          calls++;
          const toolTurn = o.prompt.some((m) => m.role === "tool");
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
      const bodies: string[] = [];
      const outcomes: string[] = [];
      let caller = new AbortController();
      let armed = true;
      const wf = workflow(
        { name: `stop-at-record-queue-${++unique}`, version: "1" },
        async (ctx) => {
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
          outcomes.push(
            await runLoop("generate", {
              model: ai.model(ctx, model),
              tools,
              stopWhen: stepCountIs(3),
              prompt: "go",
              abortSignal: caller.signal,
              toolCallConcurrency: 1,
            }),
          );
          await ctx.waitForEvent("go-on");
          return outcomes.at(-1);
        },
      );
      const engine = h.engine([wf], {
        replayStallMs: 3_000,
        store: storeHooked(h.store(), () => {
          if (!armed) return;
          armed = false;
          caller.abort();
        }),
      });
      const run = await engine.start(wf, null);
      await waitForStatus(run, "waiting");
      expect(bodies).toEqual(["c1"]);
      await engine.sendEvent(run.id, "go-on", null);
      const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
      expect(outcomes[0]).toMatch(/^stopped: AbortError/);
      expect(r.error).toBeUndefined();
      expect(outcomes[1]).toBe(outcomes[0]);
      expect(bodies).toEqual(["c1"]);
      expect(calls).toBe(1);
    });

    // An effectTool's perform that returns once the stop landed keeps its result (its effect
    // happened), so nothing recorded the stop and the replay went on past it, paid. The
    // loop's next call now records it (stop-after-record.ts).
    it("generate: a stop landing in an effectTool's perform that returns ends the replay's loop too", async () => {
      const h = harness();
      const { model, calls } = oneToolModel();
      const ai = kitFor(h);
      const outcomes: string[] = [];
      let performed = 0;
      const wf = workflow({ name: `stop-in-effect-${++unique}`, version: "1" }, async (ctx) => {
        const caller = new AbortController();
        const tools = ai.tools(ctx, {
          lookup: effectTool({
            inputSchema: z.object({}),
            perform: async () => {
              performed++;
              caller.abort(); // the user's stop, while the effect is performed
              return "done";
            },
            reconcile: () => undefined,
          }),
        });
        outcomes.push(
          await runLoop("generate", {
            model: ai.model(ctx, model),
            tools,
            stopWhen: stepCountIs(3),
            prompt: "go",
            abortSignal: caller.signal,
          }),
        );
        await ctx.waitForEvent("go-on");
        return outcomes.at(-1);
      });
      const engine = h.engine([wf], { replayStallMs: 3_000 });
      const run = await engine.start(wf, null);
      await waitForStatus(run, "waiting");
      await engine.sendEvent(run.id, "go-on", null);
      const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
      expect(outcomes[0]).toMatch(/^stopped: AbortError/);
      expect(r.error).toBeUndefined();
      expect(outcomes[1]).toBe(outcomes[0]);
      expect(performed).toBe(1);
      expect(calls()).toBe(1);
    });

    // streamText gives up at the stop itself, and the workflow goes on ("between" is
    // recorded) before the tool's record, which says it succeeded, is handed back; the
    // replay, whose signal does not fire, waited for the tool's outcome and then made the
    // loop's next call, and the recorded "between" was never called: the run was refused
    // (after replayStallMs). The stop is now recorded as a call of its own, which the replay
    // finds by reading the journal ahead (src/ai/stream-stop.ts).
    it("stream: the replay stops where the first execution did", () => expectSameStop("stream"));

    /** streamText rejects at once when its signal fires, while a tool is still running:
     *  the workflow goes on (a step) before the tool's record is written. The tool's call
     *  now ends at the stop (tools.ts, untilStreamStops); recorded after "after", its replay
     *  waited for the tool before going on, and was refused. */
    it("stream: a stop while a tool runs, the workflow going on before its record", async () => {
      const h = harness();
      const { model, calls } = oneToolModel();
      const ai = kitFor(h);
      const outcomes: string[] = [];
      let release = () => {};
      const wf = workflow(
        { name: `stream-stop-in-flight-${++unique}`, version: "1" },
        async (ctx) => {
          const caller = new AbortController();
          const tools = ai.tools(ctx, {
            lookup: tool({
              inputSchema: z.object({}),
              execute: async () => {
                caller.abort(); // the user's stop, while the tool runs
                await new Promise<void>((resolve) => {
                  release = resolve;
                });
                return "found";
              },
            }),
          });
          const first = await runLoop("stream", {
            model: ai.model(ctx, model),
            tools,
            stopWhen: stepCountIs(3),
            prompt: "go",
            abortSignal: caller.signal,
          });
          const n = await ctx.step("after", async () => {
            release(); // the tool ends (and records) only now
            return 7;
          });
          outcomes.push(`${first} / ${n}`);
          await ctx.waitForEvent("go-on");
          return outcomes.at(-1);
        },
      );
      const engine = h.engine([wf], { replayStallMs: 3_000 });
      const run = await engine.start(wf, null);
      await waitForStatus(run, "waiting");
      const firstCalls = calls();
      await engine.sendEvent(run.id, "go-on", null);
      const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
      expect(outcomes[0]).toMatch(/^stopped: AbortError: .* \/ 7$/);
      expect(r.error).toBeUndefined();
      expect(outcomes[1]).toBe(outcomes[0]);
      expect(firstCalls).toBe(1);
      expect(calls() - firstCalls).toBe(0);
    });
  });
}
