// Finding: a run canceled while it was held for a step body (Release's heldFor) kept
// saying it was held: getRun's heldBy/heldUntil, the HTTP API's run, and `cairn runs`'
// REASON column ("held by wrk_… until …; <the cancel's reason>"), though a canceled run is
// never claimed again, so no hold of it means anything (a release to completed or canceled
// sets none). A hold is shown for a run that may still be claimed.

import { describe, expect, it } from "vitest";
import { explainRun } from "../src/cli/explain-run.js";
import { workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";

const LEASE_MS = 60_000;
const wf = workflow({ name: "held-cancel-view", version: "1" }, async (ctx) =>
  ctx.waitForEvent("go"),
);

describe.each(BACKENDS)("%s: a held run canceled", (backend) => {
  const harness = useHarness(backend);

  it("is not shown held", async () => {
    const h = harness();
    const side = h.store();
    await side.open({ clock: h.clock });
    await side.createRun({
      id: "r",
      workflow: wf.name,
      version: wf.version,
      input: "[null]",
      budgetLimit: {},
    });
    const [claimed] = await side.claimRuns({
      workerId: "wrk_a",
      workflows: [wf.id],
      limit: 1,
      leaseMs: LEASE_MS,
    });
    const released = await side.releaseRun({
      runId: "r",
      epoch: claimed!.run.epoch,
      status: "waiting",
      readyAt: null,
      waitingFor: ["go"],
      heldFor: { workerId: "wrk_a", ms: LEASE_MS },
    });
    expect(released.ok).toBe(true);
    const engine = h.engine([wf], { worker: false });
    expect((await engine.getRun("r"))?.heldBy).toBe("wrk_a");
    await engine.cancel("r", "no longer wanted");
    const run = await engine.getRun("r");
    expect(run?.status).toBe("canceled");
    expect(run?.heldBy).toBeUndefined();
    expect(run?.heldUntil).toBeUndefined();
    expect(explainRun(run!, [], new Date(h.clock.now()))).not.toContain("held by");
    await side.close();
  });
});
