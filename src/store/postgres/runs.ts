// Runs as records on PostgreSQL: creating one, reading one, listing them, and a run's
// events. Each is one statement.

import { randomUUID } from "node:crypto";
import { StoreError } from "../../errors.js";
import { TERMINAL_STATUS_LIST } from "../status-sql.js";
import type { EventRecord, NewRun, RunFilter, RunRecord } from "../store.js";
import { type EventRow, type RunRow, toEvent, toRun } from "./rows.js";
import { hintPayload, insertRunSql, nowSql, type StoreContext } from "./sql.js";

/** Idempotent on the id: a repeat of a create that did commit answers created=false with
 *  the run it made (the same run the caller asked for). */
export async function createRun(
  ctx: StoreContext,
  run: NewRun,
): Promise<{ run: RunRecord; created: boolean }> {
  if (run.claimBy) return createClaimedRun(ctx, run, run.claimBy);
  const { db, t, channel } = ctx;
  // One statement: the hint is queued by the insert itself, so it is sent iff the run
  // was created, and only when that commits.
  const ins = await db.statement<RunRow>(
    "createRun",
    "idempotent",
    `WITH ins AS (${insertRunSql(t)})
        SELECT ins.*, pg_notify($9, $10) AS notified FROM ins`,
    [
      ctx.clockParam(),
      run.id,
      run.workflow,
      run.version,
      run.input,
      JSON.stringify(run.budgetLimit ?? {}),
      run.parentId ?? null,
      run.traceContext ?? null,
      channel,
      hintPayload({ kind: "runnable", runId: run.id }),
    ],
  );
  const created = ins.rows[0];
  if (created) return { run: toRun(created), created: true };
  const existing = await getRun(ctx, run.id);
  if (!existing) {
    throw new StoreError(
      `createRun: run "${run.id}" exists per its id's unique key but could not be read ` +
        `back from PostgreSQL (${ctx.description}); it was probably deleted meanwhile. Retry.`,
    );
  }
  return { run: existing, created: false };
}

/** createRun with claimBy: inserted running, leased to the worker (no hint: nobody else
 *  may claim it). A retry after an unknown commit recognizes its own insert by the call's
 *  claim token, so the run is never left leased to a worker that does not execute it. */
async function createClaimedRun(
  ctx: StoreContext,
  run: NewRun,
  claimBy: { workerId: string; leaseMs: number },
): Promise<{ run: RunRecord; created: boolean }> {
  const { db, t } = ctx;
  const token = randomUUID();
  const ins = await db.statement<RunRow>(
    "createRun",
    "idempotent",
    `INSERT INTO ${t.runs}
        (id, workflow, version, status, input, budget_limit, parent_id, trace_context, ready_at,
         created_at, updated_at, lease_owner, lease_until, epoch, claim_token)
      SELECT $2, $3, $4, 'running', $5, $6::jsonb, $7, $8, c.now + $10::bigint, c.now, c.now,
         $9, c.now + $10::bigint, 1, $11
        FROM (SELECT ${nowSql(1)} AS now) c
      ON CONFLICT (id) DO NOTHING
      RETURNING *`,
    [
      ctx.clockParam(),
      run.id,
      run.workflow,
      run.version,
      run.input,
      JSON.stringify(run.budgetLimit ?? {}),
      run.parentId ?? null,
      run.traceContext ?? null,
      claimBy.workerId,
      Math.round(claimBy.leaseMs),
      token,
    ],
  );
  const created = ins.rows[0];
  if (created) return { run: toRun(created), created: true };
  const existing = await db.statement<RunRow & { mine: boolean }>(
    "createRun",
    "idempotent",
    `SELECT *, claim_token IS NOT DISTINCT FROM $2 AS mine FROM ${t.runs} WHERE id = $1`,
    [run.id, token],
  );
  const row = existing.rows[0];
  if (!row) {
    throw new StoreError(
      `createRun: run "${run.id}" exists per its id's unique key but could not be read ` +
        `back from PostgreSQL (${ctx.description}); it was probably deleted meanwhile. Retry.`,
    );
  }
  const { mine, ...rest } = row;
  return { run: toRun(rest as RunRow), created: mine };
}

export async function getRun(ctx: StoreContext, id: string): Promise<RunRecord | undefined> {
  const { db, t } = ctx;
  const r = await db.statement<RunRow>(
    "getRun",
    "idempotent",
    `SELECT * FROM ${t.runs} WHERE id = $1`,
    [id],
  );
  const row = r.rows[0];
  return row ? toRun(row) : undefined;
}

export async function listRuns(ctx: StoreContext, filter: RunFilter): Promise<RunRecord[]> {
  const { db, t } = ctx;
  const where: string[] = [];
  const params: unknown[] = [];
  const param = (v: unknown): string => {
    params.push(v);
    return `$${params.length}`;
  };
  if (filter.status !== undefined) {
    const statuses = Array.isArray(filter.status) ? filter.status : [filter.status];
    where.push(`status = ANY(${param(statuses)}::text[])`);
  }
  if (filter.workflow !== undefined) where.push(`workflow = ${param(filter.workflow)}`);
  if (filter.version !== undefined) where.push(`version = ${param(filter.version)}`);
  // strpos, not LIKE: the text is taken literally (no % or _ wildcards to escape).
  if (filter.idContains !== undefined) where.push(`strpos(id, ${param(filter.idContains)}) > 0`);
  if (filter.waitingForEvent) where.push("status = 'waiting' AND cardinality(waiting_for) > 0");
  if (filter.waitingForEventPrefix !== undefined) {
    where.push(
      `status = 'waiting' AND EXISTS (SELECT 1 FROM unnest(waiting_for) AS w ` +
        `WHERE starts_with(w, ${param(filter.waitingForEventPrefix)}::text))`,
    );
  }
  if (filter.parentId !== undefined) where.push(`parent_id = ${param(filter.parentId)}`);
  if (filter.finishedBefore !== undefined) {
    where.push(
      `status IN (${TERMINAL_STATUS_LIST}) AND updated_at < ${param(Math.round(filter.finishedBefore))}::bigint`,
    );
  }
  if (filter.before !== undefined) {
    where.push(
      `(created_at, id) < (${param(Math.round(filter.before.createdAt))}::bigint, ${param(filter.before.id)}::text)`,
    );
  }
  let sql = `SELECT * FROM ${t.runs}`;
  if (where.length > 0) sql += ` WHERE ${where.join(" AND ")}`;
  sql += " ORDER BY created_at DESC, id DESC";
  if (filter.limit !== undefined) sql += ` LIMIT ${param(Math.max(0, Math.floor(filter.limit)))}`;
  const r = await db.statement<RunRow>("listRuns", "idempotent", sql, params);
  return r.rows.map(toRun);
}

export async function listEvents(ctx: StoreContext, runId: string): Promise<EventRecord[]> {
  const { db, t } = ctx;
  const r = await db.statement<EventRow>(
    "listEvents",
    "idempotent",
    `SELECT * FROM ${t.events} WHERE run_id = $1 ORDER BY seq`,
    [runId],
  );
  return r.rows.map(toEvent);
}
