// loadJournal on PostgreSQL reads a run's steps as arrays of their columns (but run_id, and
// spend as text), not as objects (src/store/postgres/journal-load.ts): a replay must
// see every field exactly as the same rows read one by one make it (rows.ts toStep), for
// every kind of step record: a value, a failure, spend, an effect performed and one
// reconciled, a drawn value, a sleep, an event wait, and a key holding two generations.

import pg from "pg";
import { describe, expect, it } from "vitest";
import { createEngine, workflow } from "../src/index.js";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { type StepRow, toStep } from "../src/store/postgres/rows.js";
import { pgUrl } from "./helpers/engines.js";
import { reusableSchema } from "./helpers/postgres-reuse.js";

let failRun = true;
const wf = workflow({ name: "w", version: "1" }, async (ctx) => {
  await ctx.step("value", () => ({ text: 'a\u0000b \u2028 "q"', n: 1.5, big: 2 ** 60 }));
  await ctx
    .step("fails", () => Promise.reject(new TypeError("no")), { retry: { maxAttempts: 1 } })
    .catch(() => undefined);
  await ctx.step("spends", (s) => {
    s.spend({ tokens: 12, usd: 0.25 });
    return null;
  });
  await ctx.effect("performed", { perform: async () => "p", reconcile: async () => undefined });
  // Its perform throws after (say) the charge went through: the next attempt asks reconcile
  // first, which finds it.
  let performs = 0;
  await ctx.effect(
    "reconciled",
    {
      perform: async () => {
        performs++;
        throw new Error("cut after the effect");
      },
      reconcile: async () => (performs > 0 ? "found" : undefined),
    },
    { retry: { maxAttempts: 2, initialDelay: "1ms", jitter: false } },
  );
  await ctx.now();
  await ctx.sleep("nap", 1);
  const last = await ctx.step("again", () => (failRun ? Promise.reject(new Error("x")) : 7), {
    retry: { maxAttempts: 1 },
  });
  await ctx.waitForEvent("go");
  return last;
});

describe.skipIf(!pgUrl)("PostgreSQL loadJournal: steps read as arrays", () => {
  it("hands replay every step field as the rows read one by one make it", async () => {
    const reused = reusableSchema(pgUrl!);
    const store = postgresStore(reused.url, { schema: reused.schema });
    const engine = createEngine({ store, workflows: [wf], pollIntervalMs: 10 });
    const reader = postgresStore(reused.url, { schema: reused.schema });
    await reader.open({ clock: realClock });
    const c = new pg.Client({ connectionString: reused.url });
    await c.connect();
    try {
      const h = await engine.start(wf, undefined, { id: "r1" });
      await expect(h.result()).rejects.toThrow("x");
      // The failed "again" runs again: a second generation under its key.
      failRun = false;
      await engine.resume("r1");
      while ((await engine.getRun("r1"))?.status !== "waiting") {
        await new Promise((r) => setTimeout(r, 20));
      }
      const loaded = await reader.loadJournal("r1");
      const rows = await c.query<StepRow>(
        `SELECT x.* FROM "${reused.schema}".steps x WHERE x.run_id = 'r1'
          ORDER BY x.seq, x.key, x.generation`,
      );
      const kinds = new Set(loaded.steps.map((s) => `${s.kind}:${s.outcome}`));
      expect([...kinds].sort()).toEqual(
        ["effect:ok", "now:ok", "sleep:ok", "step:error", "step:ok"].sort(),
      );
      expect(loaded.steps.some((s) => s.reconciled === true)).toBe(true);
      expect(loaded.steps.some((s) => s.reconciled === false)).toBe(true);
      expect(loaded.steps.some((s) => Object.keys(s.spend).length > 0)).toBe(true);
      expect(loaded.steps.filter((s) => s.key === "again").map((s) => s.generation)).toEqual([
        0, 1,
      ]);
      expect(loaded.steps).toStrictEqual(rows.rows.map(toStep));
    } finally {
      await c.end();
      await reader.close();
      await engine.close();
      await reused.release();
    }
  }, 120_000);
});
