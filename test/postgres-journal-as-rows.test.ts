// loadJournal on PostgreSQL reads a part of a run's journal (steps, attempts, intents,
// pending events) whose rows pass 64 MiB as rows instead of as one JSON text (see
// src/store/postgres/journal-load.ts). Rows and JSON differ in how the driver hands
// columns over (bigint as text, jsonb parsed, ...): a journal read as rows must be the
// journal read as JSON, or a replay would silently see different data.

import pg from "pg";
import { describe, expect, it } from "vitest";
import { createEngine, workflow } from "../src/index.js";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { pgUrl } from "./helpers/engines.js";
import { reusableSchema } from "./helpers/postgres-reuse.js";

const MARK = "big-mark";
const BIG = 65 * 1024 * 1024;

let failed = false;
const wf = workflow({ name: "w", version: "1" }, async (ctx) => {
  await ctx.step(
    "flaky",
    () => {
      if (!failed) {
        failed = true;
        throw new Error(MARK);
      }
      return 1;
    },
    { retry: { initialDelay: "1ms", jitter: false } },
  );
  await ctx.step("big", () => ({ text: MARK, n: 2 }));
  await ctx.effect("pay", { perform: async () => "paid", reconcile: async () => undefined });
  await ctx.waitForEvent("go");
  return "done";
});

/** `value` with every occurrence of `from` in its strings replaced by `to`. */
function replaced(value: unknown, from: string, to: string): unknown {
  if (typeof value === "string") return value.replaceAll(from, to);
  if (Array.isArray(value)) return value.map((v) => replaced(v, from, to));
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, replaced(v, from, to)]));
  }
  return value;
}

describe.skipIf(!pgUrl)("PostgreSQL: a journal whose parts pass 64 MiB", () => {
  it("reads as rows exactly what it reads as JSON, for every part", async () => {
    const reused = reusableSchema(pgUrl!);
    const engine = createEngine({
      store: postgresStore(reused.url, { schema: reused.schema }),
      workflows: [wf],
      pollIntervalMs: 10,
    });
    const store = postgresStore(reused.url, { schema: reused.schema });
    await store.open({ clock: realClock });
    const c = new pg.Client({ connectionString: reused.url });
    await c.connect();
    const t = (name: string) => `"${reused.schema}".${name}`;
    try {
      await engine.start(wf, undefined, { id: "r1" });
      await engine.sendEvent("r1", "noise", { note: MARK });
      while ((await engine.getRun("r1"))?.status !== "waiting") {
        await new Promise((r) => setTimeout(r, 20));
      }
      await c.query(`UPDATE ${t("intents")} SET data = data || $1 WHERE run_id = 'r1'`, [MARK]);
      const asJson = await store.loadJournal("r1");
      // Each part's marked text made 65 MiB long: past the threshold, so read as rows.
      const big = "y".repeat(BIG);
      for (const [table, column] of [
        ["steps", "result"],
        ["attempts", "error"],
        ["intents", "data"],
        ["events", "payload"],
      ] as const) {
        const u = await c.query(
          `UPDATE ${t(table)} SET ${column} = replace(${column}, $1, repeat('y', $2))
            WHERE run_id = 'r1' AND ${column} LIKE '%' || $1 || '%'`,
          [MARK, BIG],
        );
        expect(u.rowCount, table).toBeGreaterThan(0);
      }
      const asRows = await store.loadJournal("r1");
      expect(asRows.steps.length).toBeGreaterThan(0);
      expect(asRows.attempts.length).toBeGreaterThan(0);
      expect(asRows.intents.length).toBeGreaterThan(0);
      expect(asRows.events.length).toBeGreaterThan(0);
      expect(replaced(asRows, big, MARK)).toEqual(asJson);
    } finally {
      await c.end();
      await store.close();
      await engine.close();
      await reused.release();
    }
  }, 600_000);
});
