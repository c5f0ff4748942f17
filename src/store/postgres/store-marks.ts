// What a PostgreSQL store says of itself (migration 24): that it encrypts. Read before it
// is written, so opening an encrypted store that is already marked writes nothing. The mark
// comes with triggers that refuse plain payloads in the database (plain-triggers.ts).

import { CairnError } from "../../errors.js";
import type { Tx } from "./connection.js";
import {
  type GuardState,
  guardState,
  guardTriggersSql,
  type LockOrder,
  syncPlainTriggers,
} from "./plain-triggers.js";
import { nowSql, type StoreContext } from "./sql.js";
import { sqlState } from "./sql-state.js";

const ENCRYPTED = "encrypted";

/** The stores whose open found the triggers' install refused for want of a privilege (and
 *  said so): the keyed open's markEncrypted, right after, does not try it again (it tried
 *  twice per open, and said nothing). Each open tries anew (a grant given since counts). */
const refusedThisOpen = new WeakSet<StoreContext>();

export async function markEncrypted(ctx: StoreContext): Promise<void> {
  const now = await readMark(ctx);
  if (now.marked && (now.guard === "current" || refusedThisOpen.has(ctx))) return;
  const { db, t } = ctx;
  const mark = (tx: Tx) =>
    tx.query(
      `INSERT INTO ${t.storeMarks} (name, marked_at) VALUES ($2, ${nowSql(1)})
        ON CONFLICT (name) DO NOTHING`,
      [ctx.clockParam(), ENCRYPTED],
    );
  if (refusedThisOpen.has(ctx)) {
    await db.transaction("markEncrypted", "idempotent", mark);
    return;
  }
  const order: LockOrder = [];
  for (let attempt = 1; ; attempt++) {
    try {
      // The mark and the triggers that refuse plain payloads, together (plain-triggers.ts).
      await db.transaction("markEncrypted", "idempotent", async (tx) => {
        await mark(tx);
        await syncPlainTriggers(ctx, tx, order);
      });
      return;
    } catch (err) {
      const code = sqlState(err);
      // A connection lost (no SQLSTATE: "ECONNRESET", a backend terminated: 57P01) is thrown.
      if (code === undefined) throw err;
      // A table's lock not had in time (writers kept it): the install gave every table back;
      // it is tried again a few times, a while apart, locking first the table it could not
      // have (`order`). (A deadlock, 40P01, the transaction itself tries again: connection.ts.)
      const delay = INSTALL_RETRY_DELAYS_MS[attempt - 1];
      if (code === "55P03" && delay !== undefined) {
        await new Promise((resolve) => setTimeout(resolve, delay));
        continue;
      }
      // A database that refused the triggers (a role that may write the tables but not
      // create triggers on them, a server too old for them), or tables kept locked past the
      // tries: the store is marked as before, and the guard alone refuses plain payloads
      // (the next open of the store tries the triggers again).
      if (code === "42501") await refused(ctx, true, err);
      await db.transaction("markEncrypted", "idempotent", mark);
      return;
    }
  }
}

/** The waits between tries of a mark whose install could not lock the tables in time. */
const INSTALL_RETRY_DELAYS_MS = [100, 200, 400, 800, 1600];

/** What a store reads of its mark when it opens (one statement: the mark, and the names of
 *  its triggers on runs). A marked store without this build's triggers (marked by a cairn
 *  before them or with other rules, or by a role that could not create them) gets them now;
 *  an unmarked store with triggers (a removal of the mark that could not lock a table in
 *  time left them) loses them. A change that fails (no right to, a lock not had in time)
 *  fails no open: the guard refuses as before, and the next open tries again. */
export async function isMarkedEncryptedAtOpen(ctx: StoreContext): Promise<boolean> {
  refusedThisOpen.delete(ctx);
  const now = await readMark(ctx);
  if (now.guard !== (now.marked ? "current" : "none")) {
    // A table's lock not had in time is tried once more at once, that table locked first: a
    // writer that holds steps and then writes runs (append_records) made the first try, which
    // holds runs, time out whenever one was writing, and a keyless open (which has no mark's
    // retries after it) left an earlier build's triggers, or a removed mark's, in place.
    const order: LockOrder = [];
    for (let attempt = 1; attempt <= OPEN_TRIES; attempt++) {
      try {
        await ctx.db.transaction("open", "idempotent", (tx) => syncPlainTriggers(ctx, tx, order));
        break;
      } catch (err) {
        const code = sqlState(err);
        if (code === "55P03" && order.length > 0) continue;
        if (code === "42501") await refused(ctx, now.marked, err);
        break;
      }
    }
  }
  return now.marked;
}

/** Tries of an open's change of the triggers (the second locks first what the first could
 *  not have). */
const OPEN_TRIES = 2;

async function readMark(ctx: StoreContext): Promise<{ marked: boolean; guard: GuardState }> {
  const { db, t } = ctx;
  const r = await db.statement<{ marked: boolean; guard: string[] }>(
    "isMarkedEncrypted",
    "idempotent",
    `SELECT EXISTS (SELECT 1 FROM ${t.storeMarks} WHERE name = $1) AS marked,
      ${guardTriggersSql(ctx)} AS guard`,
    [ENCRYPTED],
  );
  return {
    marked: r.rows[0]?.marked === true,
    guard: guardState(r.rows[0]?.guard, ctx.guardBuild),
  };
}

/** Says, once per open, that this role may not install (marked) or remove (unmarked) the
 *  triggers, and what to grant: the tables' owner may (CREATE OR REPLACE FUNCTION wants the
 *  functions' owner, which the install makes the tables' owner where it may, DROP TRIGGER the
 *  table's), or, for an install, the functions' owner if another role owns them. A role that may not write runs (a dashboard's,
 *  `cairn show`'s) is not told: it writes no payload, and could not mend it. */
async function refused(ctx: StoreContext, marked: boolean, err: unknown): Promise<void> {
  refusedThisOpen.add(ctx);
  const who = await ctx.db
    .statement<{ role: string; owner: string; fns: string | null; writes: boolean }>(
      "isMarkedEncrypted",
      "idempotent",
      `SELECT current_user::text AS role, pg_get_userbyid(c.relowner)::text AS owner,
          (SELECT pg_get_userbyid(p.proowner)::text FROM pg_proc p
            WHERE p.pronamespace = c.relnamespace AND p.proname = 'cairn_plain'
              AND p.proowner <> c.relowner LIMIT 1) AS fns,
          has_table_privilege(c.oid, 'INSERT, UPDATE') AS writes
        FROM pg_class c WHERE c.oid = '${ctx.t.runs}'::regclass`,
    )
    .then((r) => r.rows[0])
    .catch(() => undefined);
  if (who?.writes === false) return;
  const ident = (name: string) => `"${name.replaceAll('"', '""')}"`;
  const role = who ? ident(who.role) : "<this role>";
  // Functions another role owns (one that installed them before the install handed them to
  // the tables' owner: plain-triggers.ts toTablesOwner) are replaced by that role alone.
  const byFns = marked && !!who?.fns;
  const owner = who ? ident(byFns ? who.fns! : who.owner) : "<the tables' owner>";
  const what = marked
    ? `is marked encrypted, but the role ${role} may not install the triggers that refuse ` +
      "plain payloads in the database, so a process without keys that opened it before the " +
      "mark may store plain text until it reads the mark (about a second)"
    : `holds the triggers of a mark since removed, which the role ${role} may not drop: ` +
      "each row written to a payload table pays a read of the mark";
  process.emitWarning(
    `cairn: the PostgreSQL store (${ctx.description}) ${what} (${driverMessage(err)}). ` +
      `Open it once as the owner of its ${byFns ? "triggers' functions" : "tables"}, ${owner}, which ` +
      `${marked ? "installs" : "drops"} them, or give this role the owner's rights: ` +
      `GRANT ${owner} TO ${role}.`,
    { code: "CAIRN_PLAIN_TRIGGERS_REFUSED" },
  );
}

/** The server's words of a driver error (or of the one a StoreError wraps). */
function driverMessage(err: unknown): string {
  let e = err instanceof CairnError ? err.cause : err;
  if (e instanceof CairnError) e = e.cause;
  const message = e instanceof Error ? e.message : String(e);
  const code = sqlState(err);
  return code ? `${message}: SQLSTATE ${code}` : message;
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

/** Removes the mark and the triggers (of any version), together. */
export async function unmarkEncrypted(ctx: StoreContext): Promise<void> {
  const { db, t } = ctx;
  const unmark = (tx: Tx) => tx.query(`DELETE FROM ${t.storeMarks} WHERE name = $1`, [ENCRYPTED]);
  try {
    await db.transaction("unmarkEncrypted", "idempotent", async (tx) => {
      await unmark(tx);
      await syncPlainTriggers(ctx, tx);
    });
  } catch (err) {
    // A role that may not drop them, or a table's lock not had in time: the mark goes alone,
    // and the triggers left read the mark before they refuse (they refuse nothing); the
    // next open of the store, or a later removal, drops them.
    const code = sqlState(err);
    if (code !== "42501" && code !== "55P03") throw err;
    await db.transaction("unmarkEncrypted", "idempotent", unmark);
  }
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
