// `cairn approval-link <id> <name>` for an approval the run has not asked for said only
// "has not asked for approval ... (yet)": unlike the HTTP API's 404, it named none of the
// run's approvals, so a typo of a name or key was left to guess. It now lists them (key,
// name, state) and says what to give instead; a run that has asked for none says so.

import { join } from "node:path";
import { afterAll, beforeAll, describe, it } from "vitest";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { cairn, expectFailure } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

const SECRET = "an-approval-signing-secret-of-32-chars!";

const review = workflow({ name: "review", version: "1" }, async (ctx) => {
  await ctx.approval("merge", { request: { summary: "first" } });
  return ctx.approval("merge", { request: { summary: "again" } });
});
const later = workflow({ name: "later", version: "1" }, async (ctx) => {
  await ctx.waitForEvent("go");
  return ctx.approval("deploy", { request: {} });
});

describe("cairn approval-link of an approval not asked for (SQLite)", () => {
  const dir = tempDir("cairn-link-");
  const path = join(dir.dir, "cairn.db");
  const env = {
    CAIRN_STORE: `sqlite:${path}`,
    CAIRN_APPROVAL_KEYS: `k1=${SECRET}`,
    CAIRN_UI_URL: "https://ops.example.com",
  };
  let engine: Engine;
  beforeAll(async () => {
    engine = createEngine({
      store: sqliteStore(path),
      workflows: [review, later],
      pollIntervalMs: 20,
      approvalKeys: [{ id: "k1", secret: SECRET }],
    });
    await engine.start(review, undefined, { id: "rv-1" });
    await until(async () => (await engine.listApprovals("rv-1")).length === 1, "asks");
    await engine.approve("rv-1", "merge", { by: "ann" });
    await until(async () => (await engine.listApprovals("rv-1")).length === 2, "asks again");
    await engine.start(later, undefined, { id: "lt-1" });
    await until(async () => (await engine.getRun("lt-1"))?.status === "waiting", "waits");
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("lists the run's approvals (key, name, state) and names a pending one to give", async () => {
    expectFailure(
      await cairn(["approval-link", "rv-1", "mrege"], env),
      1,
      'cairn: Run "rv-1" has not asked for approval "mrege"; its approvals: "merge" approved, "merge#2" (name "merge") pending; no link was printed: give one of them, e.g. cairn approval-link rv-1 \'merge#2\'\n',
    );
  });

  it("a run that has asked for none yet says so, and where to look", async () => {
    expectFailure(
      await cairn(["approval-link", "lt-1", "deploy"], env),
      1,
      'cairn: Run "lt-1" has not asked for approval "deploy", nor any other yet; no link was printed. Make the link once the run asks for it (see where it is: cairn show lt-1)\n',
    );
  });
});
