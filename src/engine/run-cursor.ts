// A walk of Store.listRuns pages by their cursor (the last run of a page, (createdAt, id)),
// which must move on with every page: each page lists runs strictly after the cursor, in
// (createdAt, id) descending order, so a page's last run is never one the walk stood at
// before, nor created later than the cursor. A store that breaks this would have the walk
// ask for the same page for ever: a run id stored as text that is not valid UTF-8 (written
// outside cairn) reads back with U+FFFD in it, which sorts after the bytes stored, so the run
// comes again after itself. The walk stops there with a StoreError naming the run.
//
// Only createdAt (a number) is compared by order: ids are compared by equality, as the
// backends order text their own way (SQLite by bytes, PostgreSQL by the column's collation).

import { StoreError } from "../errors.js";

export interface RunCursor {
  createdAt: number;
  id: string;
}

/** The cursor of one walk: `before` for the next page, `advance(last)` after each page
 *  (throws a StoreError when `last` does not move the walk on). */
export interface RunCursorWalk {
  readonly before: RunCursor | undefined;
  advance(last: RunCursor): void;
}

/** A walk's cursor; `walk` names the walk in its error ("retention", ...). */
export function runCursorWalk(walk: string): RunCursorWalk {
  let before: RunCursor | undefined;
  const stoodAt = new Set<string>();
  return {
    get before() {
      return before;
    },
    advance(last) {
      const key = `${last.createdAt}:${last.id}`;
      if (before !== undefined && (last.createdAt > before.createdAt || stoodAt.has(key))) {
        throw new StoreError(
          `${walk}: the store listed run ${JSON.stringify(last.id.slice(0, 80))} (created at ${last.createdAt}) again on a page after it, so the walk of its run list would never end. Its id may not read back as it is stored (text that is not valid UTF-8, written to the store outside cairn): fix or delete that run's row.`,
        );
      }
      stoodAt.add(key);
      before = { createdAt: last.createdAt, id: last.id };
    },
  };
}
