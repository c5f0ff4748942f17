// The retry rules of connection.ts on a scripted fake pool: which failures are retried
// under which policy, and that a checked-out client's 'error' event cannot crash Node.
// (The same rules against a real server: test/store-postgres.test.ts.)

import { EventEmitter } from "node:events";
import type pg from "pg";
import { describe, expect, it } from "vitest";
import { StoreError } from "../../errors.js";
import { Database, isConnectionError, Rollback } from "./connection.js";

type Step = (sql: string) => unknown;

/** A pool whose clients answer each query with the next scripted step (default: ok). */
function fakePool(script: Step[]) {
  const log: string[] = [];
  const released: Array<Error | undefined> = [];
  const clients: EventEmitter[] = [];
  const pool = {
    async connect() {
      const client = Object.assign(new EventEmitter(), {
        async query(sql: string) {
          log.push(sql);
          const step = script.shift();
          const v = step ? step(sql) : undefined;
          if (v instanceof Error) throw v;
          return { rows: [], rowCount: 0 };
        },
        release(err?: Error) {
          released.push(err);
        },
      });
      clients.push(client);
      return client;
    },
  };
  return { pool: pool as unknown as pg.Pool, log, released, clients };
}

/** What every transaction on the store's own pool begins with (READ COMMITTED, whatever the
 *  session default). */
const BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED";

const ok: Step = () => undefined;
const lost: Step = () => Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" });
const sqlstate =
  (code: string): Step =>
  () =>
    Object.assign(new Error(`failed with ${code}`), { code });

describe("Database retries", () => {
  it("retries a transaction that lost its connection before COMMIT, on any policy", async () => {
    const { pool, log, released } = fakePool([ok, lost, ok, ok, ok]);
    const db = new Database(pool, "test", true);
    const v = await db.transaction("verb", "before-commit", async (tx) => {
      await tx.query("SELECT 1");
      return 7;
    });
    expect(v).toBe(7);
    expect(log).toEqual([BEGIN, "SELECT 1", BEGIN, "SELECT 1", "COMMIT"]);
    // The broken client was destroyed (released with its error), the good one returned.
    expect(released[0]).toBeInstanceOf(Error);
    expect(released[1]).toBeUndefined();
  });

  it("a lost COMMIT: retried for idempotent verbs, who learn it may have committed", async () => {
    const { pool } = fakePool([ok, ok, lost]);
    const db = new Database(pool, "test", true);
    const seen: boolean[] = [];
    await db.transaction("verb", "idempotent", async (tx) => {
      seen.push(tx.mayHaveCommitted);
      await tx.query("UPDATE x");
    });
    expect(seen).toEqual([false, true]);
  });

  it("a lost COMMIT: reported as unknown for the others, not retried", async () => {
    const { pool, log } = fakePool([ok, ok, lost]);
    const db = new Database(pool, "test", true);
    const err = await db
      .transaction("sendEvent", "before-commit", (tx) => tx.query("INSERT x"))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreError);
    expect((err as Error).message).toMatch(/sendEvent: whether it took effect is unknown/);
    expect(log).toEqual([BEGIN, "INSERT x", "COMMIT"]);
  });

  it("says what a read-only session or a missing privilege means, beyond the server's words", async () => {
    for (const [code, why] of [
      [
        "25006",
        /refused verb: the session is read-only \(a hot standby replica.*Point cairn at the primary/,
      ],
      ["42501", /refused verb: the role lacks a privilege on cairn's schema or tables/],
    ] as const) {
      const { pool } = fakePool([ok, sqlstate(code)]);
      const db = new Database(pool, 'host/db, schema "s"', true);
      await expect(
        db.transaction("verb", "idempotent", (tx) => tx.query("SELECT x")),
      ).rejects.toThrow(why);
    }
  });

  it("retries deadlocks and serialization failures, even at COMMIT", async () => {
    const { pool, log } = fakePool([ok, sqlstate("40P01"), ok, ok, sqlstate("40001")]);
    const db = new Database(pool, "test", true);
    await db.transaction("verb", "before-commit", (tx) => tx.query("UPDATE x"));
    expect(log.filter((q) => q === BEGIN)).toHaveLength(3);
  });

  it("does not retry a statement the server refused, and names the SQLSTATE", async () => {
    const { pool, log } = fakePool([ok, sqlstate("23514")]);
    const db = new Database(pool, 'host/db, schema "s"', true);
    await expect(
      db.transaction("verb", "idempotent", (tx) => tx.query("INSERT x")),
    ).rejects.toThrow(/PostgreSQL \(host\/db, schema "s"\) failed verb: .*SQLSTATE 23514/);
    expect(log).toEqual([BEGIN, "INSERT x", "ROLLBACK"]);
  });

  it("gives up after a bounded number of tries", async () => {
    const { pool, log } = fakePool(Array.from({ length: 20 }, () => lost));
    const db = new Database(pool, "test", true);
    await expect(db.statement("getRun", "idempotent", "SELECT 1")).rejects.toThrow(
      /Cannot reach PostgreSQL \(test\) for getRun after 7 tries/,
    );
    expect(log).toHaveLength(7);
  });

  it("rolls back and returns the value of a Rollback", async () => {
    const { pool, log } = fakePool([]);
    const db = new Database(pool, "test", true);
    const v = await db.transaction("verb", "idempotent", async (tx) => {
      await tx.query("UPDATE x");
      throw new Rollback("conflict");
    });
    expect(v).toBe("conflict");
    expect(log).toEqual([BEGIN, "UPDATE x", "ROLLBACK"]);
  });

  it("sets the session timeouts locally on a caller's pool", async () => {
    const { pool, log } = fakePool([]);
    const db = new Database(pool, "test", false);
    await db.statement("getRun", "idempotent", "SELECT 1");
    expect(log[0]).toMatch(
      /^BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL statement_timeout = \d+; SET LOCAL idle_in/,
    );
    expect(log.slice(1)).toEqual(["SELECT 1", "COMMIT"]);
  });

  it("a checked-out client's 'error' event does not crash the process", async () => {
    const { pool, clients } = fakePool([]);
    const db = new Database(pool, "test", true);
    await db.transaction("verb", "idempotent", async (tx) => {
      // EventEmitter throws on an 'error' event nobody listens to.
      clients[0]?.emit("error", new Error("Connection terminated unexpectedly"));
      await tx.query("SELECT 1");
    });
  });
});

describe("isConnectionError", () => {
  it("knows the ways a connection dies", () => {
    for (const code of ["57P01", "57P02", "57P03", "08006", "08003", "ECONNRESET", "EPIPE"]) {
      expect(isConnectionError(Object.assign(new Error("x"), { code }))).toBe(true);
    }
    expect(isConnectionError(new Error("Connection terminated unexpectedly"))).toBe(true);
    for (const code of ["23505", "40P01", "57014", "22021"]) {
      expect(isConnectionError(Object.assign(new Error("x"), { code }))).toBe(false);
    }
  });
});
