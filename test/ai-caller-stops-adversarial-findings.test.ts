// Adversarial cases of the caller's abort the AI SDK reads itself (src/ai/caller-stop.ts):
// a first execution and its replay (after a wait) must stop at the same place, with the
// same error, and the replay must run no tool body the first execution did not run.

import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { effectTool } from "../src/ai/index.js";
import { workflow } from "../src/index.js";
import { checkReplay, waitForStatus } from "../src/testing/index.js";
import { USAGE } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";

const settle = <T>(p: Promise<T>): Promise<{ value?: T; error?: Error }> =>
  p.then(
    (value) => ({ value }),
    (error: unknown) => ({ error: error as Error }),
  );

const isToolTurn = (prompt: { role: string }[]) => prompt.some((m) => m.role === "tool");

/** Turn 1: calls of `lookup` with ids `ids`; turn 2: "the answer". */
function toolsModel(ids: string[], toolOf: (id: string) => string = () => "lookup") {
  let calls = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async (o) => {
      calls++;
      const toolTurn = isToolTurn(o.prompt);
      return {
        content: toolTurn
          ? [{ type: "text", text: "the answer" }]
          : ids.map((id) => ({
              type: "tool-call" as const,
              toolCallId: id,
              toolName: toolOf(id),
              input: JSON.stringify({ id }),
            })),
        finishReason: { unified: toolTurn ? "stop" : "tool-calls", raw: "x" },
        usage: USAGE,
        warnings: [],
      };
    },
  });
  return { model, calls: () => calls };
}

type Lookup = (id: string, caller: AbortController) => Promise<string>;

function loopWorkflow(
  h: Harness,
  name: string,
  ids: string[],
  lookup: Lookup,
  extra: Record<string, unknown>,
) {
  const { model, calls } = toolsModel(ids);
  const ai = kitFor(h);
  const outcomes: string[] = [];
  const wf = workflow({ name, version: "1" }, async (ctx) => {
    const caller = new AbortController();
    const tools = ai.tools(ctx, {
      lookup: tool({
        inputSchema: z.object({ id: z.string() }),
        execute: ({ id }) => lookup(id, caller),
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
        ...extra,
      });
      outcome = `answered: ${r.text}`;
    } catch (err) {
      outcome = `stopped: ${(err as Error).name}: ${(err as Error).message}`;
    }
    outcomes.push(outcome);
    await ctx.waitForEvent("go-on");
    return outcome;
  });
  return { wf, outcomes, calls };
}

async function firstAndReplay(h: Harness, wf: ReturnType<typeof loopWorkflow>["wf"]) {
  const engine = h.engine([wf]);
  const run = await engine.start(wf, null);
  await waitForStatus(run, "waiting");
  await engine.sendEvent(run.id, "go-on", null);
  const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
  return { r, run, engine };
}

let unique = 0;
const STOPPED = "stopped: AbortError: This operation was aborted";

for (const backend of BACKENDS) {
  describe(`cairn/ai: the caller's abort, replayed, adversarial (${backend})`, () => {
    const harness = useHarness(backend);

    // The SDK hands a tool with a timeout a signal of its own (AbortSignal.any of the loop's
    // signal and the timer), and its model calls the loop's signal: the stop was marked on
    // the tool's signal alone, so the replay's next model call was made (the first execution
    // stopped, its replay answered). The tool call is now linked to its loop's signal
    // (caller-stop.ts, noteLoopSignal), and the stop marked on it too.
    it("a stop landing in a tool that has a timeout (timeout.toolMs) ends the replay's loop too", async () => {
      const h = harness();
      const bodies: string[] = [];
      const { wf, outcomes, calls } = loopWorkflow(
        h,
        `stop-tool-ms-${++unique}`,
        ["c1"],
        async (id, caller) => {
          bodies.push(id);
          caller.abort();
          return "found";
        },
        { timeout: { toolMs: 60_000 } },
      );
      const { r } = await firstAndReplay(h, wf);
      expect(r.error).toBeUndefined();
      expect(bodies).toEqual(["c1"]);
      expect(outcomes).toEqual([STOPPED, STOPPED]);
      expect(calls()).toBe(1);
    });

    // With toolCallConcurrency, the SDK starts no further tool call once the loop's signal
    // fired: the first execution never ran c2's body; a replay must not either.
    it("toolCallConcurrency: a tool call the stop kept from starting does not run on replay", async () => {
      const h = harness();
      const bodies: string[] = [];
      const { wf, outcomes, calls } = loopWorkflow(
        h,
        `stop-concurrency-${++unique}`,
        ["c1", "c2"],
        async (id, caller) => {
          bodies.push(id);
          if (id === "c1") caller.abort();
          return `found ${id}`;
        },
        { toolCallConcurrency: 1 },
      );
      const { r, run } = await firstAndReplay(h, wf);
      expect(r.error).toBeUndefined();
      expect(outcomes).toEqual([STOPPED, STOPPED]);
      expect(bodies).toEqual(["c1"]);
      expect(calls()).toBe(1);
      const [checked] = await checkReplay({ store: h.store(), workflows: [wf], runIds: [run.id] });
      expect(checked?.verdict).toBe("ok");
    });
    // The same for an effectTool: its perform is the side effect a replay must not make.
    it("toolCallConcurrency: an effectTool call the stop kept from starting performs nothing on replay", async () => {
      const h = harness();
      const { model, calls } = toolsModel(["c1", "c2"], (id) =>
        id === "c1" ? "lookup" : "charge",
      );
      const ai = kitFor(h);
      const outcomes: string[] = [];
      let performed = 0;
      const wf = workflow({ name: `stop-effect-${++unique}`, version: "1" }, async (ctx) => {
        const caller = new AbortController();
        const tools = ai.tools(ctx, {
          lookup: tool({
            inputSchema: z.object({ id: z.string() }),
            execute: async () => {
              caller.abort();
              return "found";
            },
          }),
          charge: effectTool({
            inputSchema: z.object({ id: z.string() }),
            perform: async () => {
              performed++;
              return "charged";
            },
            reconcile: async () => undefined,
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
          });
          outcome = `answered: ${r.text}`;
        } catch (err) {
          outcome = `stopped: ${(err as Error).name}: ${(err as Error).message}`;
        }
        outcomes.push(outcome);
        await ctx.waitForEvent("go-on");
        return outcome;
      });
      const engine = h.engine([wf]);
      const run = await engine.start(wf, null);
      await waitForStatus(run, "waiting");
      await engine.sendEvent(run.id, "go-on", null);
      const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
      expect(r.error).toBeUndefined();
      expect(outcomes).toEqual([STOPPED, STOPPED]);
      expect(performed).toBe(0);
      expect(calls()).toBe(1);
    });
  });
}
