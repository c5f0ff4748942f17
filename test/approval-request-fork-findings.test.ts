// A fork reuses the source's answered approval. The store's forkRun copied the intents of
// child calls only, so the fork held the answer without the digest of the request it was
// given to: a fork whose code (another version, the usual reason to fork) asks another
// request under the key took the answer given to the source's request ("deploy staging"
// approved, "drop production" performed). forkRun now copies an approval's intent with its
// copied outcome, and the fork's replay compares the request as the source's would.

import { describe, expect, it } from "vitest";
import { NonDeterminismError, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

/** What the deployed code asks: the tests change it between the source and the fork. */
let asking: unknown = { action: "deploy staging" };
const performed: string[] = [];

function guardedDeploy(version: string) {
  return workflow({ name: "fork-deploy", version }, async (ctx) => {
    const decision = await ctx.approval("go", { request: asking });
    await ctx.step("deploy", () => {
      if (decision.approved) performed.push(JSON.stringify(asking));
      return decision.approved;
    });
    await ctx.waitForEvent("proceed");
    return decision.approved;
  });
}
const v1 = guardedDeploy("1");
const v2 = guardedDeploy("2");

describe.each(BACKENDS)("a fork of an answered approval on %s", (backend) => {
  const harness = useHarness(backend);

  async function answeredSource() {
    const h = harness();
    const e = h.engine([v1, v2]);
    asking = { action: "deploy staging" };
    performed.length = 0;
    await e.start(v1, undefined, { id: "src" });
    await until(async () => (await e.getRun("src"))?.status === "waiting", "asked");
    await e.approve("src", "go", { by: "alice" });
    await until(
      async () => (await e.getRun("src"))?.waitingFor?.includes("proceed") === true,
      "source deployed",
    );
    expect(performed).toEqual(['{"action":"deploy staging"}']);
    return e;
  }

  it("asking another request fails the fork; nothing is performed", async () => {
    const e = await answeredSource();
    asking = { action: "drop production" };
    await e.fork("src", { fromStep: "deploy", id: "fork", version: "2" });
    // Before the mend the fork deployed and went on to wait for "proceed".
    await until(async () => {
      const fork = await e.getRun("fork");
      return fork?.status === "failed" || fork?.waitingFor?.includes("proceed");
    }, "the fork failed or deployed");
    expect(performed).toEqual(['{"action":"deploy staging"}']);
    await expect(e.handle("fork").result()).rejects.toThrow(NonDeterminismError);
    await expect(e.handle("fork").result()).rejects.toThrow(
      /approval "go" asked with another request than the code now asks/,
    );
    expect(performed).toEqual(['{"action":"deploy staging"}']);
  });

  it("asking the same request reuses the answer", async () => {
    const e = await answeredSource();
    await e.fork("src", { fromStep: "deploy", id: "fork", version: "2" });
    await until(
      async () => (await e.getRun("fork"))?.waitingFor?.includes("proceed") === true,
      "fork deployed",
    );
    await e.sendEvent("fork", "proceed", null);
    await expect(e.handle("fork").result()).resolves.toBe(true);
    expect(performed).toEqual(['{"action":"deploy staging"}', '{"action":"deploy staging"}']);
  });
});
