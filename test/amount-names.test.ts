// Amount names are the user's: "constructor" or "toString" is an amount like any other
// (sums read own properties, never Object.prototype's), "__proto__" is refused by name
// (it would set a prototype and the amount would vanish), and an estimate's inherited
// properties count as little as everywhere else.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

describe.each(BACKENDS)("amount names (%s)", (backend) => {
  const harness = useHarness(backend);

  it("spend, budget and replayed spend named after Object.prototype members are numbers", async () => {
    const h = harness();
    const names = ["constructor", "toString", "valueOf", "hasOwnProperty"];
    const wf = workflow({ name: "proto-names", version: "1" }, async (ctx) => {
      await ctx.step("a", (s) => {
        s.spend(Object.fromEntries(names.map((n) => [n, 2])));
        return 1;
      });
      await ctx.step("b", (s) => {
        s.spend({ constructor: 3 });
        return 2;
      });
      return ctx.budget.spent;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { budget: { constructor: 100, toString: 3 } });
    const expected = { constructor: 5, toString: 2, valueOf: 2, hasOwnProperty: 2 };
    expect(await run.result()).toEqual(expected);
    const info = await e.getRun(run.id);
    expect(info?.status).toBe("completed");
    expect(info?.budget.spent).toEqual(expected);
  });

  it('"__proto__" is refused as the name of a spend, an estimate and a budget', async () => {
    const h = harness();
    const proto = JSON.parse('{"__proto__": 1}') as Record<string, number>;
    const seen: string[] = [];
    const wf = workflow({ name: "proto-refused", version: "1" }, async (ctx) => {
      await ctx.step("spends", (s) => {
        try {
          s.spend(proto);
        } catch (err) {
          seen.push((err as Error).message);
        }
        return 1;
      });
      return ctx.step("estimates", () => 2, { estimate: proto });
    });
    const e = h.engine([wf]);
    await expect(e.start(wf, undefined, { budget: proto })).rejects.toThrow(
      'budget "__proto__" cannot name an amount; choose another name',
    );
    const run = await e.start(wf, undefined);
    await expect(run.result()).rejects.toThrow(
      `Step "estimates" of run "${run.id}": estimate "__proto__" cannot name an amount`,
    );
    expect(seen).toEqual([
      's.spend() in step "spends": "__proto__" cannot name an amount; choose another name',
    ]);
  });

  it("an estimate's inherited properties do not count against the budget", async () => {
    const h = harness();
    const estimate = Object.assign(Object.create({ usd: 1e9 }) as Record<string, number>, {
      tokens: 1,
    });
    const wf = workflow({ name: "inherited-estimate", version: "1" }, async (ctx) =>
      ctx.step("a", () => 1, { estimate }),
    );
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { budget: { usd: 10, tokens: 10 } });
    const info = await until(
      async () => {
        const r = await e.getRun(run.id);
        return r && r.status !== "running" && r.status !== "pending" ? r : undefined;
      },
      "the run to settle",
      10_000,
    );
    // On the code before this fix the inherited usd estimate paused the run on budget.
    expect(info.status).toBe("completed");
  });
});
