// The runs indexes on PostgreSQL (migration 26): which index entries a run's row costs, and
// that every query of the store over runs stays served by an index.
//
// - An UPDATE of a run that is not HOT (its status or ready_at changes: the create, each
//   lease renewal, the release) writes an entry into every index of runs whose predicate
//   the new row meets. A running run (created claimed, or renewed) met runs_lease_owner and
//   runs_ready_at, which no query reads so: counted here as the indexes whose predicate the
//   row meets, read from the catalog, not timed.
// - EXPLAIN (enable_seqscan off) of every statement over runs the store sends while its
//   list, poll, lease, sweep and retention verbs run: none reads runs whole, and the claim,
//   markUnserved and removeWorker each use an index, so a later migration cannot leave one
//   without it silently.

import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { NewRun, Store } from "../src/store/store.js";
import { postgresTestUrl, testSchema, withClient } from "./helpers/postgres.js";

const url = await postgresTestUrl();

interface Sent {
  text: string;
  values: unknown[];
}

const seen: { sent: Sent[] | undefined } = { sent: undefined };
const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
const realQuery = proto.query;
proto.query = function (this: unknown, ...args: unknown[]) {
  const q = args[0] as string | { text?: string; values?: unknown[] };
  const text = typeof q === "string" ? q : (q.text ?? "");
  const values = (typeof q === "string" ? args[1] : (q.values ?? args[1])) as unknown[];
  seen.sent?.push({ text, values: Array.isArray(values) ? values : [] });
  return realQuery.apply(this, args);
};

function newRun(id: string, more: Partial<NewRun> = {}): NewRun {
  return { id, workflow: "wf", version: "1", input: "null", budgetLimit: {}, ...more };
}

describe.skipIf(!url)("PostgreSQL runs indexes (migration 26)", () => {
  const base = url as string;
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    seen.sent = undefined;
    while (cleanups.length > 0) await cleanups.pop()?.();
  });

  async function openStore(): Promise<{ store: Store; schema: string }> {
    const t = testSchema(base);
    cleanups.push(t.drop);
    const store = postgresStore(base, { schema: t.schema });
    await store.open({ clock: realClock });
    cleanups.push(() => store.close());
    return { store, schema: t.schema };
  }

  /** The indexes of runs whose predicate the row of `runId` meets: those an UPDATE of it
   *  that is not HOT writes an entry into. */
  async function indexesHolding(schema: string, runId: string): Promise<string[]> {
    return withClient(base, async (c) => {
      const idx = await c.query<{ name: string; pred: string | null }>(
        `SELECT ic.relname AS name, pg_get_expr(i.indpred, i.indrelid) AS pred
          FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
          WHERE i.indrelid = $1::regclass ORDER BY 1`,
        [`"${schema}".runs`],
      );
      const held: string[] = [];
      for (const { name, pred } of idx.rows) {
        const r = await c.query(
          `SELECT 1 FROM "${schema}".runs WHERE id = $1 AND (${pred ?? "true"})`,
          [runId],
        );
        if (r.rowCount === 1) held.push(name);
      }
      return held;
    });
  }

  it("a running run's row is in runs_pkey, runs_claimable, runs_created and runs_status_created only; a finished one leaves runs_claimable", async () => {
    const { store, schema } = await openStore();
    const claimBy = { workerId: "wk_1", leaseMs: 30_000 };
    const { run } = await store.createRun(newRun("run_a", { claimBy }));
    const running = ["runs_claimable", "runs_created", "runs_pkey", "runs_status_created"];
    // Its create, and each lease renewal (ready_at moves with the lease end: not HOT).
    expect(await indexesHolding(schema, "run_a")).toEqual(running);
    await store.renewLeases({
      workerId: "wk_1",
      leaseMs: 30_000,
      runs: [{ runId: "run_a", epoch: run.epoch }],
    });
    expect(await indexesHolding(schema, "run_a")).toEqual(running);
    const out = await store.releaseRun({
      runId: "run_a",
      epoch: run.epoch,
      status: "completed",
      output: "1",
      readyAt: null,
    });
    expect(out.ok).toBe(true);
    expect(await indexesHolding(schema, "run_a")).toEqual([
      "runs_created",
      "runs_pkey",
      "runs_status_created",
    ]);
    // A pending run (ready, not running) is found by the claim and by markUnserved.
    await store.createRun(newRun("run_p"));
    expect(await indexesHolding(schema, "run_p")).toEqual([
      "runs_claimable",
      "runs_created",
      "runs_pkey",
      "runs_ready_idle",
      "runs_status_created",
    ]);
  });

  it("no statement over runs reads the table whole, and the claim, markUnserved and removeWorker use their indexes", async () => {
    const { store, schema } = await openStore();
    // Runs of every kind, so each index holds rows and the statements have something to find.
    await withClient(base, (c) =>
      c.query(
        `INSERT INTO "${schema}".runs (id, workflow, version, status, input, created_at,
            updated_at, ready_at, lease_owner, lease_until, parent_id, held_by, held_until)
          SELECT 'run_' || g, 'wf', '1',
              (ARRAY['completed','failed','running','waiting','pending','paused','canceled'])[1 + g % 7],
              'null', g, g,
              CASE WHEN g % 7 IN (2, 3, 4) THEN g * 10 END,
              CASE WHEN g % 7 = 2 THEN 'wk_' || (g % 3) END,
              CASE WHEN g % 7 = 2 THEN g * 10 END,
              CASE WHEN g % 11 = 0 THEN 'run_' || (g - 1) END,
              CASE WHEN g % 50 = 0 THEN 'wk_9' END,
              CASE WHEN g % 50 = 0 THEN g * 10 END
            FROM generate_series(1, 2000) g;
          ANALYZE "${schema}".runs`,
      ),
    );
    const sent: Sent[] = [];
    seen.sent = sent;
    await store.listRuns({});
    await store.listRuns({ status: "running" });
    await store.listRuns({ status: ["running", "waiting"] });
    await store.listRuns({ parentId: "run_10" });
    await store.listRuns({ waitingForEvent: true });
    await store.listRuns({ finishedBefore: 500 });
    await store.listRuns({ status: "running", before: { createdAt: 100, id: "run_x" }, limit: 5 });
    await store.claimRuns({ workerId: "wk_7", workflows: ["wf@1"], limit: 5, leaseMs: 1000 });
    await store.renewLeases({
      workerId: "wk_7",
      leaseMs: 1000,
      runs: [{ runId: "run_4", epoch: 1 }],
    });
    await store.removeWorker("wk_1");
    await store.markUnserved({ served: ["other@1"], graceMs: 0 });
    await store.listChildrenOfCanceled?.({ limit: 10 });
    await store.deleteRuns(["run_7"], { finishedBefore: 1_000_000 });
    seen.sent = undefined;
    const plans = await withClient(base, async (c) => {
      await c.query("SET enable_seqscan = off");
      const out: Array<{ sql: string; plan: string }> = [];
      for (const { text, values } of sent) {
        if (!/\.runs\b/.test(text) || /^\s*(BEGIN|COMMIT|ROLLBACK|SET|LISTEN)\b/i.test(text)) {
          continue;
        }
        if (/^\s*INSERT INTO\s+\S+\.runs\b/i.test(text)) continue; // an insert reads no runs
        const r = await c.query(`EXPLAIN ${text}`, values);
        out.push({
          sql: text.replace(/\s+/g, " ").trim(),
          plan: r.rows.map((row) => (row as Record<string, string>)["QUERY PLAN"]).join("\n"),
        });
      }
      return out;
    });
    expect(plans.length).toBeGreaterThan(10);
    for (const { sql, plan } of plans) {
      // With seq scans off, one the planner still picks is one no index can replace.
      expect(plan, sql).not.toMatch(/Seq Scan on runs/);
    }
    const planOf = (part: string): string => {
      const found = plans.filter((p) => p.sql.includes(part));
      expect(found.length, `a statement containing "${part}"`).toBe(1);
      return found[0]!.plan;
    };
    expect(planOf("FOR UPDATE OF r SKIP LOCKED")).toMatch(/Index Scan (using|on) runs_claimable/);
    // removeWorker: the runs a dead worker leases among the running ones, its holds by held_by.
    const remove = planOf("x.lease_owner = $2 AND x.status = 'running' AS leased");
    expect(remove).toMatch(/Index Scan (using|on) runs_status_created/);
    expect(remove).toMatch(/Index Scan (using|on) runs_held_by/);
    // markUnserved: the ready runs (by an index holding ready_at), running ones by status.
    const unserved = planOf("'no live worker has '");
    expect(unserved).toMatch(/Index Scan (using|on) runs_(ready_idle|claimable|status_created)/);
  });
});
