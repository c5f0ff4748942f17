// PostgreSQL migration 27: a step insert reads its run's row once, for its fence, and not
// again for a foreign key (the key's check was an AFTER trigger and, at the statement's
// end, a second index scan of runs_pkey FOR KEY SHARE per step; issue 13). Counted on the
// server: runs_pkey's index scans while steps are written alone (the lone INSERT of
// single-step.ts), read from pg_stat_user_indexes once the writing backend's statistics
// show every insert. And what the key's ON DELETE CASCADE did, the deletes of runs do: a
// step whose insert held the run's row while the run was being deleted goes with it.

import { afterEach, describe, expect, it } from "vitest";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { Store } from "../src/store/store.js";
import { postgresTestUrl, testSchema, withClient } from "./helpers/postgres.js";
import { claimedRun, stepOf } from "./helpers/step-records.js";

const url = await postgresTestUrl();

describe.skipIf(!url)("PostgreSQL: steps fenced, not referenced (migration 27)", () => {
  const base = url as string;
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()?.();
  });

  /** A store on a schema of its own; closed after the test unless `closedByTest`. */
  async function openStore(closedByTest = false): Promise<{ store: Store; schema: string }> {
    const t = testSchema(base);
    cleanups.push(t.drop);
    const store = postgresStore(base, { schema: t.schema });
    await store.open({ clock: realClock });
    if (!closedByTest) cleanups.push(() => store.close());
    return { store, schema: t.schema };
  }

  /** The schema's runs and steps inserted and runs_pkey's index scans, as the statistics
   *  show them. */
  async function counts(
    schema: string,
  ): Promise<{ runs: number; inserted: number; runScans: number }> {
    return withClient(base, async (c) => {
      const r = await c.query<{ runs: string; inserted: string; scans: string }>(
        `SELECT (SELECT n_tup_ins FROM pg_stat_user_tables
                  WHERE schemaname = $1 AND relname = 'runs') AS runs,
                (SELECT n_tup_ins FROM pg_stat_user_tables
                  WHERE schemaname = $1 AND relname = 'steps') AS inserted,
                (SELECT idx_scan FROM pg_stat_user_indexes
                  WHERE schemaname = $1 AND indexrelname = 'runs_pkey') AS scans`,
        [schema],
      );
      return {
        runs: Number(r.rows[0]?.runs),
        inserted: Number(r.rows[0]?.inserted),
        runScans: Number(r.rows[0]?.scans),
      };
    });
  }

  /** Polls the statistics until they show `runs` runs and `inserted` steps (a backend
   *  reports its counts when idle, at most about once a second), for at most 30 s. */
  async function countsOnce(schema: string, runs: number, inserted: number) {
    for (let i = 0; i < 300; i++) {
      const c = await counts(schema);
      if (c.runs >= runs && c.inserted >= inserted) return c;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`the statistics of schema "${schema}" never showed ${inserted} steps`);
  }

  it("a step written alone reads its run's row once: 20 steps, 20 scans of runs_pkey", async () => {
    const { store: creator, schema } = await openStore(true);
    const run = await claimedRun(creator, "run_fenced");
    // A store's backends report their statistics when they exit (when idle, only every
    // few seconds): each store is closed before its counts are read.
    await creator.close();
    const before = await countsOnce(schema, 1, 0);
    const store = postgresStore(base, { schema });
    await store.open({ clock: realClock });
    for (let i = 0; i < 20; i++) {
      expect(
        await store.appendRecords([
          { runId: run.id, epoch: run.epoch, steps: [stepOf(run.id, `s${i}`, i)] },
        ]),
      ).toEqual([{ ok: true }]);
    }
    await store.close();
    const after = await countsOnce(schema, 1, 20);
    expect(after.inserted - before.inserted).toBe(20);
    // The fence's lookup alone; with the foreign key, 40 (a second lookup per insert).
    expect(after.runScans - before.runScans).toBe(20);
    // And the fence still fences: a stale epoch inserts nothing.
    const again = postgresStore(base, { schema });
    await again.open({ clock: realClock });
    cleanups.push(() => again.close());
    expect(
      await again.appendRecords([
        { runId: run.id, epoch: run.epoch - 1, steps: [stepOf(run.id, "late", 20)] },
      ]),
    ).toEqual([{ ok: false, reason: "lease-lost" }]);
    expect((await again.loadJournal(run.id)).steps).toHaveLength(20);
  });

  it("a step of an unknown run is refused as a lost lease, on both write paths", async () => {
    const { store, schema } = await openStore();
    // Alone (the lone INSERT), and beside a step of another run (append_records).
    const other = await claimedRun(store, "run_other");
    expect(
      await store.appendRecords([
        { runId: "run_gone", epoch: 1, steps: [stepOf("run_gone", "a", 0)] },
      ]),
    ).toEqual([{ ok: false, reason: "lease-lost" }]);
    expect(
      await store.appendRecords([
        { runId: other.id, epoch: other.epoch, steps: [stepOf(other.id, "a", 0)] },
        { runId: "run_gone", epoch: 1, steps: [stepOf("run_gone", "a", 0)] },
      ]),
    ).toEqual([{ ok: true }, { ok: false, reason: "lease-lost" }]);
    const left = await withClient(base, (c) =>
      c.query(`SELECT run_id FROM "${schema}".steps ORDER BY run_id`),
    );
    expect(left.rows).toEqual([{ run_id: "run_other" }]);
  });

  it("a delete of a run takes the step an insert committed while the delete waited for the run", async () => {
    const { store, schema } = await openStore();
    const run = await claimedRun(store, "run_deleted");
    await store.appendRecords([
      { runId: run.id, epoch: run.epoch, steps: [stepOf(run.id, "first", 0)] },
    ]);
    expect(
      await store.releaseRun({
        runId: run.id,
        epoch: run.epoch,
        status: "completed",
        readyAt: null,
      }),
    ).toMatchObject({ ok: true });
    await withClient(base, async (c) => {
      // A late write of the run's own epoch, as the lone INSERT makes it: the run's row
      // locked, the step inserted, not yet committed.
      await c.query("BEGIN");
      await c.query(
        `INSERT INTO "${schema}".steps (run_id, key, generation, seq, name, kind, outcome, result,
            attempt, started_at, completed_at)
          SELECT r.id, 'late', 0, 1, 'late', 'step', 'ok', '1', 1, 0, 0
            FROM "${schema}".runs r WHERE r.id = $1 AND r.epoch = $2 FOR NO KEY UPDATE`,
        [run.id, run.epoch],
      );
      const deleting = store.deleteRun(run.id);
      // The delete waits for the run's row (its FOR UPDATE), then this commits.
      for (let i = 0; ; i++) {
        const blocked = await withClient(base, (w) =>
          w.query(
            `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'
                AND query LIKE '%FOR UPDATE%' AND query LIKE $1`,
            [`%"${schema}".runs%`],
          ),
        );
        if (blocked.rows.length > 0) break;
        if (i > 300) throw new Error("the delete never waited for the run's row");
        await new Promise((r) => setTimeout(r, 20));
      }
      await c.query("COMMIT");
      expect(await deleting).toMatchObject({ deleted: true });
    });
    const left = await withClient(base, (c) =>
      c.query(`SELECT key FROM "${schema}".steps WHERE run_id = $1`, [run.id]),
    );
    expect(left.rows).toEqual([]);
  });
});
