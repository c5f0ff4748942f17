// Two clock drives of the test engine a new user reached for: t.timeOutWait(run, "merge") on
// a run asking approval "merge" gave up with "no run can progress" (an approval is a wait,
// but timeOutWait looked only for event names), and t.advanceUntilStatus(run, "wating") (a
// typo) ticked until the drive gave up, the same words. timeOutWait now times out an
// approval by its name (or key), and advanceUntilStatus refuses a status no run has.
import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { createTestEngine } from "../src/testing/index.js";

const asks = workflow({ name: "times-out-approval", version: "1" }, async (ctx) => {
  const first = await ctx.approval("merge", { request: 1, timeout: "2d", onTimeout: "approve" });
  const again = await ctx.approval("merge", { request: 2, timeout: "1d" });
  return { first: first.decision, again: again.decision, timedOut: again.timedOut };
});
const forever = workflow({ name: "approval-no-timeout", version: "1" }, async (ctx) => {
  return (await ctx.approval("merge", { request: 1 })).decision;
});

describe("test engine drives", () => {
  it("timeOutWait times out an approval by its name, also its second asking (merge#2)", async () => {
    const t = await createTestEngine({ workflows: [asks] });
    const run = await t.start(asks, undefined);
    await t.timeOutWait(run, "merge");
    await t.timeOutWait(run, "merge");
    const done = await t.settle(run);
    expect(done.output).toEqual({ first: "approved", again: "rejected", timedOut: true });
    const approvals = await t.engine.listApprovals(run.id);
    expect(approvals.map((a) => [a.key, a.status])).toEqual([
      ["merge", "timed-out"],
      ["merge#2", "timed-out"],
    ]);
  });

  it("timeOutWait on an approval without a timeout says so", async () => {
    const t = await createTestEngine({ workflows: [forever] });
    const run = await t.start(forever, undefined, { id: "no-deadline" });
    await expect(t.timeOutWait(run, "merge")).rejects.toThrow(
      'timeOutWait: run "no-deadline" asks approval "merge" without a timeout; give ctx.approval a timeout, or answer it',
    );
  });

  it("advanceUntilStatus refuses a status no run has, at once", async () => {
    const t = await createTestEngine({ workflows: [forever] });
    const run = await t.start(forever, undefined, { id: "typo" });
    const before = t.clock.now();
    await expect(t.advanceUntilStatus(run, "wating" as never)).rejects.toThrow(
      new TypeError(
        'advanceUntilStatus(run "typo", "wating"): no run has that status; a status is one of pending, running, waiting, paused, completed, failed, canceled',
      ),
    );
    expect(t.clock.now()).toBe(before);
    expect((await t.advanceUntilStatus(run, "waiting")).status).toBe("waiting");
  });
});
