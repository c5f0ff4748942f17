// The encrypted mark's trigger install (postgres/plain-triggers.ts) locks the payload tables
// one after another, runs first. Queued behind a long transaction that writes steps, it held
// runs' lock the whole wait, so every writer of runs (claims, renewals, releases) stalled
// behind it until that transaction ended. It now waits INSTALL_LOCK_TIMEOUT_MS for a table,
// gives every table back, and tries again: a writer of runs goes through while the long
// transaction still holds steps, and the mark gets its triggers once that transaction ends.
// The mark's removal (DROP TRIGGER: ACCESS EXCLUSIVE) gives up the same way, and removes the
// mark alone (the triggers left read the mark before they refuse: they refuse nothing).

import pg from "pg";
import { describe, expect, it } from "vitest";
import { encryptedStore, type Store } from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { pgUrl } from "./helpers/engines.js";
import { k1, markedSchemas, url } from "./helpers/marked-schemas.js";
import { claimedRun } from "./helpers/plain-records.js";

const { storage, triggers, untilLockWait } = markedSchemas();

/** Returns once a lock on `table` of `schema` is waited for. */
const untilWaitOn = (schema: string, table: string) =>
  untilLockWait("NOT granted AND relation = $1::regclass", `"${schema}".${table}`);

describe.skipIf(!pgUrl)("the encrypted mark's trigger install behind a long transaction", () => {
  it("gives runs back while it waits, and is guarded once the transaction ends", async () => {
    const { schema, make } = storage("mark_locks");
    const clock = createVirtualClock();
    const plain: Store = make();
    await plain.open({ clock });
    await plain.createRun(claimedRun("r"));
    const holder = new pg.Client({ connectionString: url });
    const writer = new pg.Client({ connectionString: url });
    await holder.connect();
    await writer.connect();
    const keyed = encryptedStore(make(), { keys: [k1] });
    try {
      // A long transaction that writes steps: it holds their ROW EXCLUSIVE lock.
      await holder.query("BEGIN");
      await holder.query(`DELETE FROM "${schema}".steps WHERE false`);
      const opened = keyed.open({ clock });
      // The install queues behind it for steps (holding runs, before the mend, meanwhile).
      await untilWaitOn(schema, "steps");
      // A writer of runs, as a lease renewal: it goes through while the holder still holds
      // steps (before the mend it waited for the holder, i.e. here for ever: the statement
      // timeout ends it as a failure instead).
      await writer.query("SET statement_timeout = '20s'");
      const renewed = await writer.query(
        `UPDATE "${schema}".runs SET updated_at = updated_at WHERE id = 'r'`,
      );
      expect(renewed.rowCount).toBe(1);
      await holder.query("COMMIT");
      await opened;
      expect(await plain.isMarkedEncrypted?.()).toBe(true);
      expect(await triggers(schema)).toBe(8);
    } finally {
      await holder.query("ROLLBACK").catch(() => {});
      await holder.end();
      await writer.end();
      await keyed.close();
      await plain.close();
    }
  }, 60_000);

  it("the mark's removal gives the tables back too, and the mark goes", async () => {
    const { schema, make } = storage("mark_locks");
    const clock = createVirtualClock();
    const keyed = encryptedStore(make(), { keys: [k1] });
    await keyed.open({ clock });
    await keyed.createRun(claimedRun("r"));
    expect(await triggers(schema)).toBe(8);
    const holder = new pg.Client({ connectionString: url });
    const writer = new pg.Client({ connectionString: url });
    await holder.connect();
    await writer.connect();
    try {
      await holder.query("BEGIN");
      await holder.query(`DELETE FROM "${schema}".steps WHERE false`);
      // DROP TRIGGER takes ACCESS EXCLUSIVE on runs, then queues for steps: before the mend
      // it held runs until the holder ended (the writer below timed out), now it gives up.
      const unmarked = keyed.unmarkEncrypted?.();
      await untilWaitOn(schema, "steps");
      await writer.query("SET statement_timeout = '20s'");
      const renewed = await writer.query(
        `UPDATE "${schema}".runs SET updated_at = updated_at WHERE id = 'r'`,
      );
      expect(renewed.rowCount).toBe(1);
      await unmarked;
      expect(await keyed.isMarkedEncrypted?.()).toBe(false);
      await holder.query("COMMIT");
    } finally {
      await holder.query("ROLLBACK").catch(() => {});
      await holder.end();
      await writer.end();
      await keyed.close();
    }
  }, 60_000);
});
