// Store.listChildrenOfCanceled on SQLite: unfinished runs whose parent is canceled, the
// children a cancel's cascade left behind. Children are found by status (runs_status_created)
// and their parents by primary key; a read, so it takes no write lock.

import { pageCount } from "../verb-arguments.js";
import type { StoreContext } from "./sql.js";

export function listChildrenOfCanceled(
  ctx: StoreContext,
  p: { limit: number },
): Promise<Array<{ runId: string; parentId: string }>> {
  const limit = Math.max(1, pageCount(p.limit));
  return ctx.read("listChildrenOfCanceled", (tx) =>
    (
      tx
        .prepare(
          `SELECT c.id AS runId, c.parent_id AS parentId
             FROM runs c JOIN runs p ON p.id = c.parent_id
            WHERE c.status IN ('pending', 'running', 'waiting', 'paused')
              AND c.cancel_requested = 0 AND c.parent_id IS NOT NULL
              AND p.status = 'canceled'
            LIMIT ?`,
        )
        .all(limit) as Array<{ runId: string; parentId: string }>
    ).map((r) => ({ runId: r.runId, parentId: r.parentId })),
  );
}
