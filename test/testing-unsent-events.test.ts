// settle(run, { events }) with an entry the run never waits for (a typo: "goo" for "go",
// "merg" for "merge") never sent it; when the wait it was meant for has a timeout, the run
// went on the timed-out path and settle resolved "completed", the test passing while it
// tested another path than it meant. settle now rejects naming the entries no run used
// (test-engine.ts); a run that had finished before settle was called is not judged.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { createTestEngine } from "../src/testing/index.js";

const wf = workflow({ name: "unsent", version: "1" }, async (ctx) => {
  const go = await ctx.waitForEvent("go", { timeout: "1h" });
  const merge = await ctx.approval("merge", { request: {}, timeout: "1d" });
  return { go: go.timedOut ? "timed out" : "sent", merge: merge.decision };
});

describe("cairn/testing settle: an events entry no run used", () => {
  it("rejects naming each entry, once the run finished another way", async () => {
    const t = await createTestEngine({ workflows: [wf] });
    const run = await t.start(wf, undefined, { id: "u1" });
    const settled = await t
      .settle(run, {
        events: [{ name: "goo" }, { approval: "merge" }, { approval: "merg", runId: "other" }],
      })
      .then(
        () => "resolved",
        (e: Error) => e.message,
      );
    expect(settled).toBe(
      'settle: run "u1" finished (completed) without using event "goo" (entry 1), approval "merg" of run "other" (entry 3): no run waited for them (a name with a typo, or a wait this path of the run does not reach; an entry is sent only once its run waits for it). Fix the entry, or leave it out',
    );
    // The run did finish, on the path the test did not mean.
    expect((await t.engine.getRun("u1"))?.output).toEqual({ go: "timed out", merge: "approved" });
  });

  it("every entry used, or the run finished before settle: it resolves", async () => {
    const t = await createTestEngine({ workflows: [wf] });
    const run = await t.start(wf, undefined, { id: "u2" });
    const events = [{ name: "go" }, { approval: "merge" }];
    const done = await t.settle(run, { events });
    expect(done.output).toEqual({ go: "sent", merge: "approved" });
    // Settling it again with the same script: nothing to send, nothing judged.
    expect((await t.settle(run, { events })).status).toBe("completed");
  });
});
