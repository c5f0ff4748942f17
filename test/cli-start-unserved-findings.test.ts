// `cairn start name@version` of a version no live worker serves (a typo: triage@3 where
// the workers serve triage@2) started a run that stays pending, and said only "Started
// run". The run is still started (a worker for it may come), and a warning on stderr
// now says no live worker serves it, naming the versions of that name live workers serve;
// `cairn fork --version` onto such a version too.

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

const triage = workflow({ name: "triage", version: "2" }, async (ctx) => ctx.step("t", () => 1));

describe("cairn start of a version no live worker serves (SQLite)", () => {
  const dir = tempDir("cairn-unserved-");
  const db = join(dir.dir, "cairn.db");
  const env = { CAIRN_STORE: `sqlite:${db}` };
  let engine: Engine;

  beforeAll(async () => {
    engine = createEngine({ store: sqliteStore(db), workflows: [triage], pollIntervalMs: 20 });
    await until(async () => (await engine.listWorkers()).some((w) => w.live), "a live worker");
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("starts it, and warns which versions live workers serve", async () => {
    const res = await cairn(["start", "triage@3", "--id", "typo"], env);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toContain('Started run "typo" of triage@3.');
    expect(res.stderr).toBe(
      'cairn: warning: no live worker serves triage@3 (they serve triage@2); run "typo" stays pending until a worker serving triage@3 runs\n',
    );
    expect((await engine.getRun("typo"))?.status).toBe("pending");
  });

  it("says nothing more when a live worker serves it, or when nothing was started", async () => {
    const served = await cairn(["start", "triage@2", "--id", "ok"], env);
    expect(served.code, served.stderr).toBe(0);
    expect(served.stderr).toBe("");
    const again = await cairn(["start", "triage@3", "--id", "typo"], env);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain("already exists");
    expect(again.stderr).toBe("");
  });

  it("fork --version onto a version no live worker serves warns the same way", async () => {
    const ok = await cairn(["start", "triage@2", "--id", "src"], env);
    expect(ok.code, ok.stderr).toBe(0);
    await until(async () => (await engine.getRun("src"))?.status === "completed", "src done");
    const res = await cairn(["fork", "src", "--from", "t", "--version", "9", "--id", "f9"], env);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stderr).toBe(
      'cairn: warning: no live worker serves triage@9 (they serve triage@2); run "f9" stays pending until a worker serving triage@9 runs\n',
    );
    const same = await cairn(["fork", "src", "--from", "t", "--id", "f2"], env);
    expect(same.code, same.stderr).toBe(0);
    expect(same.stderr).toBe("");
  });
});
