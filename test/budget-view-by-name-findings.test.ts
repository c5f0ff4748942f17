// a run started by name without the workflow's code (`cairn start <name>`, HTTP POST,
// `engine.start("name")` on a client) stores only the limits given; the worker holds it to
// the workflow's default budget for the other names. The run view showed only the stored
// limits: `cairn show` printed "budget usd 2 (no limit)" beside "paused for budget: usd 2 of
// 1". A view made by an engine that has the workflow now shows the limit the run is held
// to; one made without its code (the CLI, a client) says it cannot tell.

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

const spender = workflow(
  { name: "spender", version: "1", budget: { usd: 1, tokens: 100 } },
  async (ctx) => {
    await ctx.step("pricey", async (s) => {
      s.spend({ usd: 2 });
      return 1;
    });
    return ctx.step("after", async () => 2);
  },
);

describe("the budget a run started by name is held to (SQLite)", () => {
  const dir = tempDir("cairn-budget-");
  const db = join(dir.dir, "cairn.db");
  let worker: Engine;
  let client: Engine;

  beforeAll(async () => {
    worker = createEngine({ store: sqliteStore(db), workflows: [spender], pollIntervalMs: 20 });
    client = createEngine({ store: sqliteStore(db), worker: false });
    // By name, from an engine without the code: only the limit given is stored.
    await client.start("spender", undefined, { id: "b1", budget: { tokens: 50 } });
    await until(async () => (await worker.getRun("b1"))?.status === "paused", "b1 pauses");
  });
  afterAll(async () => {
    await client.close();
    await worker.close();
    dir.cleanup();
  });

  it("an engine with the workflow shows the defaults merged in, the run's own limits first-given order", async () => {
    const run = (await worker.getRun("b1"))!;
    expect(run.pausedFor).toBe("budget");
    expect(run.budget.limit).toEqual({ usd: 1, tokens: 50 });
    expect(Object.keys(run.budget.limit)).toEqual(["usd", "tokens"]);
    expect(run.budget.defaultsUnknown).toBeUndefined();
    expect(run.budget.spent).toEqual({ usd: 2 });
    const listed = (await worker.listRuns()).find((r) => r.id === "b1")!;
    expect(listed.budget.limit).toEqual({ usd: 1, tokens: 50 });
  });

  it("a view made without the code says the defaults are unknown to it", async () => {
    const run = (await client.getRun("b1"))!;
    expect(run.budget.limit).toEqual({ tokens: 50 });
    expect(run.budget.defaultsUnknown).toBe(true);
  });

  it("cairn show never says 'no limit' for a name the workflow's default may limit", async () => {
    const res = await cairn(["show", "b1"], { CAIRN_STORE: `sqlite:${db}` });
    expect(res.code, res.stderr).toBe(0);
    const line = res.stdout.split("\n").find((l) => /^\s*budget\b/.test(l));
    expect(line, res.stdout).toBeDefined();
    expect(line).not.toContain("(no limit)");
    expect(line).toContain("usd 2 (no limit given)");
    expect(line).toContain("tokens 0 of 50");
    expect(line).toMatch(
      /; where the run was given no limit, the workflow's default budget, if any, applies$/,
    );
  });
});
