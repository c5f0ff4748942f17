// The asking's intent holds a digest of the request as handed in, taken by the codec. A
// request the codec refuses as handed in (a class instance) but its request schema turns
// into data it stores (a transform) was asked, stored and answered with no digest in its
// intent: a replay whose code asks another such request under the key was compared with
// nothing and took the answer given to the stored one ("deploy staging" approved, "deploy
// production" performed). Such a request is now digested with each class instance read as
// its class's name and own enumerable properties (approval-request-digest.ts).

import { describe, expect, it } from "vitest";
import { z } from "zod";
import { NonDeterminismError, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

class Deploy {
  constructor(readonly target: string) {}
}

let target = "staging";
const performed: string[] = [];

const guarded = workflow({ name: "undigested", version: "1" }, async (ctx) => {
  const request = new Deploy(target);
  const decision = await ctx.approval("go", {
    request,
    schema: { request: z.instanceof(Deploy).transform((d) => ({ target: d.target })) },
  });
  await ctx.waitForEvent("proceed");
  if (decision.approved) performed.push(request.target);
  return decision.approved;
});

describe.each(BACKENDS)("a request the schema makes storable on %s", (backend) => {
  const harness = useHarness(backend);

  async function answered() {
    const h = harness();
    const e = h.engine([guarded]);
    target = "staging";
    performed.length = 0;
    await e.start(guarded, undefined, { id: "undigested" });
    await until(async () => (await e.listApprovals("undigested")).length > 0, "asked");
    expect((await e.listApprovals("undigested"))[0]?.request).toEqual({ target: "staging" });
    await e.approve("undigested", "go", { by: "alice" });
    await until(
      async () => (await e.getRun("undigested"))?.waitingFor?.includes("proceed") === true,
      "answered",
    );
    return e;
  }

  it("a replay that asks another such request fails the run", async () => {
    const e = await answered();
    target = "production";
    await e.sendEvent("undigested", "proceed", null);
    // Before the mend: the run completed, having performed "production" on staging's
    // approval.
    await until(async () => {
      const s = (await e.getRun("undigested"))?.status;
      return s === "failed" || s === "completed";
    }, "the run ended");
    expect(performed).toEqual([]);
    await expect(e.handle("undigested").result()).rejects.toThrow(NonDeterminismError);
  });

  it("a replay that asks the same such request takes its answer", async () => {
    const e = await answered();
    await e.sendEvent("undigested", "proceed", null);
    await expect(e.handle("undigested").result()).resolves.toBe(true);
    expect(performed).toEqual(["staging"]);
  });
});
