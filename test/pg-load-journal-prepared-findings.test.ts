// loadJournal on PostgreSQL is one prepared statement (src/store/postgres/journal-load.ts):
// the steps as rows of their named columns, the other parts as JSON in a last row. A
// statement prepared before a later cairn's migration added a column to the journal's tables
// must still read the same journal after it, on the same connection, with every step
// field as stored (spend read from its text, times from bigint text, a reconciled flag).

import { afterEach, describe, expect, it } from "vitest";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { Journal, Store } from "../src/store/store.js";
import { postgresTestUrl, testSchema, withClient } from "./helpers/postgres.js";
import { claimedRun, stepOf } from "./helpers/step-records.js";

const url = await postgresTestUrl();

describe.skipIf(!url)("PostgreSQL loadJournal, prepared", () => {
  const base = url as string;
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()?.();
  });

  it("reads the same journal after a later migration added a column to its tables", async () => {
    const t = testSchema(base);
    cleanups.push(t.drop);
    // One connection: the second load meets the statement the first one prepared.
    const store: Store = postgresStore(base, { schema: t.schema, poolSize: 1 });
    await store.open({ clock: realClock });
    cleanups.push(() => store.close());
    const run = await claimedRun(store, "run_p");
    const steps = [
      stepOf(run.id, "a", 0, { spend: { tokens: 3, usd: 0.5 } }),
      stepOf(run.id, "b", 1, { kind: "effect", reconciled: true }),
      stepOf(run.id, "c", 2, {
        outcome: "error",
        result: null,
        error: { name: "E", message: "no" },
      }),
    ];
    await store.appendRecords([
      {
        runId: run.id,
        epoch: run.epoch,
        steps,
        intents: [
          { runId: run.id, key: "d", kind: "effect", name: "d", data: "[1]", createdAt: 1 },
        ],
      },
    ]);
    await store.sendEvent({ runId: run.id, name: "go", payload: '["x"]' });
    const load = async (): Promise<[Journal, Journal]> => [
      await store.loadJournal(run.id),
      await store.loadJournal(run.id, { eventPayloads: false }),
    ];
    const [before, headsBefore] = await load();
    expect(before.steps).toStrictEqual(steps);
    expect(before.intents.map((i) => i.key)).toEqual(["d"]);
    expect(before.events.map((e) => e.name)).toEqual(["go"]);
    expect(headsBefore.eventHeads?.map((e) => e.name)).toEqual(["go"]);
    await withClient(base, async (c) => {
      for (const table of ["steps", "attempts", "intents", "events"]) {
        await c.query(`ALTER TABLE "${t.schema}".${table} ADD COLUMN later_added text`);
      }
    });
    const [after, headsAfter] = await load();
    expect(after).toStrictEqual(before);
    expect(headsAfter).toStrictEqual(headsBefore);
  });
});
