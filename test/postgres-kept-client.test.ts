// The store's own pool keeps the client a statement ended with checked out for the next
// statement (connection.ts, #kept): it must go back to the pool when a caller waits for one,
// when its connection dies, and at close, or a full pool would wait for ever, a dead
// connection would be handed to the next statement, and the pool could not end.

import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { Database } from "../src/store/postgres/connection.js";
import { postgresTestUrl } from "./helpers/postgres.js";

const url = await postgresTestUrl();

describe.skipIf(!url)("PostgreSQL: the client kept between statements", () => {
  const base = url as string;
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()?.();
  });

  /** A pool as the store makes its own (a connect waits as long as the test may run), and
   *  a Database on it as the store's own pool's. */
  function ownPool(max: number): { pool: pg.Pool; db: Database } {
    const pool = new pg.Pool({ connectionString: base, max, connectionTimeoutMillis: 600_000 });
    pool.on("error", () => {});
    pool.on("connect", (c) => c.on("error", () => {}));
    return { pool, db: new Database(pool, "test", true) };
  }

  it("goes back to the pool when another statement waits for a connection", async () => {
    const { pool, db } = ownPool(1);
    cleanups.push(async () => {
      await db.settled(1_000);
      await pool.end();
    });
    // One connection, five statements at once: each after the first waits in the pool's
    // queue, and is served only if the one before hands its client back.
    const out = await Promise.all(
      [1, 2, 3, 4, 5].map((i) =>
        db.statement<{ v: number }>("getRun", "idempotent", "SELECT $1::int AS v", [i]),
      ),
    );
    expect(out.map((r) => r.rows[0]?.v)).toEqual([1, 2, 3, 4, 5]);
  }, 60_000);

  it("is handed back to the pool, and dropped, when its connection dies while kept", async () => {
    const { pool, db } = ownPool(2);
    cleanups.push(async () => {
      await db.settled(1_000);
      await pool.end();
    });
    const r = await db.statement<{ pid: number }>(
      "getRun",
      "idempotent",
      "SELECT pg_backend_pid() AS pid",
    );
    expect(pool.totalCount).toBe(1);
    const admin = new pg.Client({ connectionString: base });
    await admin.connect();
    cleanups.push(() => admin.end());
    await admin.query("SELECT pg_terminate_backend($1)", [r.rows[0]?.pid]);
    // The kept client hears its connection end and goes back to the pool with the error,
    // which drops it; kept (as checked out) it would stay counted.
    for (let i = 0; i < 600 && pool.totalCount > 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect(pool.totalCount).toBe(0);
    // The next statement gets a fresh connection, first try.
    const next = await db.transaction("verb", "before-commit", (tx) =>
      tx.query<{ pid: number }>("SELECT pg_backend_pid() AS pid"),
    );
    expect(next.rows[0]?.pid).not.toBe(r.rows[0]?.pid);
  }, 60_000);

  it("goes back at settled(), so the pool can end", async () => {
    const { pool, db } = ownPool(2);
    await db.statement("getRun", "idempotent", "SELECT 1");
    await db.settled(1_000);
    expect(pool.idleCount).toBe(1);
    await pool.end();
    // And none is kept after: a statement's client goes back at once.
    const { pool: pool2, db: db2 } = ownPool(2);
    await db2.settled(1_000);
    await db2.statement("getRun", "idempotent", "SELECT 1");
    expect(pool2.idleCount).toBe(1);
    await pool2.end();
  }, 60_000);
});
