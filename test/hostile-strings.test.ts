// Strings no driver stores as they are, end to end on both backends: a lone surrogate (an
// LLM reply cut mid-emoji) and NUL, in a step result, a FatalError's message, an event
// payload and a run input. Each must reach the workflow the same on the first run and on
// replay, and none may make a write fail: on PostgreSQL a NUL in an error once failed every
// commit of the run, which was handed back and executed again ~100 times a second, and
// SQLite turned a lone surrogate into U+FFFD, so replay saw another string than the first run.

import { describe, expect, it } from "vitest";
import { FatalError, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { within } from "./helpers/within.js";

const CUT = "👍 great".slice(1);
const NUL_MESSAGE = `bad\u0000 ${CUT}`;
const INPUT = `in\u0000put ${CUT}`;
const PAYLOAD = `pay\u0000load ${CUT}`;

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("a cut emoji and NUL round-trip exactly through results, errors, events and input", async () => {
    const h = harness();
    const seen: Array<Record<string, unknown>> = [];
    const wf = workflow({ name: "hostile", version: "1" }, async (ctx, input: { text: string }) => {
      const cut = await ctx.step("cut", () => CUT);
      let fatal = "";
      try {
        await ctx.step("fatal", () => {
          throw new FatalError(NUL_MESSAGE);
        });
      } catch (err) {
        fatal = (err as Error).message;
      }
      // Seen once by the first execution, again by the one that replays after the event.
      seen.push({ input: input.text, cut, fatal });
      const ev = await ctx.waitForEvent<{ text: string }>("go");
      return { input: input.text, cut, fatal, payload: ev.timedOut ? null : ev.payload.text };
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, { text: INPUT });
    await until(async () => (await e.getRun(run.id))?.status === "waiting", "the run waits");
    await e.sendEvent(run.id, "go", { text: PAYLOAD });
    const out = await within(run.result(), 30_000, "the run");
    expect(out).toEqual({ input: INPUT, cut: CUT, fatal: NUL_MESSAGE, payload: PAYLOAD });
    expect(seen).toHaveLength(2);
    expect(seen[1]).toEqual(seen[0]);
    expect(seen[0]).toEqual({ input: INPUT, cut: CUT, fatal: NUL_MESSAGE });
    // Two executions: the first, and the one after the event. No hand-back loop.
    expect(e.metrics().claimed).toBe(2);
    const steps = await e.getSteps(run.id);
    expect(steps.find((s) => s.key === "fatal")?.error?.message).toBe(NUL_MESSAGE);
  });

  it("a run failed by a FatalError with NUL in its message fails once, keeping the message", async () => {
    const h = harness();
    let executions = 0;
    const wf = workflow({ name: "hostile-fail", version: "1" }, async (ctx) => {
      executions++;
      await ctx.step("fatal", () => {
        throw new FatalError(NUL_MESSAGE);
      });
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined);
    const err = await within(run.result(), 30_000, "the run").catch((x: unknown) => x);
    expect(err).toBeInstanceOf(FatalError);
    expect((err as Error).message).toBe(NUL_MESSAGE);
    const view = await e.getRun(run.id);
    expect(view?.status).toBe("failed");
    expect(view?.error?.message).toBe(NUL_MESSAGE);
    // The reason is for people: the NUL and the half emoji are shown as escapes.
    expect(view?.reason).toBe("FatalError: bad\\u0000 \\udc4d great");
    expect(executions).toBe(1);
    expect(e.metrics().claimed).toBe(1);
  });
});
