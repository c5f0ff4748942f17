// The encrypted mark's trigger install takes SHARE ROW EXCLUSIVE on the eight payload tables
// one after another (runs first), in the mark's transaction. A writer that holds a later
// table and then writes runs (append_records: steps, then the run's budget; answerApproval:
// approvals, events, then the run's ready_at) closed a cycle on every try: the install,
// holding runs while it waited for steps, lost it (a lock not had in time, or 40P01), and
// once the tries were spent markEncrypted's fallback wrote the mark WITHOUT the triggers:
// the window they close (a keyless store writing plain text until its background read of
// the mark) was open again. A try now locks first the table the last one could not have
// (plain-triggers.ts, LockOrder): it waits for steps holding no table, the writer's write of
// runs goes through, and the install takes the other tables once the writer has committed.
// (Writers that take the tables in both orders at once can still outlast the tries: then
// the mark is written alone, as before, and the next open installs them.)

import { randomBytes } from "node:crypto";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { EncryptionKeyMissingError, encryptedStore, type Store } from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { pgUrl } from "./helpers/engines.js";
import { k1, markedSchemas, url } from "./helpers/marked-schemas.js";
import { claimedRun, stepWith } from "./helpers/plain-records.js";

const { storage, triggers } = markedSchemas();

describe.skipIf(!pgUrl)("the mark's trigger install against a writer", () => {
  it("a writer that deadlocked every try of the install: the mark gets its triggers", async () => {
    const { schema, make } = storage("mark_dl");
    const tag = `mark_w_${randomBytes(4).toString("hex")}`;
    const u = new URL(url);
    u.searchParams.set("application_name", tag);
    const clock = createVirtualClock();
    const plain: Store = make();
    await plain.open({ clock });
    const { run } = await plain.createRun(claimedRun("r"));
    // The writer: steps first, then the run's row, as append_records with spend does; it
    // waits (in its transaction) until the install queues behind it each time.
    const w = new pg.Client({ connectionString: url });
    await w.connect();
    let done = false;
    let cycles = 0;
    const writer = (async () => {
      while (!done) {
        await w.query("BEGIN");
        await w.query(`DELETE FROM "${schema}".steps WHERE false`);
        for (let i = 0; i < 4000 && !done; i++) {
          const q = await w.query(
            `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
              WHERE a.application_name = $1 AND NOT l.granted`,
            [tag],
          );
          if (q.rows[0].n > 0) break;
          await new Promise((r) => setTimeout(r, 5));
        }
        if (!done) {
          await w.query(`UPDATE "${schema}".runs SET updated_at = updated_at WHERE id = 'r'`);
          cycles += 1;
        }
        await w.query("COMMIT");
      }
    })();
    const keyed = encryptedStore(make(u.toString()), { keys: [k1] });
    try {
      await keyed.open({ clock });
    } finally {
      done = true;
      await writer;
      await w.end();
    }
    try {
      expect(cycles).toBeGreaterThan(1);
      expect(await plain.isMarkedEncrypted?.()).toBe(true);
      // The keyless store, still in its window, writes a plain result: the database refuses.
      const out = await plain
        .appendRecords([{ runId: "r", epoch: run.epoch, steps: [stepWith("r", "s", '"SECRET"')] }])
        .catch((e: unknown) => e);
      expect(await triggers(schema)).toBe(8);
      expect(out).toBeInstanceOf(EncryptionKeyMissingError);
    } finally {
      await keyed.close();
      await plain.close();
    }
  }, 60_000);
});
