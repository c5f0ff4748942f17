// What the PostgreSQL tests of the encrypted mark's triggers (store/postgres/plain-triggers.ts)
// share: a key, one admin connection for the file, the schemas the file made (dropped after
// it) and a store on each, the count and names of the mark's triggers in a schema, the roles
// a test of the install's rights makes (dropped after its describe), and the warnings the
// install gives.

import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, expect } from "vitest";
import type { Clock, Store } from "../../src/index.js";
import { postgresStore } from "../../src/postgres.js";
import { pgUrl } from "./engines.js";

export { k1 } from "./plain-records.js";
export const url = pgUrl ?? "";

/** The eight tables the mark's triggers guard, one trigger each. */
export const TABLES = [
  "runs",
  "steps",
  "attempts",
  "intents",
  "events",
  "run_streams",
  "workspace_objects",
  "approvals",
];

/** The names of the eight triggers named `name`, as markState lists them. */
export const eight = (name: string): string[] => TABLES.map((t) => `${t}:${name}`).sort();

export function markedSchemas(): {
  admin: pg.Pool;
  /** Drops `schema` after the file. */
  track: (schema: string) => void;
  /** A new schema named `<prefix>_<random>` (dropped after the file), and a store on it
   *  (by `u`, the test database's URL unless given). */
  storage: (prefix: string) => { schema: string; make: (u?: string) => Store };
  /** How many of the mark's triggers `schema` holds (eight while marked, else none). */
  triggers: (schema: string) => Promise<number>;
  /** Whether `schema` is marked, and its triggers' names ("<table>:<trigger>", sorted), read
   *  together. */
  markState: (schema: string) => Promise<{ marked: boolean; names: string[] }>;
  /** The one name of the mark's triggers in `schema` (this build's, just installed). */
  nameIn: (schema: string) => Promise<string>;
  /** Renames the trigger `from` to `to` on each of the eight tables of `schema`. */
  renameTriggers: (schema: string, from: string, to: string) => Promise<void>;
  /** Returns once a lock `where` (a condition on pg_locks, with $1 as `param`) is waited for. */
  untilLockWait: (where: string, param: unknown) => Promise<void>;
} {
  const schemas: string[] = [];
  const admin = new pg.Pool({ connectionString: url, max: 1 });
  afterAll(async () => {
    for (const s of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    await admin.end();
  });
  const track = (schema: string) => {
    schemas.push(schema);
  };
  const markState = async (schema: string) => {
    const r = await admin.query(
      `SELECT EXISTS (SELECT 1 FROM "${schema}".store_marks WHERE name = 'encrypted') AS marked,
         array(SELECT c.relname || ':' || t.tgname FROM pg_trigger t
           JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace s ON s.oid = c.relnamespace
           WHERE s.nspname = $1 AND t.tgname LIKE 'cairn_plain_guard%' ORDER BY 1) AS names`,
      [schema],
    );
    return { marked: r.rows[0].marked as boolean, names: r.rows[0].names as string[] };
  };
  return {
    admin,
    track,
    storage: (prefix) => {
      const schema = `${prefix}_${randomBytes(4).toString("hex")}`;
      track(schema);
      return { schema, make: (u = url) => postgresStore(u, { schema }) };
    },
    triggers: async (schema) => {
      const r = await admin.query(
        `SELECT count(*)::int AS n FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND t.tgname LIKE 'cairn_plain_guard%'`,
        [schema],
      );
      return r.rows[0].n as number;
    },
    markState,
    nameIn: async (schema) => {
      const { names } = await markState(schema);
      const all = new Set(names.map((n) => n.slice(n.indexOf(":") + 1)));
      expect(all.size).toBe(1);
      return [...all][0]!;
    },
    renameTriggers: async (schema, from, to) => {
      for (const table of TABLES) {
        await admin.query(`ALTER TRIGGER ${from} ON "${schema}".${table} RENAME TO ${to}`);
      }
    },
    untilLockWait: async (where, param) => {
      for (;;) {
        const r = await admin.query(`SELECT 1 FROM pg_locks WHERE ${where} LIMIT 1`, [param]);
        if (r.rowCount) return;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    },
  };
}

/** Opens `store` and closes it; `settled`: after a turn of the event loop in between (the
 *  open's warnings emitted). */
export async function openAndClose(store: Store, clock: Clock, settled = false): Promise<void> {
  await store.open({ clock });
  if (settled) await new Promise((resolve) => setImmediate(resolve));
  await store.close();
}

/** Roles named `<prefix>_<name>_<random>` for each of `names`, made (LOGIN, in that order) by
 *  the test's `create()`, dropped with what they own after the describe this is called in;
 *  `as(role)`: the test database's URL logging in as `role`. */
export function testRoles<N extends string>(
  admin: pg.Pool,
  prefix: string,
  names: readonly N[],
): {
  roles: Record<N, string>;
  database: string;
  as: (role: string) => string;
  create: () => Promise<void>;
} {
  const tag = randomBytes(4).toString("hex");
  const roles = Object.fromEntries(names.map((n) => [n, `${prefix}_${n}_${tag}`])) as Record<
    N,
    string
  >;
  const database = new URL(url).pathname.slice(1);
  afterAll(async () => {
    for (const role of names.map((n) => roles[n]).reverse()) {
      await admin.query(`DROP OWNED BY ${role} CASCADE`).catch(() => {});
      await admin.query(`REVOKE ALL ON DATABASE "${database}" FROM ${role}`).catch(() => {});
      await admin.query(`DROP ROLE IF EXISTS ${role}`);
    }
  });
  const as = (role: string) => {
    const u = new URL(url);
    u.username = role;
    u.password = "";
    return u.toString();
  };
  const create = async () => {
    for (const n of names) await admin.query(`CREATE ROLE ${roles[n]} LOGIN`);
  };
  return { roles, database, as, create };
}

/** The warnings the install gives (code CAIRN_PLAIN_TRIGGERS_REFUSED) from now until `stop`. */
export function installWarnings(): { warnings: Error[]; stop: () => void } {
  const warnings: Error[] = [];
  const onWarning = (w: Error) => {
    if ((w as { code?: string }).code === "CAIRN_PLAIN_TRIGGERS_REFUSED") warnings.push(w);
  };
  process.on("warning", onWarning);
  return { warnings, stop: () => process.off("warning", onWarning) };
}
