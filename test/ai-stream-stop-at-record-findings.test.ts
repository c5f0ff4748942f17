// A caller's stop landing as a streamText loop's tool call is being recorded (its body
// ended, its outcome not yet handed back): streamText gives up at once and the workflow
// goes on; nothing recorded the stop, and the replay, whose signal does not fire, made the
// loop's next model call and was refused (or answered where the first execution stopped,
// paid). The stop is now recorded as a call of its own that the replay finds by reading
// the journal ahead (src/ai/stream-stop.ts). Variants: parallel tool calls, a reason of the
// caller's own, a tool that fails, an effect tool, the stream raced against a sleep, a loop
// given timeout.totalMs.

import { stepCountIs, streamText, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { effectTool } from "../src/ai/index.js";
import { FatalError, type Store, workflow } from "../src/index.js";
import { waitForStatus } from "../src/testing/index.js";
import { kitFor } from "./helpers/ai.js";
import { answerParts, settle, streamed, toolCallParts } from "./helpers/ai-tool-loop.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";

/** `store`, with `onWrite` called as a write holding a step named `name` is sent. */
function storeHooked(store: Store, name: string, onWrite: () => void): Store {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver);
      if (typeof v !== "function") return v;
      if (prop !== "appendRecords") return v.bind(target);
      return (writes: Parameters<Store["appendRecords"]>[0]) => {
        if (writes.some((w) => w.steps?.some((s) => s.name === name))) onWrite();
        return (v as Store["appendRecords"]).call(target, writes);
      };
    },
  });
}

/** Turn 1 streams `n` calls of `lookup` (c1..cn); turn 2 streams "the answer". */
function streamedToolsModel(n: number) {
  let calls = 0;
  const model = new MockLanguageModelV4({
    doStream: async (o) => {
      calls++;
      const toolTurn = o.prompt.some((m) => m.role === "tool");
      return streamed(
        toolTurn
          ? answerParts()
          : toolCallParts(
              Array.from({ length: n }, (_, i) => ({
                id: `c${i + 1}`,
                input: JSON.stringify({ id: `c${i + 1}` }),
              })),
            ),
      );
    },
  });
  return { model, calls: () => calls };
}

interface Variant {
  /** Tool calls of turn 1 (default 1). */
  tools?: number;
  /** The tool calls but c1 end only once the stop landed (their own records are the stop). */
  laterOthers?: boolean;
  /** The record the stop lands at (default "tool:lookup:c1"). */
  at?: string;
  /** The stop's reason (default none: an AbortError). */
  reason?: () => unknown;
  /** c1's body throws instead of returning. */
  fails?: boolean;
  /** The tool is an effectTool. */
  effect?: boolean;
  /** The loop's text is raced against a durable sleep. */
  race?: boolean;
  /** The loop's own timeout (its merged signal). */
  totalMs?: number;
  /** Steps of the loop (stepCountIs, default 3). */
  steps?: number;
  /** The SDK's toolCallConcurrency. */
  concurrency?: number;
}

let unique = 0;

for (const backend of BACKENDS) {
  describe(`a streamed loop's stop landing as a tool call is recorded (${backend})`, () => {
    const harness = useHarness(backend);

    async function stopAt(h: Harness, v: Variant) {
      const { model, calls } = streamedToolsModel(v.tools ?? 1);
      const ai = kitFor(h);
      const outcomes: string[] = [];
      const bodies: string[] = [];
      let caller = new AbortController();
      let armed = true;
      let landed = () => {};
      const wf = workflow({ name: `stream-stop-${++unique}`, version: "1" }, async (ctx) => {
        caller = new AbortController();
        const stopped = new Promise<void>((resolve) => {
          landed = resolve;
        });
        const body = async (id: string) => {
          bodies.push(id);
          if (v.laterOthers && id !== "c1") await stopped; // they end after the stop
          if (v.fails && id === "c1") throw new FatalError("lookup failed"); // not retried
          return `found ${id}`;
        };
        const lookup = v.effect
          ? effectTool({
              inputSchema: z.object({ id: z.string() }),
              perform: ({ id }) => body(id),
              reconcile: () => undefined,
            })
          : tool({ inputSchema: z.object({ id: z.string() }), execute: ({ id }) => body(id) });
        const tools = ai.tools(ctx, { lookup });
        const loop = (async () => {
          try {
            const text = await streamText({
              model: ai.model(ctx, model),
              tools,
              prompt: "go",
              abortSignal: caller.signal,
              stopWhen: stepCountIs(v.steps ?? 3),
              onError: () => {},
              ...(v.totalMs ? { timeout: { totalMs: v.totalMs } } : {}),
              ...(v.concurrency ? { toolCallConcurrency: v.concurrency } : {}),
            }).text;
            return `answered: ${text}`;
          } catch (err) {
            return `stopped: ${(err as Error).name}: ${(err as Error).message}`;
          }
        })();
        const first = v.race
          ? await Promise.race([loop, ctx.sleep("nap", "1h").then(() => "slept")])
          : await loop;
        const n = await ctx.step("between", async () => 7);
        outcomes.push(`${first} / ${n}`);
        await ctx.waitForEvent("go-on");
        return outcomes.at(-1);
      });
      const engine = h.engine([wf], {
        replayStallMs: 3_000,
        store: storeHooked(h.store(), v.at ?? "tool:lookup:c1", () => {
          if (!armed) return;
          armed = false;
          caller.abort(v.reason?.()); // the user's stop, as the record is written
          setImmediate(() => landed());
        }),
      });
      const run = await engine.start(wf, null);
      await waitForStatus(run, "waiting");
      const firstCalls = calls();
      const firstBodies = [...bodies];
      await engine.sendEvent(run.id, "go-on", null);
      const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
      return { outcomes, r, firstCalls, replayCalls: calls() - firstCalls, firstBodies, bodies };
    }

    async function expectSameStop(v: Variant, stopped = /^stopped: AbortError: .* \/ 7$/) {
      const x = await stopAt(harness(), v);
      expect(x.r.error).toBeUndefined();
      expect(x.outcomes[0]).toMatch(stopped);
      expect(x.outcomes[1]).toBe(x.outcomes[0]);
      expect(x.r.value).toBe(x.outcomes[0]);
      expect(x.firstCalls).toBe(1);
      expect(x.replayCalls).toBe(0); // the replay pays for no model call
      expect(x.bodies).toEqual(x.firstBodies); // and runs no tool body
      return x;
    }

    it("one tool call", () => expectSameStop({}));

    it("two tool calls at once, the stop landing at the second's record", () =>
      expectSameStop({ tools: 2, at: "tool:lookup:c2" }));

    // The SDK's queue begins no tool call after the stop: c2's body runs in neither.
    it("two tool calls, toolCallConcurrency 1, the stop landing at the first's record", async () => {
      const x = await expectSameStop({ tools: 2, concurrency: 1 });
      expect(x.bodies).toEqual(["c1"]);
    });

    // c2's own record is the stop here: this replayed alike before stream-stop.ts too.
    it("two tool calls at once, the other ending after the stop", () =>
      expectSameStop({ tools: 2, laterOthers: true }));

    it("a reason of the caller's own", () =>
      expectSameStop({ reason: () => new Error("user quit") }, /^stopped: Error: user quit \/ 7$/));

    it("the tool failing as the stop lands", () => expectSameStop({ fails: true }));

    it("an effectTool whose perform returned", () => expectSameStop({ effect: true }));

    it("the loop raced against a sleep", () => expectSameStop({ race: true }));

    // Its stopWhen met at that turn: the replay's loop had no next call to fail, and ended
    // with the answer where the first execution's streamText had rejected at the stop.
    it("a loop whose stopWhen is met at that turn", () => expectSameStop({ steps: 1 }));

    it("the loop's own timeout.totalMs (its merged signal)", () =>
      expectSameStop({ totalMs: 600_000 }));
  });
}
