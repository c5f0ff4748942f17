// A run whose unconsumed events hold more than 512 MiB of payloads (520 of 1 MiB; the
// default limits allow 1,000 of 2 MiB): PostgreSQL's loadJournal read them as one JSON text,
// longer than V8's longest string, and the driver threw inside its socket handler, where no
// caller could catch it: the worker process died, and so would every worker that claimed the
// run after it. Failed (the test process died) before the mend.

import pg from "pg";
import { describe, expect, it } from "vitest";
import { createEngine, workflow } from "../src/index.js";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { pgUrl } from "./helpers/engines.js";
import { reusableSchema } from "./helpers/postgres-reuse.js";

const wf = workflow({ name: "w", version: "1" }, async (ctx) => {
  const go = await ctx.waitForEvent("go");
  return go.timedOut ? "late" : "done";
});

const COUNT = 520;
const MIB = 1024 * 1024;

describe.skipIf(!pgUrl)("PostgreSQL: a run with more than 512 MiB of pending events", () => {
  it("executes (its events are read as rows), and the worker lives", async () => {
    const reused = reusableSchema(pgUrl!);
    const store = () => postgresStore(reused.url, { schema: reused.schema });
    const limits = { maxEventsPerRun: COUNT + 10, maxPendingEventsPerRun: COUNT + 10 };
    const client = createEngine({ store: store(), workflows: [wf], worker: false, limits });
    const c = new pg.Client({ connectionString: reused.url });
    await c.connect();
    try {
      await client.start(wf, undefined, { id: "r1" });
      // As sendEvent stores a string payload (devalue's text), inserted by SQL: 520 sends
      // of 1 MiB would take minutes here.
      const payload = JSON.stringify(["x".repeat(MIB)]);
      for (let done = 0; done < COUNT; done += 20) {
        await c.query(
          `INSERT INTO "${reused.schema}".events (run_id, name, payload, created_at)
            SELECT 'r1', 'noise', $1, 0 FROM generate_series(1, $2)`,
          [payload, Math.min(20, COUNT - done)],
        );
      }
      await client.sendEvent("r1", "go", 1);
      const worker = createEngine({ store: store(), workflows: [wf], pollIntervalMs: 10, limits });
      try {
        expect(await worker.handle("r1").result()).toBe("done");
      } finally {
        await worker.close();
      }
      const left = await c.query(
        `SELECT count(*)::int AS n FROM "${reused.schema}".events
          WHERE run_id = 'r1' AND consumed_by IS NULL`,
      );
      expect(left.rows[0].n).toBe(COUNT);
      // The worker reads the events' heads only (Store.pendingEventHeads): the journal with
      // its payloads, as fork reads it, still comes as rows.
      const look = store();
      await look.open({ clock: realClock });
      try {
        expect((await look.loadJournal("r1")).events).toHaveLength(COUNT);
      } finally {
        await look.close();
      }
    } finally {
      await c.end();
      await client.close();
      await reused.release();
    }
  }, 600_000);
});
