// createTestEngine({ workflows, fault: [...] }) or crashSweep({ ..., event: [...] }) (a
// misspelt option) dropped it: the test ran without the fault it scripted, or the sweep
// without the events, and a test of the failed middle passed testing nothing. Each is now a
// TypeError naming the option and the options there are.
import { describe, expect, it } from "vitest";
import { RateLimitError, workflow } from "../src/index.js";
import { crashSweep, createTestEngine } from "../src/testing/index.js";

const wf = workflow({ name: "kit-options", version: "1" }, async (ctx) => {
  return ctx.step("fetch", async () => "fetched");
});
const built = (o: Record<string, unknown>) => o as never;

describe("cairn/testing options", () => {
  it("createTestEngine: fault (for faults) is refused", async () => {
    const fault = [{ call: "fetch", throws: () => new RateLimitError("429") }];
    await expect(createTestEngine(built({ workflows: [wf], fault }))).rejects.toThrow(
      new TypeError(
        'createTestEngine(): unknown option "fault"; the options are workflows, faults, sideEffects, store, clockStart, maxIdleWakes, engineOptions',
      ),
    );
    // Spelt right, the fault fires: the step's first attempt is rate-limited.
    const t = await createTestEngine({ workflows: [wf], faults: fault });
    const run = await t.start(wf, undefined);
    expect((await t.settle(run)).output).toBe("fetched");
    const [step] = await t.engine.getSteps(run.id);
    expect(step?.attempts.map((a) => a.error?.code ?? "ok")).toEqual(["RATE_LIMIT", "ok"]);
  });

  it("crashSweep: event (for events) is refused before anything runs", async () => {
    await expect(
      crashSweep(built({ workflows: [wf], workflow: wf, input: undefined, event: [] })),
    ).rejects.toThrow(
      /^crashSweep: unknown option "event"; the options are workflows, workflow, input,/,
    );
  });
});
