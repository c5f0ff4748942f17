// What a SQLite store says of itself (migration 16): that it encrypts. Read before it is
// written, so opening an encrypted store that is already marked writes nothing.

import type { ParentOf } from "../cancel-texts.js";
import type { ReadTx, StoreContext } from "./sql.js";

const ENCRYPTED = "encrypted";

export async function markEncrypted(ctx: StoreContext): Promise<void> {
  if (await isMarkedEncrypted(ctx)) return;
  await ctx.write("markEncrypted", (tx) => {
    tx.prepare("INSERT OR IGNORE INTO store_marks (name, marked_at) VALUES (?, ?)").run(
      ENCRYPTED,
      tx.now,
    );
  });
}

export function isMarkedEncrypted(ctx: StoreContext): Promise<boolean> {
  return ctx.read("isMarkedEncrypted", markedIn);
}

/** A SQL expression, 1 while the store is marked encrypted, else 0: a statement that reads
 *  a row a write then changes reads the mark beside it (sql.ts, findRowChecked). */
export const MARKED_SQL = `EXISTS (SELECT 1 FROM store_marks WHERE name = '${ENCRYPTED}')`;

/** A SQL condition true while the store is not marked encrypted: a statement that writes
 *  only then reads the mark in the statement itself (journal-writes.ts, insertFenced). */
export const UNMARKED_SQL = `NOT ${MARKED_SQL}`;

/** The mark, read inside a transaction under way (createReleasedRun's end). */
export function markedIn(tx: ReadTx): boolean {
  return tx.prepare("SELECT 1 FROM store_marks WHERE name = ?").get(ENCRYPTED) !== undefined;
}

export async function unmarkEncrypted(ctx: StoreContext): Promise<void> {
  await ctx.write("unmarkEncrypted", (tx) => {
    tx.prepare("DELETE FROM store_marks WHERE name = ?").run(ENCRYPTED);
  });
}

/** The parents of runs as this transaction reads them (a cancel's reason is cairn's only
 *  where each id in it names the parent of the run before it: cancel-texts.ts). */
export function parentsIn(tx: ReadTx): ParentOf {
  const read = tx.prepare("SELECT parent_id FROM runs WHERE id = ?");
  return (id) => (read.get(id) as { parent_id: string | null } | undefined)?.parent_id;
}

/** `ctx` with `check` run first inside every transaction a verb writes in (a grouped write's
 *  own SAVEPOINT: a refusal undoes that write alone): the mark read where the write holds
 *  the file's write lock (plain-payloads.ts, admitInTransaction). */
export function checkedContext(ctx: StoreContext, check: (tx: ReadTx) => void): StoreContext {
  return {
    write: (verb, fn) =>
      ctx.write(verb, (tx) => {
        check(tx);
        return fn(tx);
      }),
    writeGrouped: (verb, fn) =>
      ctx.writeGrouped(verb, (tx) => {
        check(tx);
        return fn(tx);
      }),
    read: (verb, fn) => ctx.read(verb, fn),
  };
}
