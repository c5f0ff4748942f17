// engine.approvalLinks (and approvalToken) made links for an approval that was no
// longer pending (answered, timed out, its run ended): the person they were sent to got
// "already used". `cairn approval-link` refused it; the engine now refuses the same way,
// with a RunConflictError naming the run id, the approval's key and its state.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createEngine,
  type Engine,
  RunConflictError,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const KEYS = [{ id: "k1", secret: "an-approval-signing-secret-of-32-chars!" }];
const BASE = "https://ops.example.com/cairn";

const review = workflow({ name: "review", version: "1" }, async (ctx) =>
  ctx.approval("merge", { request: { summary: "merge it" }, timeout: "2d" }),
);
const later = workflow({ name: "later", version: "1" }, async (ctx) => {
  await ctx.waitForEvent("go");
  return ctx.approval("merge", { request: {} });
});

describe("approval links of an approval that is not pending", () => {
  const db = tempDbPath();
  let engine: Engine;
  beforeAll(async () => {
    engine = createEngine({
      store: sqliteStore(db.path),
      workflows: [review, later],
      approvalKeys: KEYS,
      pollIntervalMs: 20,
    });
    for (const id of ["pending-1", "answered-1", "canceled-1"]) {
      await engine.start(review, undefined, { id });
      await until(async () => (await engine.listApprovals(id)).length === 1, `${id} asks`);
    }
    await engine.approve("answered-1", "merge", { by: "ann" });
    await until(async () => (await engine.getRun("answered-1"))?.status === "completed", "done");
    await engine.cancel("canceled-1", "not needed");
    await until(async () => (await engine.getRun("canceled-1"))?.status === "canceled", "cancel");
    await engine.start(later, undefined, { id: "later-1" });
    await engine.start(later, undefined, { id: "later-ended" });
    await until(async () => (await engine.getRun("later-ended"))?.status === "waiting", "waits");
    await engine.cancel("later-ended", "gone");
    await until(async () => (await engine.getRun("later-ended"))?.status === "canceled", "gone");
  });
  afterAll(async () => {
    await engine.close();
    db.cleanup();
  });

  it("an answered approval: refused, naming the run, the key and who answered", async () => {
    const made = engine.approvalLinks("answered-1", "merge", { baseUrl: BASE });
    await expect(made).rejects.toBeInstanceOf(RunConflictError);
    await expect(made).rejects.toThrow(
      /^Approval "merge" of run "answered-1" was already approved by "ann" at \d{4}-.*; a link to it would answer nothing, so none was made$/,
    );
    await expect(engine.approvalToken("answered-1", "merge", "reject", {})).rejects.toThrow(
      /was already approved by "ann"/,
    );
  });

  it("an approval whose run ended: refused as closed", async () => {
    await expect(engine.approvalLinks("canceled-1", "merge", { baseUrl: BASE })).rejects.toThrow(
      /^Approval "merge" of run "canceled-1" was closed: its run finished without an answer/,
    );
  });

  it("not asked yet: a link for an unfinished run, none for one that ended", async () => {
    const links = await engine.approvalLinks("later-1", "merge", { baseUrl: BASE });
    expect(links.approve.startsWith(`${BASE}/approvals/`)).toBe(true);
    await expect(engine.approvalLinks("later-ended", "merge", { baseUrl: BASE })).rejects.toThrow(
      /^Approval "merge" of run "later-ended" was never asked, and the run has ended \(canceled\)/,
    );
  });

  it("a pending approval still gets its links", async () => {
    const links = await engine.approvalLinks("pending-1", "merge", { baseUrl: BASE });
    expect(
      (await engine.inspectApprovalLink(links.approve.split("/").pop()!)).approval.status,
    ).toBe("pending");
  });
});
