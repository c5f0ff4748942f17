// `cairn resume` of a run paused for budget said "Resumed run" and nothing more when the
// run could only pause again at once: resumed without --budget (its limits unchanged),
// or with a limit not above what was spent (a run pauses once its spend reaches a limit:
// usd 2 spent, --budget usd=2). It now warns on stderr, naming what holds it.

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

const costly = workflow({ name: "costly", version: "1", budget: { usd: 1 } }, async (ctx) => {
  await ctx.step("a", (s) => {
    s.spend({ usd: 2 });
  });
  return ctx.step("b", () => "done");
});

describe("cairn resume of a run its budget still holds (SQLite)", () => {
  const dir = tempDir("cairn-resume-");
  const db = join(dir.dir, "cairn.db");
  const env = { CAIRN_STORE: `sqlite:${db}` };
  let engine: Engine;
  const paused = () =>
    until(async () => (await engine.getRun("c-1"))?.status === "paused", "c-1 paused");

  beforeAll(async () => {
    engine = createEngine({ store: sqliteStore(db), workflows: [costly], pollIntervalMs: 20 });
    await engine.start(costly, undefined, { id: "c-1" });
    await paused();
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("without --budget: says its limits are unchanged, naming the pause", async () => {
    const res = await cairn(["resume", "c-1"], env);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stderr).toContain(
      'cairn: warning: run "c-1" was paused for budget (usd 2 of 1 spent) and is resumed with its limits unchanged',
    );
    await paused();
  });

  it("with a limit spend has reached: says so; with one above it: nothing", async () => {
    const reached = await cairn(["resume", "c-1", "--budget", "usd=2"], env);
    expect(reached.code, reached.stderr).toBe(0);
    expect(reached.stderr).toContain(
      'cairn: warning: run "c-1" has spent what its budget allows (usd 2 of 2)',
    );
    await paused();
    const raised = await cairn(["resume", "c-1", "--budget", "usd=5"], env);
    expect(raised.code, raised.stderr).toBe(0);
    expect(raised.stderr).toBe("");
    await until(async () => (await engine.getRun("c-1"))?.status === "completed", "c-1 done");
  });
});
