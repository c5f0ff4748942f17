// Runs as records on PostgreSQL: creating one, reading one, listing them, and a run's
// events. Each is one statement.

import { randomUUID } from "node:crypto";
import { StoreError } from "../../errors.js";
import { TERMINAL_STATUS_LIST } from "../status-sql.js";
import type { EventRecord, NewRun, RunFilter, RunRecord } from "../store.js";
import { dataException } from "./journal-writes.js";
import { type EventRow, type RunRow, toEvent, toRun } from "./rows.js";
import { hintPayload, insertRunSql, nowSql, type StoreContext } from "./sql.js";

/** A create without claimBy (claimed creates: createClaimedGroup). Idempotent on the id: a
 *  repeat of a create that did commit answers created=false with the run it made (the
 *  same run the caller asked for). */
export async function createRun(
  ctx: StoreContext,
  run: NewRun,
): Promise<{ run: RunRecord; created: boolean }> {
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

/** A claimed create that inserted nothing: the run was there already, made by an earlier
 *  try of this very call (its claim token) or by someone else. */
async function readBackClaimed(
  ctx: StoreContext,
  runId: string,
  token: string,
): Promise<{ run: RunRecord; created: boolean }> {
  const existing = await ctx.db.statement<RunRow & { mine: boolean }>(
    "createRun",
    "idempotent",
    `SELECT *, claim_token IS NOT DISTINCT FROM $2 AS mine FROM ${ctx.t.runs} WHERE id = $1`,
    [runId, token],
  );
  const row = existing.rows[0];
  if (!row) {
    throw new StoreError(
      `createRun: run "${runId}" exists per its id's unique key but could not be read ` +
        `back from PostgreSQL (${ctx.description}); it was probably deleted meanwhile. Retry.`,
    );
  }
  const { mine, ...rest } = row;
  return { run: toRun(rest as RunRow), created: mine };
}

type Created = { run: RunRecord; created: boolean };

/**
 * Creates with claimBy: inserted running, leased to the worker (no hint: nobody else may
 * claim it). A retry after an unknown commit recognizes its own insert by the call's claim
 * token, so the run is never left leased to a worker that does not execute it.
 * Those asked for in one turn (an engine starting the runs it executes itself; TurnBatch
 * in postgres-store.ts) go together: one INSERT of all of them, one commit. An id asked for
 * twice goes in a second statement after the first. A run the INSERT did not make is read
 * back by its claim token; should PostgreSQL refuse a value of
 * one run (a data exception) the statement rolled back as a whole, so each is created
 * again alone and only that one fails.
 */
export async function createClaimedGroup(
  ctx: StoreContext,
  runs: NewRun[],
): Promise<Array<PromiseSettledResult<Created>>> {
  const answers: Array<PromiseSettledResult<Created>> = new Array(runs.length);
  let rest = runs.map((run, i) => ({ run, i }));
  while (rest.length > 0) {
    const ids = new Set<string>();
    const now: typeof rest = [];
    const later: typeof rest = [];
    for (const e of rest) {
      if (ids.has(e.run.id)) later.push(e);
      else {
        ids.add(e.run.id);
        now.push(e);
      }
    }
    const got = await createClaimedTogether(
      ctx,
      now.map((e) => e.run),
    );
    now.forEach((e, k) => {
      answers[e.i] = got[k]!;
    });
    rest = later;
  }
  return answers;
}

async function createClaimedTogether(
  ctx: StoreContext,
  runs: NewRun[],
): Promise<Array<PromiseSettledResult<Created>>> {
  const tokens = runs.map(() => randomUUID());
  let inserted: Map<string, RunRow>;
  try {
    const ins = await ctx.db.statement<RunRow>(
      "createRun",
      "idempotent",
      `INSERT INTO ${ctx.t.runs}
          (id, workflow, version, status, input, budget_limit, parent_id, trace_context,
           ready_at, created_at, updated_at, lease_owner, lease_until, epoch, claim_token)
        SELECT x.id, x.workflow, x.version, 'running', x.input, x.budget_limit, x.parent_id,
           x.trace_context, c.now + x.lease_ms, c.now, c.now, x.worker_id, c.now + x.lease_ms,
           1, x.token
          FROM jsonb_to_recordset($2::jsonb) AS x(id text, workflow text, version text,
              input text, budget_limit jsonb, parent_id text, trace_context text,
              worker_id text, lease_ms bigint, token text),
            (SELECT ${nowSql(1)} AS now) c
        ON CONFLICT (id) DO NOTHING
        RETURNING *`,
      [
        ctx.clockParam(),
        JSON.stringify(
          runs.map((run, i) => ({
            id: run.id,
            workflow: run.workflow,
            version: run.version,
            input: run.input,
            budget_limit: run.budgetLimit ?? {},
            parent_id: run.parentId ?? null,
            trace_context: run.traceContext ?? null,
            worker_id: run.claimBy?.workerId,
            lease_ms: Math.round(run.claimBy?.leaseMs ?? 0),
            token: tokens[i],
          })),
        ),
      ],
    );
    inserted = new Map(ins.rows.map((row) => [row.id, row]));
  } catch (err) {
    if (runs.length === 1 || dataException(err) === undefined) {
      return runs.map(() => ({ status: "rejected", reason: err }));
    }
    const out: Array<PromiseSettledResult<Created>> = [];
    for (const run of runs) out.push(...(await createClaimedTogether(ctx, [run])));
    return out;
  }
  return Promise.allSettled(
    runs.map(async (run, i) => {
      const row = inserted.get(run.id);
      if (row) return { run: toRun(row), created: true };
      return readBackClaimed(ctx, run.id, tokens[i]!);
    }),
  );
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
