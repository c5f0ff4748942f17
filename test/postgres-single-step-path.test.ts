// A step written alone on the store's own pool goes from appendRecords straight to its
// prepared INSERT (journal-writes.ts, appendSingleStep): one query a step, and the same
// answers as the batch path for what it cannot store (refused before sending, or refused by
// PostgreSQL) and for a record of another run.

import { afterEach, describe, expect, it } from "vitest";
import type { StepRecord, Store } from "../src/store/store.js";
import { openedPgStore, queriesSentDuring } from "./helpers/pg-queries.js";
import { postgresTestUrl } from "./helpers/postgres.js";
import { claimedRun, stepOf } from "./helpers/step-records.js";

const url = await postgresTestUrl();

describe.skipIf(!url)("PostgreSQL: a step written alone", () => {
  const base = url as string;
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()?.();
  });

  const openStore = (): Promise<Store> => openedPgStore(base, cleanups, { poolSize: 1 });

  it("is one query a step", async () => {
    const store = await openStore();
    const run = await claimedRun(store, "run_q");
    const w = { runId: run.id, epoch: run.epoch };
    const steps = [0, 1, 2].map((i) => stepOf(run.id, `s${i}`, i));
    const sent = await queriesSentDuring(async () => {
      for (const s of steps)
        expect(await store.appendRecords([{ ...w, steps: [s] }])).toEqual([{ ok: true }]);
    });
    expect(sent).toHaveLength(3);
    expect((await store.loadJournal(run.id)).steps).toEqual(steps);
  });

  it("what it cannot store fails as unstorable and lands nothing; the run goes on", async () => {
    const store = await openStore();
    const run = await claimedRun(store, "run_u");
    const w = { runId: run.id, epoch: run.epoch };
    const cases: Array<{ step: StepRecord; message: RegExp }> = [
      // Refused before it is sent (storable.ts).
      { step: stepOf(run.id, "nul\u0000key", 0), message: /key .*NUL character/ },
      // Refused by PostgreSQL: a seq over int4 (SQLSTATE 22003).
      { step: stepOf(run.id, "big", 2 ** 40), message: /SQLSTATE 22003/ },
    ];
    for (const c of cases) {
      expect(await store.appendRecords([{ ...w, steps: [c.step] }])).toEqual([
        {
          ok: false,
          reason: "unstorable",
          key: c.step.key,
          message: expect.stringMatching(c.message),
        },
      ]);
    }
    expect((await store.loadJournal(run.id)).steps).toEqual([]);
    const good = stepOf(run.id, "good", 0);
    expect(await store.appendRecords([{ ...w, steps: [good] }])).toEqual([{ ok: true }]);
    expect((await store.loadJournal(run.id)).steps).toEqual([good]);
  });

  it("a record of another run is refused, as a rejection", async () => {
    const store = await openStore();
    const run = await claimedRun(store, "run_o");
    const written = store.appendRecords([
      { runId: run.id, epoch: run.epoch, steps: [stepOf("someone-else", "a", 0)] },
    ]);
    await expect(written).rejects.toThrow(/names run "someone-else"/);
    expect((await store.loadJournal(run.id)).steps).toEqual([]);
  });
});
