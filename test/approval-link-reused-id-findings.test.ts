// An approval link answers only the run it was made for: one started later under the same
// id (after retention deleted the first) refuses it (steering-findings covers that in
// sequence). The check read the run, then answered in another transaction: a run deleted
// and started again under the id in between, asking the same approval, got the old link's
// answer. The answer's transaction now checks the run is the one the link was made for.

import { describe, expect, it } from "vitest";
import { createEngine, type Store, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

describe.each(BACKENDS)("%s: an approval link used while its run's id is reused", (backend) => {
  const harness = useHarness(backend);

  it("does not answer the new run's approval asked between the link's check and its answer", async () => {
    const h = harness();
    const approvalKeys = [{ id: "k1", secret: "an-approval-signing-secret-of-32-chars!" }];
    const deploy = workflow({ name: "deploy", version: "1" }, async (ctx, build: string) => {
      const a = await ctx.approval("go", { request: { deploy: build } });
      return { build, approved: a.approved };
    });
    const w = h.engine([deploy], { approvalKeys });
    await w.start(deploy, "build-1", { id: "deploy-prod" });
    await until(async () => (await w.getRun("deploy-prod"))?.status === "waiting", "first waits");
    const links = await w.approvalLinks("deploy-prod", "go", { baseUrl: "https://ops.example" });
    const token = links.approve.slice(links.approve.lastIndexOf("/") + 1);
    // The link is followed while the first run is still waiting; before its answer lands,
    // the first run is canceled, retention deletes it, and the next deploy takes the id.
    const inner = h.store();
    let raced = false;
    const store = new Proxy(inner, {
      get(t, prop, recv) {
        const v = Reflect.get(t, prop, recv);
        if (prop === "answerApproval") {
          return async (...args: unknown[]) => {
            if (!raced) {
              raced = true;
              await w.cancel("deploy-prod", "superseded");
              await h.clock.advance(60_000);
              expect((await w.gc({ olderThan: "1s" })).runs).toBe(1);
              await w.start(deploy, "build-2-untested", { id: "deploy-prod" });
              await until(
                async () => (await w.getRun("deploy-prod"))?.status === "waiting",
                "second waits",
              );
            }
            return (v as (...a: unknown[]) => unknown).apply(t, args);
          };
        }
        return typeof v === "function" ? v.bind(t) : v;
      },
    }) as Store;
    const server = createEngine({
      store,
      workflows: [],
      clock: h.clock,
      worker: false,
      approvalKeys,
    });
    try {
      const used = await server.answerApprovalLink(token).then(
        () => "answered",
        (err: Error) => `${err.name}: ${err.message}`,
      );
      expect(raced).toBe(true);
      expect(used).toBe(
        'ApprovalTokenError: This approval link was made for an earlier run "deploy-prod", which no longer exists; nothing was changed',
      );
      expect((await w.listApprovals("deploy-prod"))[0]?.status).toBe("pending");
    } finally {
      await server.close();
    }
  });
});
