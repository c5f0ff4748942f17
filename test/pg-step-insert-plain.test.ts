// A step written alone on PostgreSQL (single-step.ts) is a plain INSERT, not INSERT ... ON
// CONFLICT DO NOTHING: the speculative insertion of the latter probed steps_pkey before the
// insert and wrote a HEAP_CONFIRM WAL record after it, for each step of every run (20 of
// 48 bytes per 20-step run, read with pg_walinspect). A key already taken (a retry after a
// lost answer, or a conflicting record) is then the unique violation of steps_pkey, which
// lands nothing and hands the write to append_records, which answers as it always did: an
// identical record is "ok", another one a conflict, never "unstorable".

import { afterEach, describe, expect, it } from "vitest";
import type { Store } from "../src/store/store.js";
import { openedPgStore, queriesSentDuring } from "./helpers/pg-queries.js";
import { postgresTestUrl, withClient } from "./helpers/postgres.js";
import { claimedRun, stepOf } from "./helpers/step-records.js";

const url = await postgresTestUrl();

describe.skipIf(!url)("PostgreSQL: a step written alone is a plain INSERT", () => {
  const base = url as string;
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()?.();
  });

  const openStore = (): Promise<Store> => openedPgStore(base, cleanups, { poolSize: 1 });

  it("its plan has no conflict arbiter (no speculative insertion)", async () => {
    const store = await openStore();
    const run = await claimedRun(store, "run_plain");
    const sent = await queriesSentDuring(async () => {
      expect(
        await store.appendRecords([
          { runId: run.id, epoch: run.epoch, steps: [stepOf(run.id, "s0", 0)] },
        ]),
      ).toEqual([{ ok: true }]);
    });
    const insert = sent.filter((s) => s.name === "cairn_insert_single_step");
    expect(insert).toHaveLength(1);
    const plan = await withClient(base, async (c) => {
      const r = await c.query(`EXPLAIN ${insert[0]!.text}`, insert[0]!.values);
      return r.rows.map((row) => (row as Record<string, string>)["QUERY PLAN"]).join("\n");
    });
    expect(plan).toMatch(/Insert on steps/);
    expect(plan).not.toMatch(/Conflict/);
  });

  it("a key already taken goes to append_records: the same record is ok, another a conflict, and nothing more lands", async () => {
    const store = await openStore();
    const run = await claimedRun(store, "run_taken");
    const w = { runId: run.id, epoch: run.epoch };
    const s0 = stepOf(run.id, "s0", 0);
    expect(await store.appendRecords([{ ...w, steps: [s0] }])).toEqual([{ ok: true }]);
    // The same write again (a retry after its answer was lost): ok, one row.
    const again = await queriesSentDuring(async () => {
      expect(await store.appendRecords([{ ...w, steps: [s0] }])).toEqual([{ ok: true }]);
    });
    // It went to the INSERT first, then to append_records's decision.
    expect(again.map((s) => s.name)).toContain("cairn_insert_single_step");
    // Another record under the key: refused as a conflict, not as a value PostgreSQL refused.
    const other = { ...s0, result: "2" };
    const [out] = await store.appendRecords([{ ...w, steps: [other] }]);
    expect(out?.ok).toBe(false);
    expect(out).not.toMatchObject({ reason: "unstorable" });
    expect((await store.loadJournal(run.id)).steps).toEqual([s0]);
    // And the run goes on: the next key is written by the INSERT.
    const s1 = stepOf(run.id, "s1", 1);
    expect(await store.appendRecords([{ ...w, steps: [s1] }])).toEqual([{ ok: true }]);
    expect((await store.loadJournal(run.id)).steps).toEqual([s0, s1]);
  });
});
