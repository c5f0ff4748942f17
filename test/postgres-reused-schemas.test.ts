// test/helpers/postgres-reuse.ts hands a PostgreSQL schema a test is done with to the next
// test of the file, emptied. A reused schema must be indistinguishable from a freshly
// migrated one (every table's rows, every sequence), and a schema that cannot be emptied
// safely (its catalog changed, or a connection on it still open) must not be reused.

import { describe, expect, it } from "vitest";
import { createEngine, workflow } from "../src/index.js";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { postgresTestUrl, testSchema, withClient } from "./helpers/postgres.js";
import { reusableSchema } from "./helpers/postgres-reuse.js";

const url = await postgresTestUrl();

/** Every table's rows (ordered, applied_at left out) and every sequence's state. */
async function dump(schema: string): Promise<Record<string, unknown>> {
  return withClient(url ?? "", async (c) => {
    const out: Record<string, unknown> = {};
    const tables = await c.query<{ name: string }>(
      "SELECT tablename AS name FROM pg_tables WHERE schemaname = $1 ORDER BY 1",
      [schema],
    );
    for (const { name } of tables.rows) {
      const rows = await c.query(`SELECT * FROM "${schema}"."${name}"`);
      out[name] = rows.rows
        .map((r) => {
          const { applied_at: _, ...rest } = r as Record<string, unknown>;
          return JSON.stringify(rest);
        })
        .sort();
    }
    const seqs = await c.query<{ name: string }>(
      "SELECT sequencename AS name FROM pg_sequences WHERE schemaname = $1 ORDER BY 1",
      [schema],
    );
    for (const { name } of seqs.rows) {
      const s = await c.query(`SELECT last_value, is_called FROM "${schema}"."${name}"`);
      out[`seq ${name}`] = s.rows[0];
    }
    return out;
  });
}

async function schemaExists(schema: string): Promise<boolean> {
  return withClient(url ?? "", async (c) => {
    const r = await c.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema]);
    return r.rowCount === 1;
  });
}

const wf = workflow({ name: "fill", version: "1" }, async (ctx) => {
  const a = await ctx.step("a", async () => 1);
  const e = await ctx.waitForEvent("go");
  await ctx.effect("side", { perform: async () => "done", reconcile: async () => undefined });
  return { a, e };
});

describe.skipIf(!url)("reused PostgreSQL schemas", () => {
  it("a released schema comes back exactly as a freshly migrated one", async () => {
    const base = url ?? "";
    const fresh = testSchema(base);
    const reference = postgresStore(base, { schema: fresh.schema, poolSize: 1 });
    await reference.open({ clock: realClock });
    await reference.close();
    const expected = await dump(fresh.schema);
    await fresh.drop();

    const first = reusableSchema(base);
    const engine = createEngine({
      store: postgresStore(first.url, { schema: first.schema, poolSize: 2 }),
      workflows: [wf],
      pollIntervalMs: 10,
      log: () => {},
    });
    for (const id of ["r1", "r2"]) {
      const run = await engine.start(wf, undefined, { id });
      await engine.sendEvent(id, "go", { id });
      await run.result();
    }
    await engine.close();
    // The epoch floor and both sequences moved, beyond what the runs did.
    await withClient(base, async (c) => {
      await c.query(`UPDATE "${first.schema}".epoch_floor SET epoch = epoch + 7`);
      await c.query(`SELECT nextval('"${first.schema}".approvals_seq_seq')`);
    });
    const used = await dump(first.schema);
    expect(used).not.toEqual(expected);
    await first.release();

    const second = reusableSchema(base);
    expect(second.schema).toBe(first.schema);
    expect(await dump(second.schema)).toEqual(expected);
    // And it serves a new engine as a fresh schema does.
    const again = createEngine({
      store: postgresStore(second.url, { schema: second.schema, poolSize: 2 }),
      workflows: [wf],
      pollIntervalMs: 10,
      log: () => {},
    });
    const run = await again.start(wf, undefined, { id: "r1" });
    await again.sendEvent("r1", "go", 1);
    expect(await run.result()).toEqual({ a: 1, e: { timedOut: false, payload: 1 } });
    await again.close();
    await second.release();
  });

  it.each([
    ["on its first release", 0],
    ["on a later release", 1],
  ])("a schema whose tables a test changed is dropped, not reused (%s)", async (_, cleanUses) => {
    const base = url ?? "";
    let used = reusableSchema(base);
    const first = used.schema;
    for (let i = 0; i <= cleanUses; i++) {
      const store = postgresStore(used.url, { schema: used.schema, poolSize: 1 });
      await store.open({ clock: realClock });
      await store.close();
      if (i === cleanUses) break;
      await used.release();
      used = reusableSchema(base);
      expect(used.schema).toBe(first);
    }
    await withClient(base, (c) =>
      c.query(`ALTER TABLE "${used.schema}".steps ALTER COLUMN name DROP NOT NULL`),
    );
    await used.release();
    expect(await schemaExists(first)).toBe(false);
    const next = reusableSchema(base);
    expect(next.schema).not.toBe(first);
    await next.release();
  });

  it("a schema a store still has connections to is dropped, not reused", async () => {
    const base = url ?? "";
    const first = reusableSchema(base);
    const store = postgresStore(first.url, { schema: first.schema, poolSize: 1 });
    await store.open({ clock: realClock });
    await store.createRun({
      id: "left",
      workflow: "fill",
      version: "1",
      input: "{}",
      budgetLimit: {},
    });
    try {
      await first.release();
      expect(await schemaExists(first.schema)).toBe(false);
      const second = reusableSchema(base);
      expect(second.schema).not.toBe(first.schema);
      await second.release();
    } finally {
      await store.close().catch(() => {});
    }
  });
});
