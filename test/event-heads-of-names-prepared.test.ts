// Store.pendingEventHeadsOfNames on PostgreSQL is a prepared (named) statement, as the other
// statements each execution makes are (its claim, its journal's load, a read of one name's
// heads): parsed and planned once a connection, not at each parent's first read. Its
// generic plan is its custom plan (an index search of events_unconsumed_by_name a page).
// Counted on the client: every pg.Client query of this process (helpers/pg-queries.ts).

import { afterEach, describe, expect, it } from "vitest";
import type { EventHead } from "../src/store/store.js";
import { openedPgStore, queriesSentDuring } from "./helpers/pg-queries.js";
import { postgresTestUrl } from "./helpers/postgres.js";

const url = await postgresTestUrl();

describe.skipIf(!url)("PostgreSQL: pendingEventHeadsOfNames", () => {
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()?.();
  });

  it("is one prepared statement, the same heads on each call", async () => {
    const store = await openedPgStore(url as string, cleanups);
    await store.createRun({ id: "r", workflow: "wf", version: "1", input: "-1", budgetLimit: {} });
    for (const name of ["a", "b", "a"]) {
      await store.sendEvent({ runId: "r", name, payload: `"${name}"` });
    }
    const pages = [
      { name: "a", after: 0, limit: 10 },
      { name: "b", after: 0, limit: 10 },
    ];
    const reads: EventHead[][] = [];
    for (let i = 0; i < 3; i++) {
      const sent = await queriesSentDuring(async () => {
        reads.push(await store.pendingEventHeadsOfNames!("r", pages));
      });
      // A background read of the store's marks may come along (plain-payloads.ts).
      expect(sent.filter((s) => !s.text.includes("store_marks")).map((s) => s.name)).toEqual([
        "cairn_event_heads_of_names",
      ]);
    }
    expect(reads[0]!.map((h) => [h.name, h.seq, h.runId, h.consumedBy])).toEqual([
      ["a", 1, "r", null],
      ["a", 3, "r", null],
      ["b", 2, "r", null],
    ]);
    expect(reads[1]).toEqual(reads[0]);
    expect(reads[2]).toEqual(reads[0]);
  });
});
