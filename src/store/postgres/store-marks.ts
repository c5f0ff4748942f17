// What a PostgreSQL store says of itself (migration 24): that it encrypts. Read before it
// is written, so opening an encrypted store that is already marked writes nothing.

import { nowSql, type StoreContext } from "./sql.js";

const ENCRYPTED = "encrypted";

export async function markEncrypted(ctx: StoreContext): Promise<void> {
  if (await isMarkedEncrypted(ctx)) return;
  const { db, t } = ctx;
  await db.statement(
    "markEncrypted",
    "idempotent",
    `INSERT INTO ${t.storeMarks} (name, marked_at) VALUES ($2, ${nowSql(1)})
      ON CONFLICT (name) DO NOTHING`,
    [ctx.clockParam(), ENCRYPTED],
  );
}

export async function isMarkedEncrypted(ctx: StoreContext): Promise<boolean> {
  const { db, t } = ctx;
  const r = await db.statement(
    "isMarkedEncrypted",
    "idempotent",
    `SELECT 1 FROM ${t.storeMarks} WHERE name = $1`,
    [ENCRYPTED],
  );
  return (r.rowCount ?? 0) > 0;
}

export async function unmarkEncrypted(ctx: StoreContext): Promise<void> {
  const { db, t } = ctx;
  await db.statement(
    "unmarkEncrypted",
    "idempotent",
    `DELETE FROM ${t.storeMarks} WHERE name = $1`,
    [ENCRYPTED],
  );
}

/** The parents of `runs` (a cancel's reason is cairn's only where each id in it names the
 *  parent of the run before it: cancel-texts.ts). */
export async function parentsOf(
  ctx: StoreContext,
  runs: readonly string[],
): Promise<Map<string, string | null>> {
  const { db, t } = ctx;
  const r = await db.statement<{ id: string; parent_id: string | null }>(
    "requestCancel",
    "idempotent",
    `SELECT id, parent_id FROM ${t.runs} WHERE id = ANY($1::text[])`,
    [runs],
  );
  return new Map(r.rows.map((row) => [row.id, row.parent_id]));
}
