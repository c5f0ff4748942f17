// Adversarial cases of the check stop-after-record.ts lets go on once (the SDK's
// `throwIfAborted` before a generateText loop's next model call, after a stop landed as the
// loop's last tool call was being recorded): whose check it takes for the SDK's, and which
// loop's stop it records when loops share one signal. A first execution whose stop goes
// unrecorded is replayed past it: the replay makes a model call the first execution never
// made (paid) and answers where the first execution stopped.

import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { type Store, workflow } from "../src/index.js";
import { waitForStatus } from "../src/testing/index.js";
import { USAGE } from "./fixtures/ai-agent.js";
import { kitFor } from "./helpers/ai.js";
import { settle } from "./helpers/ai-tool-loop.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";

/** `store`, with `onToolRecord` called as a write holding a tool call's record is sent
 *  (before it is durable): the moment a stop lands between a tool's end and its record. */
function storeHooked(store: Store, onToolRecord: () => void): Store {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver);
      if (typeof v !== "function") return v;
      if (prop !== "appendRecords") return v.bind(target);
      return (writes: Parameters<Store["appendRecords"]>[0]) => {
        if (writes.some((w) => w.steps?.some((s) => s.name.startsWith("tool:")))) onToolRecord();
        return (v as Store["appendRecords"]).call(target, writes);
      };
    },
  });
}

/** A model whose first turn calls `lookup` once, with an id of its prompt's first letter
 *  ("go" -> "g1"), and whose second turn answers "answer <prompt>"; `calls` counts calls. */
function promptModel() {
  let calls = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async (o) => {
      calls++;
      const toolTurn = o.prompt.some((m) => m.role === "tool");
      const user = o.prompt.find((m) => m.role === "user");
      const text = (user?.content as Array<{ text?: string }> | undefined)?.[0]?.text ?? "?";
      return {
        content: toolTurn
          ? [{ type: "text", text: `answer ${text}` }]
          : [{ type: "tool-call", toolCallId: `${text[0]}1`, toolName: "lookup", input: "{}" }],
        finishReason: { unified: toolTurn ? "stop" : "tool-calls", raw: "x" },
        usage: USAGE,
        warnings: [],
      };
    },
  });
  return { model, calls: () => calls };
}

async function loop(settings: Parameters<typeof generateText>[0]): Promise<string> {
  try {
    return `answered: ${(await generateText(settings)).text}`;
  } catch (err) {
    return `stopped: ${(err as Error).name}`;
  }
}

let unique = 0;

for (const backend of BACKENDS) {
  describe(`the stop let go on once at the SDK's check (${backend})`, () => {
    const harness = useHarness(backend);

    /** One loop (or `loops` loops at once, sharing the caller's signal) whose stop lands as
     *  its tool's record is written, in the first execution only; `around` wraps the first
     *  execution's loops; `onStepFinish` is the loops' callback. The replay follows an event. */
    async function stopAtRecord(
      h: Harness,
      opts: {
        prompts?: string[];
        around?: <T>(f: () => Promise<T>) => Promise<T>;
        /** The loops' onStepFinish, made for the caller's signal. */
        onStepFinish?: (signal: AbortSignal) => () => void;
      } = {},
    ) {
      const prompts = opts.prompts ?? ["go"];
      const { model, calls } = promptModel();
      const ai = kitFor(h);
      const outcomes: string[] = [];
      let caller = new AbortController();
      let armed = true;
      let gate: () => void = () => {};
      let firstExecution = true;
      const wf = workflow({ name: `stop-${++unique}`, version: "1" }, async (ctx) => {
        caller = new AbortController();
        const signal = caller.signal;
        // Every loop's tool ends at once, once each has begun: their records share a write.
        let begun = 0;
        const opened = new Promise<void>((resolve) => {
          gate = resolve;
        });
        const tools = ai.tools(ctx, {
          lookup: tool({
            inputSchema: z.object({}),
            execute: async () => {
              if (++begun === prompts.length) gate();
              await opened;
              return "found";
            },
          }),
        });
        const run = () =>
          Promise.all(
            prompts.map((prompt) =>
              loop({
                model: ai.model(ctx, model),
                tools,
                stopWhen: stepCountIs(3),
                prompt,
                abortSignal: signal,
                ...(opts.onStepFinish ? { onStepFinish: opts.onStepFinish(signal) } : {}),
              }),
            ),
          );
        const wrap = firstExecution && opts.around ? opts.around : <T>(f: () => Promise<T>) => f();
        firstExecution = false;
        const ended = (await wrap(run)).join(" / ");
        outcomes.push(ended);
        await ctx.waitForEvent("go-on");
        return ended;
      });
      const engine = h.engine([wf], {
        replayStallMs: 3_000,
        store: storeHooked(h.store(), () => {
          if (!armed) return;
          armed = false;
          caller.abort(); // the user's stop, between the tools' end and their record
        }),
      });
      const run = await engine.start(wf, null);
      await waitForStatus(run, "waiting");
      const firstCalls = calls();
      await engine.sendEvent(run.id, "go-on", null);
      const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
      return { outcomes, r, firstCalls, replayCalls: calls() - firstCalls };
    }

    function expectSameStop(
      x: Awaited<ReturnType<typeof stopAtRecord>>,
      expected = "stopped: AbortError",
    ) {
      expect(x.outcomes[0]).toBe(expected);
      expect(x.r.error).toBeUndefined();
      expect(x.outcomes[1]).toBe(x.outcomes[0]); // the replay ended where the first did
      expect(x.replayCalls).toBe(0); // and paid for nothing
    }

    // The user's own `signal.throwIfAborted()` in onStepFinish (called from the SDK's
    // loop, which the stack then holds as an async frame) was taken for the SDK's check: it
    // did not throw though the signal had fired, and the SDK's own check, left alone,
    // threw with nothing recorded: the replay made the loop's next call (paid) and answered.
    // Under Node's default of 10 frames the SDK's frame may be cut off (it was on one
    // backend, not the other): a deeper stack, as `--stack-trace-limit` gives, holds it.
    it("the user's throwIfAborted in onStepFinish throws, and the replay stops too", async () => {
      const seen: string[] = [];
      const x = await stopAtRecord(harness(), {
        around: async (f) => {
          const was = Error.stackTraceLimit;
          Error.stackTraceLimit = 100;
          try {
            return await f();
          } finally {
            Error.stackTraceLimit = was;
          }
        },
        onStepFinish: (signal) => () => {
          try {
            signal.throwIfAborted();
            seen.push(signal.aborted ? "went on though aborted" : "not aborted");
          } catch (err) {
            seen.push(`threw ${(err as Error).name}`);
          }
        },
      });
      expect(seen[0]).toBe("threw AbortError"); // the first execution's, as without cairn
      expectSameStop(x);
    });

    // Error.stackTraceLimit = 0 (or 1): no frame to read, so the SDK's check was not let go
    // on, and the stop went unrecorded: the replay answered where the first execution stopped.
    for (const limit of [0, 1]) {
      it(`the replay stops too under Error.stackTraceLimit = ${limit}`, async () => {
        const x = await stopAtRecord(harness(), {
          around: async (f) => {
            const was = Error.stackTraceLimit;
            Error.stackTraceLimit = limit;
            try {
              return await f();
            } finally {
              Error.stackTraceLimit = was;
            }
          },
        });
        expectSameStop(x);
      });
    }

    // A stack written by source maps (node --enable-source-maps, source-map-support) names
    // the SDK's frames by its sources (ai/src/generate-text/generate-text.ts), not ai/dist:
    // the stop went unrecorded, and the replay answered where the first execution stopped.
    it("the replay stops too when stacks are written from source maps", async () => {
      const x = await stopAtRecord(harness(), {
        around: async (f) => {
          const was = Error.prepareStackTrace;
          Error.prepareStackTrace = (err, sites) =>
            `${String(err)}\n${sites
              .map(
                (s) =>
                  `    at ${s.getFunctionName() ?? "<anonymous>"} (${String(s.getFileName()).replace("/ai/dist/index.js", "/ai/src/generate-text/generate-text.ts")}:1:1)`,
              )
              .join("\n")}`;
          try {
            return await f();
          } finally {
            Error.prepareStackTrace = was;
          }
        },
      });
      expectSameStop(x);
    });

    // Two loops at once on one caller's signal, both tools ending before the stop lands as
    // their records are written: the stop to record was kept once per signal, so the second
    // tool's end replaced the first's, and the first loop's check taken let the other's go
    // unrecorded: that loop's replay made its next call (paid) and answered.
    it("two loops sharing the caller's signal both stop in the replay", async () => {
      const x = await stopAtRecord(harness(), { prompts: ["alpha", "beta"] });
      expectSameStop(x, "stopped: AbortError / stopped: AbortError");
    });
  });
}
