// `cairn start` of an id that exists (nothing started) printed the budget with the note on
// the workflow's defaults twice: "Budget: tokens 100 (no limit given), usd 0.01 of 5; where
// the run was given no limit, the workflow's default budget, if any, applies (the
// workflow's defaults apply to other names)". The note is said once now (format.ts).

import { afterAll, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { waitForStatus } from "../src/testing/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDbPath } from "./helpers/sqlite.js";

const wf = workflow({ name: "budget", version: "1" }, async (ctx) => {
  await ctx.step("plan", (s) => {
    s.spend({ tokens: 100, usd: 0.01 });
    return 1;
  });
  return ctx.waitForEvent("go");
});

describe("cairn start: the budget line", () => {
  const db = tempDbPath();
  afterAll(() => db.cleanup());

  it("says once that the workflow's defaults may apply", async () => {
    const engine = createEngine({
      store: sqliteStore(db.path),
      workflows: [wf],
      pollIntervalMs: 10,
    });
    const run = await engine.start(wf, null, { id: "b1", budget: { usd: 5 } });
    await waitForStatus(run, "waiting");
    await engine.close();

    const again = await cairn([
      "start",
      "budget@1",
      "--input",
      "null",
      "--id",
      "b1",
      "--store",
      `sqlite:${db.path}`,
    ]);
    expect(again.code, again.stderr).toBe(0);
    const budget = again.stdout.split("\n").filter((l) => l.startsWith("Budget:"));
    expect(budget).toEqual([
      "Budget: tokens 100 (no limit given), usd 0.01 of 5; where the run was given no limit, the workflow's default budget, if any, applies",
    ]);

    // A run with a limit for every name spent keeps the note on other names.
    const fresh = await cairn([
      "start",
      "budget@1",
      "--id",
      "b2",
      "--budget",
      "usd=2",
      "--store",
      `sqlite:${db.path}`,
    ]);
    expect(fresh.code, fresh.stderr).toBe(0);
    expect(fresh.stdout).toContain(
      "Budget: usd 0 of 2 (the workflow's defaults apply to other names)\n",
    );
  });
});
