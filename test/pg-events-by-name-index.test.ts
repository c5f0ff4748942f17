// PostgreSQL: a read of a run's pending events of one name (pendingEventHeadsNamed) is an
// index search on (run_id, name, seq), migration 25. Without it the only index of unconsumed
// events was (run_id, seq): the read scanned every pending event of the run, or the whole
// table (17.7 ms for a name with one event among 100,000 others, 0.06 ms with the index),
// so an execution's cost still grew with events it does not take. Told by the plan, with
// sequential scans priced out (a small table is scanned whatever its indexes).

import { describe, expect, it } from "vitest";
import { realClock } from "../src/lib/clock.js";
import { eventHeadsNamedSql } from "../src/store/postgres/journal-writes.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { tablesIn } from "../src/store/postgres/sql.js";
import { pgUrl } from "./helpers/engines.js";
import { testSchema, withClient } from "./helpers/postgres.js";

describe.runIf(pgUrl)("pending events of one name on PostgreSQL", () => {
  it("are read by an index search on run, name and seq", async () => {
    const url = pgUrl!;
    const { schema, drop } = testSchema(url, "cairn_events_by_name");
    const store = postgresStore(url, { schema });
    await store.open({ clock: realClock });
    await store.close();
    try {
      const plan = await withClient(url, async (c) => {
        await c.query("SET enable_seqscan = off");
        const sql = eventHeadsNamedSql(tablesIn(schema))
          .replace("$1", "'r'")
          .replace("$2", "'go'")
          .replace("$3", "0")
          .replace("$4", "100");
        const rows = (await c.query(`EXPLAIN ${sql}`)).rows as Array<{ "QUERY PLAN": string }>;
        return rows.map((r) => r["QUERY PLAN"]).join("\n");
      });
      expect(plan).toMatch(/Index Cond: .*run_id = 'r'.*name = 'go'/);
      expect(plan).not.toMatch(/Filter: .*name/);
    } finally {
      await drop();
    }
  });
});
