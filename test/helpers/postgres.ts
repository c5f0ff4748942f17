// PostgreSQL for tests: find the test database (or decide to skip), and give each test its
// own schema, dropped afterwards. Shared by every test file that needs Postgres.
//
// No database: under CI=true that is a failure (a silently skipped backend would let a
// Postgres-only bug land); on a developer machine the tests skip, loudly.

import { randomBytes } from "node:crypto";
import pg from "pg";

export const DEFAULT_TEST_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/test";

let probed: Promise<string | undefined> | undefined;

/**
 * The URL of the test database (CAIRN_TEST_POSTGRES_URL, else the default) if it accepts a
 * connection; undefined to skip. Throws under CI=true when it cannot connect.
 */
export function postgresTestUrl(): Promise<string | undefined> {
  probed ??= probe(process.env.CAIRN_TEST_POSTGRES_URL || DEFAULT_TEST_POSTGRES_URL);
  return probed;
}

async function probe(url: string): Promise<string | undefined> {
  // A server that is starting up (57P03) or not yet listening gets a few seconds.
  const deadline = Date.now() + 15_000;
  for (;;) {
    const err = await tryConnect(url);
    if (!err) return url;
    const code = (err as { code?: string }).code;
    const transient = code === "57P03" || code === "ECONNREFUSED" || code === "ECONNRESET";
    if (transient && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      continue;
    }
    const where = url.replace(/\/\/[^@/]*@/, "//");
    const why = err instanceof Error ? err.message : String(err);
    if (process.env.CI === "true") {
      throw new Error(
        `PostgreSQL tests cannot connect to ${where} (${why}); CI must provide it ` +
          "(set CAIRN_TEST_POSTGRES_URL or start the server in .ci/run).",
        { cause: err },
      );
    }
    console.warn(
      `\n${"!".repeat(78)}\n!! SKIPPING PostgreSQL tests: cannot connect to ${where}: ${why}\n` +
        `!! Set CAIRN_TEST_POSTGRES_URL or start PostgreSQL to run them.\n${"!".repeat(78)}\n`,
    );
    return undefined;
  }
}

/** Connects once and runs SELECT 1; the error, or undefined on success. */
async function tryConnect(url: string): Promise<unknown> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  client.on("error", () => {});
  try {
    await client.connect();
    await client.query("SELECT 1");
    return undefined;
  } catch (err) {
    return err;
  } finally {
    await client.end().catch(() => {});
  }
}

/** A fresh schema name (not created: the store creates it on open) and a drop for after. */
export function testSchema(
  url: string,
  prefix = "cairn_test",
): {
  schema: string;
  drop: () => Promise<void>;
} {
  const schema = `${prefix}_${randomBytes(6).toString("hex")}`;
  return { schema, drop: () => dropSchema(url, schema) };
}

export async function dropSchema(url: string, schema: string): Promise<void> {
  await withClient(url, (c) => c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
}

/** Runs `fn` on a short-lived connection of its own (not any store's). */
export async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  client.on("error", () => {});
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

/** How many sessions wait for a lock that the session `pid` holds (pg_blocking_pids). A
 *  test that waits until its own statement waits on its own locker asks this: a count of
 *  every lock not granted on the server also counts the lock waits of the other test
 *  files running beside it (three at once), and could be true before its statement waits. */
export async function sessionsBlockedBy(url: string, pid: number): Promise<number> {
  return withClient(url, async (c) => {
    const r = await c.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))",
      [pid],
    );
    return r.rows[0]?.n ?? 0;
  });
}
