// `cairn approval-link` for an approval already answered: it printed two links and
// "each works once" as if they worked, and the person they were sent to got "This approval
// link was already used". It now says the approval's state (exit 1) and prints no link;
// a pending approval still gets its links.

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { cairn, expectFailure } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

const KEYS = "k1=an-approval-signing-secret-of-32-chars!";

const review = workflow({ name: "review", version: "1" }, async (ctx) =>
  ctx.approval("merge", { request: { summary: "merge it" }, timeout: "2d" }),
);

describe("cairn approval-link for an approval that is not pending (SQLite)", () => {
  const dir = tempDir("cairn-links-");
  const db = join(dir.dir, "cairn.db");
  const env = {
    CAIRN_STORE: `sqlite:${db}`,
    CAIRN_APPROVAL_KEYS: KEYS,
    CAIRN_UI_URL: "https://ops.example.com/cairn",
  };
  let engine: Engine;

  beforeAll(async () => {
    engine = createEngine({ store: sqliteStore(db), workflows: [review], pollIntervalMs: 20 });
    for (const id of ["pending-1", "answered-1"]) {
      await engine.start(review, undefined, { id });
      await until(async () => (await engine.listApprovals(id)).length === 1, `${id} asks`);
    }
    await engine.approve("answered-1", "merge", { by: "ann" });
    await until(async () => (await engine.getRun("answered-1"))?.status === "completed", "done");
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("refuses an answered approval, saying who answered; prints no link", async () => {
    expectFailure(
      await cairn(["approval-link", "answered-1", "merge"], env),
      1,
      /^cairn: Approval "merge" of run "answered-1" was already approved by "ann" at .*; a link to it would answer nothing, so none was made/,
    );
  });

  it("still prints the links of a pending approval", async () => {
    const res = await cairn(["approval-link", "pending-1", "merge", "--json"], env);
    expect(res.code, res.stderr).toBe(0);
    const links = JSON.parse(res.stdout) as { approve: string; reject: string };
    expect(links.approve).toMatch(/^https:\/\/ops\.example\.com\/cairn\/approvals\/ca1\.k1\./);
    expect(links.reject).toMatch(/^https:\/\/ops\.example\.com\/cairn\/approvals\/ca1\.k1\./);
  });
});
