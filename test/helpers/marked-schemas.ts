// What the PostgreSQL tests of the encrypted mark's triggers (store/postgres/plain-triggers.ts)
// share: a key, one admin connection for the file, the schemas the file made (dropped after
// it), and the count of the mark's triggers in a schema.

import pg from "pg";
import { afterAll } from "vitest";
import { pgUrl } from "./engines.js";

export { k1 } from "./plain-records.js";
export const url = pgUrl ?? "";

export function markedSchemas(): {
  admin: pg.Pool;
  /** Drops `schema` after the file. */
  track: (schema: string) => void;
  /** How many of the mark's triggers `schema` holds (eight while marked, else none). */
  triggers: (schema: string) => Promise<number>;
} {
  const schemas: string[] = [];
  const admin = new pg.Pool({ connectionString: url, max: 1 });
  afterAll(async () => {
    for (const s of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    await admin.end();
  });
  return {
    admin,
    track: (schema) => {
      schemas.push(schema);
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
  };
}
