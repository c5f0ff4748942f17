// A fault script entry that matched no call (a typo'd key, "fetc" for "fetch"; a call
// number the run never reaches) never fired, and the test passed having tested nothing: the
// run completed undisturbed and nothing said the fault was not applied. createTestEngine's
// close() now rejects naming the entry and the keys the runs did call (call-faults.ts,
// test-engine.ts), so the test that made it fails.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { createTestEngine } from "../src/testing/index.js";
import { openTestEngine } from "../src/testing/test-engine.js";

const wf = workflow({ name: "unfired", version: "1" }, async (ctx) => {
  const a = await ctx.step("fetch", () => 1);
  const b = await ctx.step("fetch", () => 2);
  return a + b;
});

describe("cairn/testing: a fault script entry that never fires", () => {
  it("fails close(), naming the entry and the keys called", async () => {
    const t = await createTestEngine({
      workflows: [wf],
      faults: [
        { call: "fetch#2", throws: new Error("fired"), times: 0 },
        { call: "fetc", throws: new Error("typo") },
        { call: 9, throws: new Error("too far") },
      ],
    });
    const done = await t.settle(await t.start(wf, undefined));
    expect(done.status).toBe("completed");
    const closed = await t.close().then(
      () => undefined,
      (e: Error) => e.message,
    );
    expect(closed).toBe(
      'cairn/testing: fault script entry 2 (call "fetc") never matched a call: no run called a step or effect by that key (keys called: "fetch", "fetch#2"); ' +
        "fault script entry 3 (call 9) never matched a call: no run made 9 step or effect calls (the most any run made: 2). " +
        "A fault that never fires tests nothing: fix its call (a 1-based position among the run's step and effect calls, or a key: the name, name#2 for its second use), or remove it.",
    );
    // Closed once: a second close() says nothing more.
    await t.close();
  });

  it("a fault that fired, or one for a run id given, that ran: close() resolves", async () => {
    const t = await createTestEngine({
      workflows: [wf],
      faults: [{ call: 2, runId: "r1", throws: new Error("once") }],
    });
    const done = await t.settle(await t.start(wf, undefined, { id: "r1" }));
    expect(done.status).toBe("completed");
    await expect(t.close()).resolves.toBeUndefined();
  });

  it("the engines a sweep opens do not check (each execution may stop short of a fault)", async () => {
    const t = openTestEngine({ workflows: [wf], faults: [{ call: "never" }] });
    await t.settle(await t.start(wf, undefined));
    await expect(t.close()).resolves.toBeUndefined();
  });
});
