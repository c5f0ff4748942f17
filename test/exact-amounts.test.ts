// Spend summed as floats drifted: ten spends of $0.1 summed to 0.9999999999999999, so against
// a limit of $1 (a run pauses once spent reaches a limit) an eleventh attempt started;
// 0.1 + 0.2 read 0.30000000000000004 in ctx.budget.spent, the run's view, the HTTP API and
// `cairn show --json`, and an attempt whose estimate brought the sum exactly to the limit
// (0.1 spent + 0.2 estimated against 0.3) was refused as over it. Every sum of amounts is
// now rounded to 12 decimals (lib/amounts.ts), on both stores.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spendOf } from "../src/ai/pricing.js";
import { createHttpApp, type HttpApp } from "../src/http/index.js";
import { createEngine, type Engine, type Store, sqliteStore, workflow } from "../src/index.js";
import { addAmounts, roundAmount } from "../src/lib/amounts.js";
import { cairn } from "./helpers/cli.js";
import { BACKENDS, freshStorage } from "./helpers/engines.js";
import { call } from "./helpers/http.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

/** What each execution's workflow code read in ctx.budget.spent.usd, in order. */
const seen: number[] = [];
let dimesRun = 0;

/** Ten dimes against $1, then an eleventh. */
const dimes = workflow({ name: "dimes", version: "1", budget: { usd: 1 } }, async (ctx) => {
  for (let i = 0; i < 10; i++) {
    await ctx.step(`dime-${i}`, async (s) => {
      dimesRun++;
      s.spend({ usd: 0.1 });
      return i;
    });
  }
  seen.push(ctx.budget.spent.usd as number);
  await ctx.step("eleventh", async (s) => {
    dimesRun++;
    s.spend({ usd: 0.1 });
    return 10;
  });
  return ctx.budget.spent;
});

/** 0.1 spent, then an attempt estimating 0.2 against a limit of 0.3: exactly within. */
const exact = workflow({ name: "exact", version: "1", budget: { usd: 0.3 } }, async (ctx) => {
  await ctx.step("a", async (s) => {
    s.spend({ usd: 0.1 });
    return 1;
  });
  await ctx.step(
    "b",
    async (s) => {
      s.spend({ usd: 0.2 });
      return 2;
    },
    { estimate: { usd: 0.2 } },
  );
  return ctx.budget.spent;
});

/** One attempt reporting 0.1 then 0.2. */
const pair = workflow({ name: "pair", version: "1" }, async (ctx) => {
  await ctx.step("pair", async (s) => {
    s.spend({ usd: 0.1 });
    s.spend({ usd: 0.2 });
    return 1;
  });
  return ctx.budget.spent;
});

describe("roundAmount", () => {
  it("gives the double of the decimal, whatever the order of a sum", () => {
    expect(roundAmount(0.1 + 0.2)).toBe(0.3);
    const sum = addAmounts({}, { usd: 0.1 });
    for (let i = 1; i < 10; i++) addAmounts(sum, { usd: 0.1 });
    expect(sum).toEqual({ usd: 1 });
    // Integers (token counts) as they are, however large; large dollar sums without noise.
    expect(roundAmount(2 ** 60)).toBe(2 ** 60);
    expect(roundAmount(10_000.1 + 0.2)).toBe(10_000.3);
    expect(roundAmount(-(0.1 + 0.2))).toBe(-0.3);
    expect(Object.is(roundAmount(-1e-14), 0)).toBe(true);
    expect(roundAmount(Number.NaN)).toBeNaN();
  });

  it("a model call's usd is the one it was (pricing rounds with it)", () => {
    const usage = {
      inputTokens: { total: 1234, noCache: 1234, cacheRead: 0, cacheWrite: 0 },
      outputTokens: { total: 567, text: 567, reasoning: 0 },
    };
    const spend = spendOf(usage as never, { input: 2.5, output: 10 });
    expect(spend.usd).toBe(Math.round(((1234 * 2.5 + 567 * 10) / 1e6) * 1e12) / 1e12);
  });
});

describe.each(BACKENDS)("exact sums of spend (%s)", (backend) => {
  const cleanups: Array<() => Promise<void> | void> = [];
  let store: () => Store;
  let engine: Engine;
  let app: HttpApp;
  let sqlitePath = "";

  beforeAll(async () => {
    if (backend === "sqlite") {
      const db = tempDbPath();
      cleanups.push(db.cleanup);
      sqlitePath = db.path;
      store = () => sqliteStore(db.path);
    } else {
      store = freshStorage(backend, cleanups);
    }
    engine = createEngine({ store: store(), workflows: [dimes, exact, pair], pollIntervalMs: 10 });
    cleanups.push(() => engine.close());
    app = createHttpApp({ engine, log: () => {} });
  });
  afterAll(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  const status = async (id: string) => (await engine.getRun(id))?.status;

  it("ten $0.1 calls spend exactly $1: the eleventh is refused, a resume replays the same sum", async () => {
    seen.length = 0;
    dimesRun = 0;
    await engine.start(dimes, undefined, { id: "dimes" });
    await until(async () => (await status("dimes")) === "paused", "dimes pauses");
    expect(dimesRun).toBe(10);
    expect(seen).toEqual([1]);
    const run = (await engine.getRun("dimes"))!;
    expect(run.reason).toBe("budget: usd 1 of 1 spent");
    expect(run.budget.spent).toEqual({ usd: 1 });
    const api = await call<{ run: { budget: { spent: Record<string, number> } } }>(
      app.fetch,
      "GET",
      "/api/runs/dimes",
    );
    expect(api.status).toBe(200);
    expect(api.body.run.budget.spent).toEqual({ usd: 1 });

    await engine.resume("dimes", { budget: { usd: 2 } });
    await until(async () => (await status("dimes")) === "completed", "dimes completes");
    expect(dimesRun).toBe(11);
    // The replay read what the first execution read at that point.
    expect(seen).toEqual([1, 1]);
    const done = (await engine.getRun("dimes"))!;
    expect(done.output).toEqual({ usd: 1.1 });
    expect(done.budget.spent).toEqual({ usd: 1.1 });
  });

  it("an estimate bringing the sum exactly to the limit starts", async () => {
    await engine.start(exact, undefined, { id: "exact" });
    await until(async () => {
      const s = await status("exact");
      return s === "completed" || s === "paused";
    }, "exact settles");
    const run = (await engine.getRun("exact"))!;
    expect(run.status, run.reason ?? "").toBe("completed");
    expect(run.output).toEqual({ usd: 0.3 });
    expect(run.budget.spent).toEqual({ usd: 0.3 });
  });

  it("0.1 + 0.2 is 0.3 in ctx.budget, the run, its steps and the HTTP API", async () => {
    await engine.start(pair, undefined, { id: "pair" });
    await until(async () => (await status("pair")) === "completed", "pair completes");
    const run = (await engine.getRun("pair"))!;
    expect(run.output).toEqual({ usd: 0.3 });
    expect(run.budget.spent).toEqual({ usd: 0.3 });
    const api = await call<{ run: { budget: { spent: Record<string, number> } } }>(
      app.fetch,
      "GET",
      "/api/runs/pair",
    );
    expect(api.body.run.budget.spent).toEqual({ usd: 0.3 });
    const steps = await call(app.fetch, "GET", "/api/runs/pair/steps");
    expect(steps.status).toBe(200);
    expect(JSON.stringify(steps.body)).toContain('"usd":0.3');
    expect(JSON.stringify(steps.body)).not.toContain("0.30000000000000004");
  });

  it.runIf(backend === "sqlite")("cairn show says 0.3, with --json too", async () => {
    const env = { CAIRN_STORE: `sqlite:${sqlitePath}` };
    const json = await cairn(["show", "pair", "--json"], env);
    expect(json.code, json.stderr).toBe(0);
    expect(json.stdout).not.toContain("0.30000000000000004");
    expect(
      (JSON.parse(json.stdout) as { run: { budget: { spent: unknown } } }).run.budget.spent,
    ).toEqual({
      usd: 0.3,
    });
    const text = await cairn(["show", "pair"], env);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/budget\s+usd 0\.3 \(no limit/);
  });
});
