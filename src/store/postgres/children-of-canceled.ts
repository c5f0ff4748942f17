// Store.listChildrenOfCanceled on PostgreSQL: unfinished runs whose parent is canceled, the
// children a cancel's cascade left behind. Children are found by status (runs_status_created)
// and their parents by primary key; a plain read, it locks nothing.

import { pageCount } from "../verb-arguments.js";
import type { StoreContext } from "./sql.js";

export async function listChildrenOfCanceled(
  ctx: StoreContext,
  p: { limit: number },
): Promise<Array<{ runId: string; parentId: string }>> {
  const { db, t } = ctx;
  const limit = Math.max(1, pageCount(p.limit));
  const r = await db.statement<{ id: string; parent_id: string }>(
    "listChildrenOfCanceled",
    "idempotent",
    `SELECT c.id, c.parent_id
       FROM ${t.runs} c JOIN ${t.runs} p ON p.id = c.parent_id
      WHERE c.status IN ('pending', 'running', 'waiting', 'paused')
        AND NOT c.cancel_requested AND c.parent_id IS NOT NULL
        AND p.status = 'canceled'
      LIMIT $1`,
    [limit],
  );
  return r.rows.map((row) => ({ runId: row.id, parentId: row.parent_id }));
}
