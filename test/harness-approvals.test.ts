// The test harness could not answer a typed approval (ctx.approval): settle and crashSweep
// send `events`, and the event an approval waits for ("cairn.approval:<key>") is reserved, so
// a workflow with an approval could only be swept down its timeout path. settle said "run
// ... waits for cairn.approval:ship; send the event", which sendEvent refuses. An `events`
// entry `{ approval, decision?, by?, comment?, answer? }` now answers it as soon as the run
// asks (test-engine.ts), also after a crash in either mode of the sweep (crash-sweep-child.ts
// counts what the killed child had answered), and the message names the approval.

import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { crashSweep, createTestEngine } from "../src/testing/index.js";
import { effects, ship } from "./fixtures/approval-workflows.js";
import { FIXTURES } from "./helpers/child.js";

const MODULE = join(FIXTURES, "approval-workflows.ts");

const approvedTwice = [
  { approved: true, by: "qa", comment: "go" },
  { approved: false, by: "engine", comment: null },
];

describe("approvals in the test harness", () => {
  it("settle answers each asking in turn, with who, the comment and the decision", async () => {
    const t = await createTestEngine({ workflows: [ship] });
    const run = await t.start(ship, { rounds: 2 });
    const view = await t.settle(run, {
      events: [
        { approval: "ship", by: "qa", comment: "go" },
        { approval: "ship", decision: "rejected" },
      ],
    });
    expect(view.status).toBe("completed");
    expect(view.output).toEqual(approvedTwice);
    const approvals = await t.engine.listApprovals(run.id);
    expect(approvals.map((a) => [a.key, a.status, a.via])).toEqual([
      ["ship", "approved", "engine"],
      ["ship#2", "rejected", "engine"],
    ]);
  });

  it("settle without an answer names the approval, not its reserved event", async () => {
    const t = await createTestEngine({ workflows: [ship] });
    const run = await t.start(ship, { rounds: 1 }, { id: "unanswered" });
    const err = await t.settle(run).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toContain('run "unanswered" waits for approval "ship"');
    expect(err?.message).toContain('an events entry { approval: "<name>" }');
    expect(err?.message).not.toContain("cairn.approval:");
  });

  it("refuses an entry that is neither an event nor an approval", async () => {
    const t = await createTestEngine({ workflows: [ship] });
    const run = await t.start(ship, { rounds: 1 });
    await expect(
      t.settle(run, { events: [{ approval: "ship", decision: "maybe" as "approved" }] }),
    ).rejects.toThrow('settle: events[0].decision must be "approved" or "rejected"');
    await expect(
      crashSweep({
        workflows: [ship],
        workflow: ship,
        input: { rounds: 1 },
        events: [{ payload: 1 } as never],
      }),
    ).rejects.toThrow("crashSweep: events[0] must have a name (an event) or an approval");
  });

  it("crashSweep in process: every boundary, approvals answered once, nothing twice", async () => {
    const sweep = await crashSweep({
      workflows: [ship],
      workflow: ship,
      input: { rounds: 2 },
      events: [
        { approval: "ship", by: "qa", comment: "go" },
        { approval: "ship", decision: "rejected" },
      ],
      sideEffects: effects,
    });
    expect(sweep.baseline).toEqual({
      status: "completed",
      output: approvedTwice,
      sideEffects: { deploy: 1 },
    });
    expect(sweep.failures).toEqual([]);
    expect(sweep.boundaries.filter((b) => !b.crashed)).toEqual([]);
    const labels = sweep.boundaries.map((b) => b.boundary.label);
    expect(labels).toContain('during approval "ship"');
    expect(labels).toContain('during approval "ship#2"');
  });

  it('crashSweep({ crash: "process" }): a killed child\'s answers are not given twice', async () => {
    {
      const sweep = await crashSweep({
        crash: "process",
        module: MODULE,
        workflows: [ship],
        workflow: ship,
        input: { rounds: 2 },
        events: [
          { approval: "ship", by: "qa", comment: "go" },
          { approval: "ship", decision: "rejected" },
        ],
        sideEffects: effects,
        // Killed while the first approval waits, once it was answered (the second entry
        // is then the recovering child's to give, to "ship#2"), and while the second waits.
        filter: (b) =>
          (b.key === "ship" && b.point !== "before-intent") ||
          (b.key === "ship#2" && b.point === "after-intent"),
      });
      expect(sweep.baseline.output).toEqual(approvedTwice);
      expect(sweep.boundaries.map((b) => [b.boundary.label, b.crashed])).toEqual([
        ['during approval "ship"', true],
        ['after approval "ship" ended, before its record', true],
        ['after approval "ship"\'s record', true],
        ['during approval "ship#2"', true],
      ]);
      expect(sweep.failures).toEqual([]);
    }
  }, 120_000);
});
