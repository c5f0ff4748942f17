// A run paused for its budget said "budget: usd 0.0100 of 0.0050 spent" (the budget
// ledger's own format: fixed decimals), where `cairn resume` and `cairn show` said "usd 0.01
// of 0.005" (the CLI's) and the dashboard a third way for big numbers: one amount, two
// spellings. Every part now writes amounts with lib/amounts.ts's formatAmount.

import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHttpApp } from "../src/http/index.js";
import { createEngine, type Engine, sqliteStore, workflow } from "../src/index.js";
import { formatAmount } from "../src/lib/amounts.js";
import { cairn } from "./helpers/cli.js";
import { tempDir, until } from "./helpers/sqlite.js";

const pricey = workflow({ name: "pricey", version: "1" }, async (ctx) => {
  await ctx.step("a", (s) => {
    s.spend({ usd: 0.01, tokens: 1234.5 });
    return 1;
  });
  await ctx.step("b", () => 2);
});

describe("one format for amounts: a budget's reason, the CLI and the dashboard", () => {
  const dir = tempDir("cairn-amounts-");
  const db = join(dir.dir, "cairn.db");
  const env = { CAIRN_STORE: `sqlite:${db}` };
  let engine: Engine;

  beforeAll(async () => {
    engine = createEngine({ store: sqliteStore(db), workflows: [pricey], pollIntervalMs: 20 });
    await engine.start(pricey, undefined, { id: "p1", budget: { usd: 0.005 } });
    await until(async () => (await engine.getRun("p1"))?.status === "paused", "p1 pauses");
  });
  afterAll(async () => {
    await engine.close();
    dir.cleanup();
  });

  it("formatAmount: the number itself, noise rounded away, no padding, no exponent", () => {
    expect(formatAmount(0.1 + 0.2)).toBe("0.3");
    expect(formatAmount(0.005)).toBe("0.005");
    expect(formatAmount(0.0012)).toBe("0.0012");
    expect(formatAmount(0.0123456)).toBe("0.0123456");
    expect(formatAmount(1e-7)).toBe("0.0000001");
    expect(formatAmount(2)).toBe("2");
    expect(formatAmount(-0)).toBe("0");
    expect(formatAmount(1234.5, { grouping: true })).toBe("1,234.5");
  });

  it("the paused reason, cairn show and cairn resume write the amounts alike", async () => {
    expect((await engine.getRun("p1"))?.reason).toBe("budget: usd 0.01 of 0.005 spent");
    const shown = await cairn(["show", "p1"], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain("paused for budget: usd 0.01 of 0.005 spent");
    expect(shown.stdout).toContain(
      "  budget      tokens 1234.5 (no limit given), usd 0.01 of 0.005;",
    );
    const resumed = await cairn(["resume", "p1", "--budget", "usd=0.001"], env);
    expect(resumed.stderr).toContain("usd 0.01 of 0.001");
    await until(async () => (await engine.getRun("p1"))?.status === "paused", "p1 pauses again");
    expect((await engine.getRun("p1"))?.reason).toBe("budget: usd 0.01 of 0.001 spent");
  });

  it("the dashboard's run page writes them so too", async () => {
    const app = createHttpApp({ engine });
    try {
      const page = await (await app.fetch(new Request("http://localhost/runs/p1"))).text();
      expect(page).toContain("budget: usd 0.01 of 0.001 spent");
      expect(page).toContain('<span class="figures">0.01 of 0.001 · over budget</span>');
      expect(page).not.toMatch(/0\.0100|0\.0010/);
    } finally {
      app.close();
    }
  });
});
