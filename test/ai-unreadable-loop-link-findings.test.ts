// Two tool loops at once (Promise.all), each with its own caller's signal and a tool given a
// signal of its own by `timeout.toolMs`, answering the same tool and id ("c1"). Which loop a
// tool call comes from is told by Node's record of AbortSignal.any (caller-stop.ts,
// signalSources). On a runtime without it, the newest answer's loop was taken: loop one's
// tool took loop two's signal, and a stop in loop two's tool did not stop its replay, which
// made a model call the first execution never made, paid, and answered where the first
// execution had stopped: a silent swap. A stop there is now refused loudly; without a stop
// the loops run as before. The runtime is simulated by signals without Node's internals.

import { generateText, stepCountIs, tool } from "ai";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { workflow } from "../src/index.js";
import { waitForStatus } from "../src/testing/index.js";
import { kitFor } from "./helpers/ai.js";
import { oneToolModel, settle } from "./helpers/ai-tool-loop.js";
import { advanceUntil, BACKENDS, type Harness, useHarness } from "./helpers/engines.js";

/** AbortSignal.any as a runtime without Node's record of the signals it follows makes it. */
function withoutSourceRecords(): () => void {
  const any = AbortSignal.any;
  AbortSignal.any = (signals: AbortSignal[]) => {
    const s = any.call(AbortSignal, signals);
    for (const k of Object.getOwnPropertySymbols(s)) {
      if (k.description === "kSourceSignals" || k.description === "kComposite") {
        delete (s as unknown as Record<symbol, unknown>)[k];
      }
    }
    return s;
  };
  return () => {
    AbortSignal.any = any;
  };
}

async function twoLoops(h: Harness, name: string, stopper: "one" | "two" | "none") {
  const { model, calls } = oneToolModel();
  const ai = kitFor(h);
  const outcomes: string[] = [];
  const wf = workflow({ name, version: "1" }, async (ctx) => {
    // Each loop's tools start once both answers are in (as a log write of some ms makes it
    // likely): in every execution, the tool calls find both answers.
    let started = 0;
    let bothIn = () => {};
    const both = new Promise<void>((resolve) => {
      bothIn = resolve;
    });
    const loop = async (which: "one" | "two") => {
      const caller = new AbortController();
      const tools = ai.tools(
        ctx,
        {
          lookup: tool({
            inputSchema: z.object({}),
            execute: async () => {
              if (which === stopper) caller.abort(); // the user's stop, while the tool runs
              return `found by ${which}`;
            },
          }),
        },
        { name: which },
      );
      try {
        const r = await generateText({
          model: ai.model(ctx, model),
          tools,
          stopWhen: stepCountIs(3),
          prompt: `loop ${which}`,
          abortSignal: caller.signal,
          timeout: { toolMs: 60_000 },
          onToolExecutionStart: async () => {
            if (++started === 2) bothIn();
            await both;
          },
        });
        return `${which} answered: ${r.text}`;
      } catch (err) {
        return `${which} stopped: ${(err as Error).name}`;
      }
    };
    outcomes.push((await Promise.all([loop("one"), loop("two")])).join(" / "));
    await ctx.waitForEvent("go-on");
    return outcomes.at(-1);
  });
  const engine = h.engine([wf]);
  const run = await engine.start(wf, null);
  const first = await waitForStatus(run, ["waiting", "failed"]);
  if (first.status === "waiting") await engine.sendEvent(run.id, "go-on", null);
  const r = await advanceUntil(h.clock, settle(run.result()), 1_000, 100);
  return { outcomes, r, calls };
}

describe.each(BACKENDS)("%s: loops alike in tool and id, the link unreadable", (backend) => {
  const harness = useHarness(backend);
  let restore = () => {};
  beforeEach(() => {
    restore = withoutSourceRecords();
  });
  afterEach(() => restore());

  for (const stopper of ["one", "two"] as const) {
    it(`a stop in loop ${stopper}'s tool is refused, not swapped`, async () => {
      const { outcomes, r, calls } = await twoLoops(harness(), `unreadable-${stopper}`, stopper);
      expect(r.error?.name).toBe("NonDeterminismError");
      expect(r.error?.message).toMatch(/does not tell which loop/);
      expect(outcomes).toEqual([]); // refused in the first execution, before either loop ended
      expect(calls()).toBeLessThanOrEqual(3); // no model call past a stop
    });
  }

  it("without a stop the loops run and replay as before", async () => {
    const { outcomes, r, calls } = await twoLoops(harness(), "unreadable-none", "none");
    const expected = "one answered: the answer / two answered: the answer";
    expect(outcomes).toEqual([expected, expected]);
    expect(r).toEqual({ value: expected });
    expect(calls()).toBe(4);
  });
});
