// cairn/testing's crash sweep on PostgreSQL (the `storage` option: a fresh schema per
// execution), with an effect and a wait.

import { describe, expect, it } from "vitest";
import { workflow } from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { crashSweep, createSideEffectCounter } from "../src/testing/index.js";
import { pgUrl } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";

const describePg = pgUrl ? describe : describe.skip;

describePg("crashSweep on PostgreSQL", () => {
  it("every boundary ends as the undisturbed run did; a fresh schema per execution", async () => {
    const url = pgUrl as string;
    const fx = createSideEffectCounter();
    const opened = new Set<string>();
    const schemas: string[] = [];
    const wf = workflow({ name: "pg-sweep", version: "1" }, async (ctx) => {
      const a = await ctx.step("a", () => 2);
      await ctx.effect("pr", {
        perform: (key) => {
          fx.record("pull-request");
          opened.add(key);
          return 1;
        },
        reconcile: (key) => (opened.has(key) ? 1 : undefined),
      });
      const w = await ctx.waitForEvent<number>("go", { timeout: "1d" });
      return a + (w.timedOut ? 0 : w.payload);
    });
    const res = await crashSweep({
      workflows: [wf],
      workflow: wf,
      input: undefined,
      events: [{ name: "go", payload: 5 }],
      sideEffects: fx,
      reset: () => opened.clear(),
      storage: () => {
        const { schema, drop } = testSchema(url);
        schemas.push(schema);
        return { store: () => postgresStore(url, { schema }), cleanup: drop };
      },
    });
    expect(res.baseline).toEqual({
      status: "completed",
      output: 7,
      sideEffects: { "pull-request": 1 },
    });
    expect(res.failures).toEqual([]);
    expect(res.boundaries.every((b) => b.crashed)).toBe(true);
    expect(schemas.length).toBe(res.boundaries.length + 1);
    expect(new Set(schemas).size).toBe(schemas.length);
  });
});
