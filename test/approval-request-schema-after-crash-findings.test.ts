// An approval's request schema (a default filled in, a secret redacted) makes the request
// the approvals row stores, which the approver is shown. A worker that died between the
// asking's intent and its approvals row left the next execution to store the row: it ran
// the schema only for an asking with no intent, so it stored the request raw, another than
// the first execution would have stored (here: no target, where the schema's default says
// production). The schema now makes the stored request on such a replay too.

import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createEngine, type Store, workflow } from "../src/index.js";
import { faultyStore } from "../src/testing/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

const deploy = workflow({ name: "schema-deploy", version: "1" }, async (ctx) => {
  const decision = await ctx.approval("go", {
    request: { action: "deploy" } as { action: string; target?: string },
    schema: {
      request: z.object({ action: z.string(), target: z.string().default("production") }),
    },
  });
  return decision.approved;
});

const shown = { action: "deploy", target: "production" };

describe.each(BACKENDS)("an approval's request schema on %s", (backend) => {
  const harness = useHarness(backend);

  it("makes the stored request", async () => {
    const h = harness();
    const e = h.engine([deploy]);
    await e.start(deploy, undefined, { id: "plain" });
    await until(async () => (await e.listApprovals("plain")).length > 0, "asked");
    expect((await e.listApprovals("plain"))[0]?.request).toEqual(shown);
  });

  it("makes it also when a crash between the intent and the row left the row to a replay", async () => {
    const h = harness();
    // The first worker writes the intent, then dies before the approvals row.
    let dead = false;
    const stalled = new (class extends Set<keyof Store> {
      override has(verb: keyof Store): boolean {
        return dead || super.has(verb);
      }
    })(["requestApproval"]);
    const first = createEngine({
      store: faultyStore(h.store(), { stalled }),
      workflows: [deploy],
      clock: h.clock,
      pollIntervalMs: 10,
      closeGraceMs: 50,
    });
    await first.start(deploy, undefined, { id: "crashed" });
    const probe = h.store();
    await probe.open({ clock: h.clock });
    try {
      await until(
        async () => (await probe.loadJournal("crashed")).intents.some((i) => i.key === "go"),
        "the asking's intent",
      );
      expect(await probe.listApprovals("crashed")).toEqual([]);
      dead = true;
      // Its lease runs out; another worker executes the run again.
      await h.clock.advance(120_000);
      const second = h.engine([deploy]);
      await until(async () => (await second.listApprovals("crashed")).length > 0, "asked again");
      // Before the mend: { action: "deploy" }.
      expect((await second.listApprovals("crashed"))[0]?.request).toEqual(shown);
      await second.approve("crashed", "go", { by: "alice" });
      await expect(second.handle("crashed").result()).resolves.toBe(true);
    } finally {
      await probe.close();
    }
  });
});
