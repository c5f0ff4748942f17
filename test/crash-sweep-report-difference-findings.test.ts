// What crashSweep says when a crash changes the run's output. The output was shown whole, by
// JSON, cut to 120 characters: a Map, a Set or a BigInt inside it read as `{}` on both sides
// ("its output is {"seen":{}} instead of {"seen":{}}"), and an output that differed past its
// first hundred characters read the same on both sides. Now the report names where the
// outputs first differ and shows that part on each side.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { crashSweep } from "../src/testing/index.js";

describe("crashSweep's report of an output a crash changed", () => {
  it("names the part that differs inside a Map, and past a long common beginning", async () => {
    let executions = 0; // counted outside any step: one more per execution a crash causes
    const wf = workflow({ name: "counts-itself", version: "1" }, async (ctx) => {
      executions++;
      await ctx.step("work", () => 1);
      return {
        seen: new Map([["executions", executions]]),
        log: `${"-".repeat(150)}executions=${executions}`,
      };
    });
    const res = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: undefined,
      reset: () => {
        executions = 0;
      },
      filter: (b) => b.key === "work" && b.point === "before-record",
    });
    expect(res.failures).toEqual([
      `crash after step "work" returned, before its record (run "crash-sweep"): ` +
        `its output differs at .seen.get('executions'): 2 instead of 1`,
    ]);
    const res2 = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: undefined,
      reset: () => {
        executions = 0;
      },
      normalize: (o) => (o as { log: string }).log,
      filter: (b) => b.key === "work" && b.point === "before-record",
    });
    expect(res2.failures).toEqual([
      `crash after step "work" returned, before its record (run "crash-sweep"): ` +
        `its output differs at .slice(161): '2' instead of '1'`,
    ]);
  });
});
