// Store.pendingEventHeadsOfNames on PostgreSQL: the pages of several names in one statement,
// each read as pendingEventHeadsNamed reads its page (an index search of
// events_unconsumed_by_name, migration 25), side by side (a LATERAL join over the pages).
// An execution reads with its first read the results of the children its journal holds
// begun and unfinished: a parent replayed after N children ended made N round trips.
// Prepared, as the other statements each execution makes (its claim, its journal's load).

import type { EventHead, EventHeadsPage } from "../store.js";
import { type NamedEventHeadRow, toNamedEventHead } from "./rows.js";
import type { StoreContext } from "./sql.js";

export async function pendingEventHeadsOfNames(
  ctx: StoreContext,
  runId: string,
  pages: readonly EventHeadsPage[],
  settled: boolean,
): Promise<EventHead[]> {
  const { t } = ctx;
  const sql = `SELECT p.i, e.seq, e.created_at, e.idempotency_key
    FROM unnest($2::text[], $3::bigint[], $4::integer[]) WITH ORDINALITY AS p(name, after, lim, i)
    CROSS JOIN LATERAL (
      SELECT seq, created_at, idempotency_key FROM ${t.events}
        WHERE run_id = $1 AND name = p.name AND consumed_by IS NULL AND seq > p.after
        ORDER BY seq LIMIT p.lim) e
    ORDER BY p.i, e.seq`;
  const params = [
    runId,
    pages.map((p) => p.name),
    pages.map((p) => String(p.after)),
    pages.map((p) => p.limit),
  ];
  type Row = NamedEventHeadRow & { i: string | number };
  const toHead = (r: Row): EventHead => toNamedEventHead(runId, pages[Number(r.i) - 1]!.name, r);
  const verb = "pendingEventHeadsOfNames";
  if (!settled) {
    const r = await ctx.db.statement<Row>(
      verb,
      "idempotent",
      sql,
      params,
      "cairn_event_heads_of_names",
    );
    return r.rows.map(toHead);
  }
  return ctx.db.transaction(verb, "idempotent", async (tx) => {
    // As pendingEventHeadsNamed: wait for an event write under way, then read.
    await tx.query(`SELECT 1 FROM ${t.runs} WHERE id = $1 FOR SHARE`, [runId]);
    return (await tx.query<Row>(sql, params)).rows.map(toHead);
  });
}
