// What a PostgreSQL store says of itself (migration 24): that it encrypts. Read before it
// is written, so opening an encrypted store that is already marked writes nothing. The mark
// comes with triggers that refuse plain payloads in the database (plain-triggers.ts).

import { CairnError } from "../../errors.js";
import type { Tx } from "./connection.js";
import { dropPlainTriggers, installPlainTriggers, triggersInstalledSql } from "./plain-triggers.js";
import { nowSql, type StoreContext } from "./sql.js";

const ENCRYPTED = "encrypted";

export async function markEncrypted(ctx: StoreContext): Promise<void> {
  const now = await readMark(ctx);
  if (now.marked && now.guarded) return;
  const { db, t } = ctx;
  const mark = (tx: Tx) =>
    tx.query(
      `INSERT INTO ${t.storeMarks} (name, marked_at) VALUES ($2, ${nowSql(1)})
        ON CONFLICT (name) DO NOTHING`,
      [ctx.clockParam(), ENCRYPTED],
    );
  for (let attempt = 1; ; attempt++) {
    try {
      // The mark and the triggers that refuse plain payloads, together (plain-triggers.ts).
      await db.transaction("markEncrypted", "idempotent", async (tx) => {
        await mark(tx);
        await installPlainTriggers(ctx, tx);
      });
      return;
    } catch (err) {
      const code = sqlState(err);
      // A connection lost (no SQLSTATE: "ECONNRESET" and the like) is thrown as it was.
      if (code === undefined) throw err;
      // A table's lock not had in time (writers kept it): the install gave every table back;
      // it is tried again a few times, a while apart. (A deadlock, 40P01, the transaction
      // itself tries again: connection.ts.)
      const delay = INSTALL_RETRY_DELAYS_MS[attempt - 1];
      if (code === "55P03" && delay !== undefined) {
        await new Promise((resolve) => setTimeout(resolve, delay));
        continue;
      }
      // A database that refused the triggers (a role that may write the tables but not
      // create triggers on them, a server too old for them), or tables kept locked past the
      // tries: the store is marked as before, and the guard alone refuses plain payloads
      // (the next open of the store tries the triggers again).
      await db.transaction("markEncrypted", "idempotent", mark);
      return;
    }
  }
}

/** The waits between tries of a mark whose install could not lock the tables in time. */
const INSTALL_RETRY_DELAYS_MS = [100, 200, 400, 800, 1600];

/** What a store reads of its mark when it opens: a store marked (by a cairn before the
 *  triggers, or by a role that could not create them) gets the triggers now, if this
 *  process may create them. An install that fails (no right to, a lock not had in time)
 *  fails no open: the guard refuses as before, and the next open tries again. */
export async function isMarkedEncryptedAtOpen(ctx: StoreContext): Promise<boolean> {
  const now = await readMark(ctx);
  if (now.marked && !now.guarded) {
    await ctx.db
      .transaction("open", "idempotent", (tx) => installPlainTriggers(ctx, tx))
      .catch(() => {});
  }
  return now.marked;
}

async function readMark(ctx: StoreContext): Promise<{ marked: boolean; guarded: boolean }> {
  const { db, t } = ctx;
  const r = await db.statement<{ marked: boolean; guarded: boolean }>(
    "isMarkedEncrypted",
    "idempotent",
    `SELECT EXISTS (SELECT 1 FROM ${t.storeMarks} WHERE name = $1) AS marked,
      ${triggersInstalledSql(ctx)} AS guarded`,
    [ENCRYPTED],
  );
  return { marked: r.rows[0]?.marked === true, guarded: r.rows[0]?.guarded === true };
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

/** Removes the mark and the triggers, together. */
export async function unmarkEncrypted(ctx: StoreContext): Promise<void> {
  const { db, t } = ctx;
  const unmark = (tx: Tx) => tx.query(`DELETE FROM ${t.storeMarks} WHERE name = $1`, [ENCRYPTED]);
  try {
    await db.transaction("unmarkEncrypted", "idempotent", async (tx) => {
      await unmark(tx);
      await dropPlainTriggers(ctx, tx);
    });
  } catch (err) {
    // A role that may not drop them, or a table's lock not had in time: the mark goes alone,
    // and the triggers left read the mark before they refuse (they refuse nothing).
    const code = sqlState(err);
    if (code !== "42501" && code !== "55P03") throw err;
    await db.transaction("unmarkEncrypted", "idempotent", unmark);
  }
}

/** The SQLSTATE of a driver error, or of the one a StoreError wraps; undefined for an error
 *  of the connection (Node's codes such as "ECONNRESET", and class 08). */
function sqlState(err: unknown): string | undefined {
  let e = err instanceof CairnError ? err.cause : err;
  if (e instanceof CairnError) e = e.cause;
  const code = e !== null && typeof e === "object" ? (e as { code?: unknown }).code : undefined;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) && !code.startsWith("08")
    ? code
    : undefined;
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
