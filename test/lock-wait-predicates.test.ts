// Tests run three files at once on one PostgreSQL server: a test that waits until its own
// statement waits for a lock must not count the lock waits of the files beside it. The
// close()-under-a-lock finding (http-mounts-and-pg-close-findings) waited for "any lock not
// granted on the server": another file's lock wait let it go on before its cancel waited,
// and its close() then raced a verb not yet at the server. It now asks
// sessionsBlockedBy(the locker's pid), which this file checks against an unrelated wait.

import pg from "pg";
import { describe, expect, it } from "vitest";
import { pgUrl } from "./helpers/engines.js";
import { sessionsBlockedBy, testSchema } from "./helpers/postgres.js";
import { until } from "./helpers/sqlite.js";

async function client(url: string): Promise<{ c: pg.Client; pid: number }> {
  const c = new pg.Client({ connectionString: url });
  c.on("error", () => {});
  await c.connect();
  const pid = (await c.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]
    ?.pid as number;
  return { c, pid };
}

describe.skipIf(!pgUrl)("sessionsBlockedBy (helpers/postgres.ts)", () => {
  it("counts only the sessions waiting for the given session's locks, not another lock wait on the server", async () => {
    const url = pgUrl as string;
    const { schema, drop } = testSchema(url, "lockwait");
    const made = await client(url);
    const sessions: pg.Client[] = [made.c];
    const open = async () => {
      const s = await client(url);
      sessions.push(s.c);
      return s;
    };
    try {
      await made.c.query(`CREATE SCHEMA "${schema}"`);
      await made.c.query(`CREATE TABLE "${schema}".a (id int PRIMARY KEY)`);
      await made.c.query(`CREATE TABLE "${schema}".b (id int PRIMARY KEY)`);
      await made.c.query(`INSERT INTO "${schema}".a VALUES (1)`);
      await made.c.query(`INSERT INTO "${schema}".b VALUES (1)`);
      const lock = (s: pg.Client, table: string) =>
        s.query(`SELECT id FROM "${schema}".${table} WHERE id = 1 FOR UPDATE`);

      // Another test's lock wait: a session waits for a row that `other` holds.
      const other = await open();
      await other.c.query("BEGIN");
      await lock(other.c, "a");
      const otherWaiter = await open();
      const otherWait = lock(otherWaiter.c, "a").catch(() => {});
      await until(async () => (await sessionsBlockedBy(url, other.pid)) === 1, "the other wait");

      // This test's locker: nothing waits for it yet, whatever waits elsewhere.
      const locker = await open();
      await locker.c.query("BEGIN");
      await lock(locker.c, "b");
      expect(await sessionsBlockedBy(url, locker.pid)).toBe(0);

      // Its own statement waiting is what it counts.
      const waiter = await open();
      const wait = lock(waiter.c, "b").catch(() => {});
      await until(async () => (await sessionsBlockedBy(url, locker.pid)) === 1, "the wait");
      expect(await sessionsBlockedBy(url, other.pid)).toBe(1);

      await locker.c.query("COMMIT");
      await other.c.query("COMMIT");
      await Promise.all([wait, otherWait]);
    } finally {
      for (const s of sessions) await s.end().catch(() => {});
      await drop();
    }
  });
});
