// PostgreSQL: the encrypted mark's triggers (store/postgres/plain-triggers.ts) attacked.
// - A connection lost mid-install: a backend terminated (pg_terminate_backend, a watchdog
//   killing lock waiters, a failover) while the install waits for a table's lock answers
//   SQLSTATE 57P01 (admin_shutdown), a code the server sends as it goes away. sqlState read it
//   as a refusal, so once the transaction's own retries were spent the mark went in alone: the
//   store marked without its triggers and markEncrypted said nothing. It is thrown now, as
//   every connection error is (connection.ts isConnectionError: 57P01-03, 53300, class 08).

import { randomBytes } from "node:crypto";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { StoreError } from "../src/errors.js";
import { postgresStore } from "../src/postgres.js";
import { sqlState } from "../src/store/postgres/store-marks.js";
import { createVirtualClock } from "../src/testing/index.js";
import { pgUrl } from "./helpers/engines.js";
import { markedSchemas, url } from "./helpers/marked-schemas.js";

const { admin, track, triggers } = markedSchemas();

function schemaName(): string {
  const schema = `h9_trig_${randomBytes(4).toString("hex")}`;
  track(schema);
  return schema;
}

const serverError = (code: string) => {
  const e = new pg.DatabaseError("terminating connection due to administrator command", 0, "error");
  e.code = code;
  return e;
};

describe("sqlState: a connection's end the server announces is no refusal", () => {
  it("57P01-57P03 and 53300, bare or wrapped, give none", () => {
    for (const code of ["57P01", "57P02", "57P03", "53300"]) {
      expect(sqlState(serverError(code))).toBeUndefined();
      expect(sqlState(new StoreError("install", { cause: serverError(code) }))).toBeUndefined();
    }
    expect(sqlState(serverError("42501"))).toBe("42501");
  });
});

/** A pool whose clients, sent a statement matching `when`, have their backend terminated
 *  once it waits for a lock (the install's lock_timeout raised so the wait is certain). */
function killingPool(when: RegExp): { pool: pg.Pool; kills: () => number } {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  let kills = 0;
  pool.on("connect", (client) => {
    const query = client.query.bind(client) as (...a: unknown[]) => Promise<unknown>;
    (client as unknown as { query: unknown }).query = (...args: unknown[]) => {
      const first = args[0];
      const text = typeof first === "string" ? first : (first as { text?: string })?.text;
      if (typeof text === "string" && /SET LOCAL lock_timeout/.test(text)) {
        args[0] = "SET LOCAL lock_timeout = '60s'";
      }
      if (typeof text !== "string" || !when.test(text)) return query(...args);
      const pid = (client as unknown as { processID: number }).processID;
      const running = query(...args);
      void (async () => {
        for (;;) {
          const r = await admin.query(
            "SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted LIMIT 1",
            [pid],
          );
          if (r.rowCount) break;
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
        kills++;
        await admin.query("SELECT pg_terminate_backend($1)", [pid]);
      })();
      return running;
    };
  });
  pool.on("error", () => {});
  return { pool, kills: () => kills };
}

describe.skipIf(!pgUrl)("PostgreSQL: a connection lost while the install waits", () => {
  it("is thrown, and the store is not marked without its triggers", async () => {
    const schema = schemaName();
    const clock = createVirtualClock();
    // The schema made by a plain open first.
    const first = postgresStore(url, { schema });
    await first.open({ clock });
    await first.close();

    // A writer holds steps: the install waits there, and is terminated there, every try.
    const blocker = new pg.Client({ connectionString: url });
    await blocker.connect();
    await blocker.query("BEGIN");
    await blocker.query(`LOCK TABLE "${schema}".steps IN ROW EXCLUSIVE MODE`);
    const { pool, kills } = killingPool(/CREATE TRIGGER \S+ BEFORE .* ON "[^"]+"\.steps/s);
    const store = postgresStore(pool, { schema });
    try {
      await store.open({ clock });
      const err = await store.markEncrypted!().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(kills()).toBeGreaterThan(0);
      expect(err).toBeInstanceOf(StoreError);
      expect(String((err as Error).message)).toMatch(/57P01|terminat/);
      // Neither marked alone nor half installed.
      await blocker.query("ROLLBACK");
      const marked = await admin.query(`SELECT count(*)::int AS n FROM "${schema}".store_marks`);
      expect(marked.rows[0].n).toBe(0);
      expect(await triggers(schema)).toBe(0);
    } finally {
      await blocker.query("ROLLBACK").catch(() => {});
      await blocker.end();
      await store.close();
      await pool.end();
    }
  });
});
