// PostgreSQL's prepared statements (the store's own pool): a step written alone as one fenced
// INSERT (single-step.ts) keeps append_records's answers (fencing, a retried write, a
// conflict), and a statement prepared before another cairn's migration added a column to the
// runs table still works after it.

import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { Store } from "../src/store/store.js";
import { postgresTestUrl, testSchema, withClient } from "./helpers/postgres.js";
import { claimedRun, stepOf } from "./helpers/step-records.js";

const url = await postgresTestUrl();

describe.skipIf(!url)("PostgreSQL prepared statements", () => {
  const base = url as string;
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()?.();
  });

  async function openStore(schema?: string): Promise<{ store: Store; schema: string }> {
    let s = schema;
    if (!s) {
      const t = testSchema(base);
      s = t.schema;
      cleanups.push(t.drop);
    }
    // One connection: every verb meets the statements prepared by the verbs before it.
    const store = postgresStore(base, { schema: s, poolSize: 1 });
    await store.open({ clock: realClock });
    cleanups.push(() => store.close());
    return { store, schema: s };
  }

  it("a step written alone is fenced: a takeover committed while it waited lands nothing", async () => {
    const { store, schema } = await openStore();
    const run = await claimedRun(store, "run_f");
    const locker = new pg.Client({ connectionString: base });
    locker.on("error", () => {});
    await locker.connect();
    cleanups.push(() => locker.end());
    await locker.query("BEGIN");
    // Another worker's claim: the epoch moves on under the row lock the write waits for.
    await locker.query(`UPDATE "${schema}".runs SET epoch = epoch + 1 WHERE id = 'run_f'`);
    const written = store.appendRecords([
      { runId: run.id, epoch: run.epoch, steps: [stepOf(run.id, "a", 0)] },
    ]);
    await new Promise((r) => setTimeout(r, 200));
    await locker.query("COMMIT");
    expect(await written).toEqual([{ ok: false, reason: "lease-lost" }]);
    expect((await store.loadJournal(run.id)).steps).toEqual([]);
    // And with the epoch already moved on before the write.
    expect(
      await store.appendRecords([
        { runId: run.id, epoch: run.epoch, steps: [stepOf(run.id, "b", 1)] },
      ]),
    ).toEqual([{ ok: false, reason: "lease-lost" }]);
    expect((await store.loadJournal(run.id)).steps).toEqual([]);
  });

  it("a step written alone again is ok once stored, and a different one under its key a conflict", async () => {
    const { store } = await openStore();
    const run = await claimedRun(store, "run_c");
    const a = stepOf(run.id, "a", 0);
    const w = { runId: run.id, epoch: run.epoch };
    expect(await store.appendRecords([{ ...w, steps: [a] }])).toEqual([{ ok: true }]);
    // A retry of a write whose answer was lost: the same record, stored once.
    expect(await store.appendRecords([{ ...w, steps: [{ ...a }] }])).toEqual([{ ok: true }]);
    expect(await store.appendRecords([{ ...w, steps: [{ ...a, result: '"other"' }] }])).toEqual([
      { ok: false, reason: "conflict", key: "a" },
    ]);
    expect((await store.loadJournal(run.id)).steps).toEqual([a]);
    // A step with spend adds it to the run (append_records's way).
    const b = stepOf(run.id, "b", 1, { spend: { usd: 0.5 } });
    expect(await store.appendRecords([{ ...w, steps: [b] }])).toEqual([{ ok: true }]);
    expect((await store.getRun(run.id))?.budgetSpent).toEqual({ usd: 0.5 });
    expect((await store.loadJournal(run.id)).steps).toEqual([a, b]);
  });

  it("a newer cairn's column added to runs while the store is open does not fail its prepared statements", async () => {
    const { store, schema } = await openStore();
    const first = await claimedRun(store, "run_1");
    expect(
      await store.releaseRun({
        runId: first.id,
        epoch: first.epoch,
        status: "completed",
        output: "1",
        readyAt: null,
      }),
    ).toMatchObject({ ok: true });
    // What a later migration does to the table whose rows createRun and release_runs return.
    await withClient(base, (c) =>
      c.query(`ALTER TABLE "${schema}".runs ADD COLUMN later_added text`),
    );
    const second = await claimedRun(store, "run_2");
    expect(second).toMatchObject({ id: "run_2", status: "running" });
    expect(
      await store.appendRecords([
        { runId: second.id, epoch: second.epoch, steps: [stepOf(second.id, "a", 0)] },
      ]),
    ).toEqual([{ ok: true }]);
    const released = await store.releaseRun({
      runId: second.id,
      epoch: second.epoch,
      status: "completed",
      output: "2",
      readyAt: null,
    });
    expect(released).toMatchObject({ ok: true, run: { status: "completed", output: "2" } });
  });
});
