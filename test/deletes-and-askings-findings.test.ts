// Two defects an audit found, each with its regression test, on both backends:
// - deleteRun (one run) deleted a finished parent whose child run remained, which retention
//   (deleteRuns) keeps: a run started later under the parent's id would adopt that child.
// - an approval link made for one asking of an approval, never used, answered the approval
//   when a resume asked it again (after an answer had failed the run).

import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ApprovalTokenError, FatalError, workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { within } from "./helpers/within.js";

const KEYS = [{ id: "k1", secret: "an-approval-signing-secret-of-32-chars!" }];

const child = workflow({ name: "delete-child", version: "1" }, async (ctx) => {
  await ctx.waitForEvent("go");
  return "child done";
});

const parent = workflow({ name: "delete-parent", version: "1" }, async (ctx) => {
  const c = ctx.child("c", child, null);
  c.catch(() => {});
  await ctx.step("s", () => 1);
  throw new FatalError("parent gives up");
});

const pick = workflow({ name: "asking-pick", version: "1" }, async (ctx) => {
  const a = await ctx.approval("pick", {
    request: "pick a or b",
    schema: { answer: z.object({ choice: z.enum(["a", "b"]) }) },
  });
  return a.answer;
});

describe.each(BACKENDS)("%s", (backend) => {
  const harness = useHarness(backend);

  it("deleteRun keeps a finished parent whose child run remains, naming the child, as retention does", async () => {
    const h = harness();
    const e = h.engine([parent, child]);
    await e.start(parent, undefined, { id: "PA" });
    await until(async () => (await e.getRun("PA"))?.status === "failed", "PA fails");
    await until(async () => (await e.getRun("PA/c"))?.status === "waiting", "PA/c waits");
    const store = h.store();
    await store.open({ clock: h.clock });
    try {
      const refused = { deleted: false, reason: "has-children", children: ["PA/c"] };
      expect(await store.deleteRun("PA")).toEqual(refused);
      expect((await e.getRun("PA"))?.status).toBe("failed");
      // A finished child still holds its parent: both go, child first (or in one deleteRuns).
      await e.sendEvent("PA/c", "go", null);
      await until(async () => (await e.getRun("PA/c"))?.status === "completed", "PA/c ends");
      expect(await store.deleteRun("PA")).toEqual(refused);
      expect(await store.deleteRun("PA/c")).toMatchObject({ deleted: true });
      expect(await store.deleteRun("PA")).toMatchObject({ deleted: true });
      expect(await e.getRun("PA")).toBeUndefined();
    } finally {
      await store.close();
    }
  });

  it("an approval link made for an earlier asking, never used, does not answer the approval a resume asks again", async () => {
    const h = harness();
    const e = h.engine([pick], { approvalKeys: KEYS });
    const run = await e.start(pick, undefined, { id: "ap1" });
    await until(async () => (await e.getRun("ap1"))?.status === "waiting", "ap1 waits");
    // Two links for the first asking; the operator answers through another path.
    const oldApprove = await e.approvalToken("ap1", "pick", "approve", { by: "alice" });
    await e.approve("ap1", "pick", { by: "u", answer: { choice: "c" } });
    await expect(within(run.result(), 20_000, "ap1 fails")).rejects.toThrow(/invalid/);
    await e.resume("ap1");
    await until(async () => (await e.getRun("ap1"))?.status === "waiting", "ap1 waits again");
    expect((await e.listApprovals("ap1")).map((a) => a.status)).toEqual(["pending"]);

    const refused = await e.answerApprovalLink(oldApprove).then(
      () => "answered",
      (err: Error) => err,
    );
    expect(refused).toBeInstanceOf(ApprovalTokenError);
    expect((refused as Error).message).toMatch(/earlier asking of approval "pick" of run "ap1"/);
    await expect(e.inspectApprovalLink(oldApprove)).rejects.toBeInstanceOf(ApprovalTokenError);
    // Nothing changed: still pending, and a link made for this asking answers it.
    expect((await e.listApprovals("ap1")).map((a) => a.status)).toEqual(["pending"]);
    const fresh = await e.approvalToken("ap1", "pick", "reject", { by: "bob" });
    expect(await e.answerApprovalLink(fresh)).toMatchObject({
      status: "rejected",
      answeredBy: "bob",
    });
  });
});
