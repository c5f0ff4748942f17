// Creates and upgrades the store's tables and functions in its schema (migrations/). Many
// workers may start at once against a fresh database, so the whole check-and-migrate runs
// in one transaction under a transaction-scoped advisory lock keyed by the schema: the
// first one migrates, the others wait, then find the schema current and do nothing. A
// schema newer than this code is refused (invariant 9): nothing is changed and the error
// says what to do.

import { StoreError } from "../../errors.js";
import type { Database } from "./connection.js";
import { MIGRATIONS, SCHEMA_VERSION } from "./migrations/index.js";
import type { Tables } from "./sql.js";

export async function migrate(
  db: Database,
  schema: string,
  t: Tables,
  description: string,
  options: { mustExist?: boolean } = {},
): Promise<void> {
  await db.transaction("open (migrate)", "idempotent", async (tx) => {
    // Two-key form: (class, schema hash), so cairn's lock cannot collide with an
    // application's single-key advisory locks.
    await tx.query("SELECT pg_advisory_xact_lock(1667330414, hashtext($1))", [schema]);
    const exists = await tx.query<{ present: boolean }>(
      "SELECT to_regclass($1) IS NOT NULL AS present",
      [t.schemaVersion],
    );
    let current = 0;
    if (exists.rows[0]?.present) {
      const v = await tx.query<{ version: number | null }>(
        `SELECT max(version) AS version FROM ${t.schemaVersion}`,
      );
      current = v.rows[0]?.version ?? 0;
    }
    if (current > SCHEMA_VERSION) {
      throw new StoreError(
        `PostgreSQL (${description}): schema "${schema}" is at version ${current}, newer than ` +
          `this cairn understands (version ${SCHEMA_VERSION}). Upgrade cairn, or point it at ` +
          "another schema; nothing was changed.",
      );
    }
    if (current === SCHEMA_VERSION) return;
    if (current === 0 && options.mustExist) {
      throw new StoreError(
        `No cairn store in PostgreSQL (${description}): the schema holds no cairn tables. ` +
          'Check the schema (--schema or CAIRN_PG_SCHEMA; default "cairn"), or start a worker ' +
          "there first (it creates them); nothing was created.",
      );
    }
    // Only reached when something must change, so a role without CREATE rights can open an
    // already migrated schema.
    await tx.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
    await tx.query(
      `CREATE TABLE IF NOT EXISTS ${t.schemaVersion} (
        version integer PRIMARY KEY,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`,
    );
    for (const m of MIGRATIONS) {
      if (m.version <= current) continue;
      for (const statement of m.statements(t)) await tx.query(statement);
      await tx.query(`INSERT INTO ${t.schemaVersion} (version) VALUES ($1)`, [m.version]);
    }
  });
}
