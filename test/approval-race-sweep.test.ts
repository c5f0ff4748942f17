// Approvals inside Promise.race (the generative replay test makes none): one raced against
// a sleep and answered, one with a timeout raced against a step that wins (never answered:
// the run ends with the race, and settle refuses an entry no run used). crashSweep kills the worker after each record and as each wait
// begins; each
// execution's later invocations (replays after a crash or a suspension) must be handed what
// the invocation before them was, in the same order, and every crash run must end as the
// undisturbed one.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { crashSweep } from "../src/testing/index.js";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("approvals raced against a sleep and a step, the worker dying after each record", () => {
  it("every invocation is handed what the one before it was; every run ends as undisturbed", async () => {
    let invocations: string[][] = [];
    const executions: string[][][] = [];
    const wf = workflow({ name: "approval-races", version: "1" }, async (ctx) => {
      const seen: string[] = [];
      invocations.push(seen);
      const first = await Promise.race([
        ctx.approval("merge", { request: { pr: 1 } }).then((a) => `merge ${a.decision} by ${a.by}`),
        ctx.sleep("give-up", "1h").then(() => "gave up"),
      ]);
      seen.push(first);
      seen.push(await ctx.step("after", () => delay(2).then(() => "after")));
      const second = await Promise.race([
        ctx
          .approval("deploy", { request: { pr: 1 }, timeout: "1m" })
          .then((a) => `deploy ${a.decision} ${a.timedOut}`),
        ctx.step("quick", () => delay(3).then(() => "quick")),
      ]);
      seen.push(second);
      return seen;
    });
    const res = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: undefined,
      // Where a record lands or a wait begins (a step killed before its body or its record
      // replays as one killed after the record before it).
      filter: (b) => b.point !== "before-function" && b.point !== "before-record",
      events: [{ approval: "merge", by: "ana" }],
      reset: () => {
        if (invocations.length) executions.push(invocations);
        invocations = [];
      },
    });
    executions.push(invocations);
    expect(res.baseline.status).toBe("completed");
    expect(res.baseline.output).toEqual(["merge approved by ana", "after", "quick"]);
    expect(executions.length).toBe(res.boundaries.length + 1);
    expect(res.boundaries.length).toBeGreaterThanOrEqual(6);
    const differing: string[] = [];
    for (const [e, invs] of executions.entries()) {
      for (let k = 1; k < invs.length; k++) {
        const before = invs[k - 1] as string[];
        const now = (invs[k] as string[]).slice(0, before.length);
        if (JSON.stringify(now) !== JSON.stringify(before))
          differing.push(
            `execution ${e} invocation ${k}: ${JSON.stringify(now)} after ${JSON.stringify(before)}`,
          );
      }
    }
    expect(differing).toEqual([]);
    expect(res.failures).toEqual([]);
  });
});
