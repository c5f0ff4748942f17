// Runs as records on PostgreSQL: creating one, reading one, listing them, and a run's
// events. Each is one statement.

import { randomUUID } from "node:crypto";
import { StoreError } from "../../errors.js";
import { TERMINAL_STATUS_LIST } from "../status-sql.js";
import type { EventRecord, NewRun, RunFilter, RunRecord } from "../store.js";
import { pageCount } from "../verb-arguments.js";
import { valueRefused } from "./journal-writes.js";
import { plainRefused } from "./plain-triggers.js";
import {
  type EventRow,
  RUN_COLUMNS_BUT_PAYLOADS,
  type RunRow,
  type RunRowButPayloads,
  toCreatedRun,
  toEvent,
  toRun,
} from "./rows.js";
import { hintPayload, nowSql, type StoreContext } from "./sql.js";
import { inDistinctRounds, isolatingFailures } from "./turn-batch.js";

type Created = { run: RunRecord; created: boolean };

/**
 * The creates asked for in one turn (TurnBatch in postgres-store.ts): one INSERT of all of
 * them, one commit. Idempotent on the id: a run the INSERT did not make is read back, and
 * answers created=false, unless it is this very call's own create made by an earlier try
 * whose commit went unanswered (its token, in create_token, says so; not claim_token, which
 * a claim of the run overwrites between that try and the retry): a claimed run is then
 * never left leased to a worker that does not execute it, and an unclaimed one is not
 * answered as someone else's (start() answered created=false for the run it had made).
 * - Without claimBy: inserted pending and ready now, as forkRun's insertRunSql inserts,
 *   with a "runnable" hint queued by the statement itself (sent iff the run was made, and
 *   only when that commits).
 * - With claimBy: inserted running, leased to the worker (no hint: nobody else may claim
 *   it), as a claim would leave it.
 * An id asked for twice in a turn goes in a second statement after the first; should
 * PostgreSQL refuse a value of one run (valueRefused), or its triggers a plain input
 * (plainRefused), the statement rolled back as a whole, so each is created again alone and
 * only that one fails.
 */
export function createGroup(
  ctx: StoreContext,
  runs: NewRun[],
): Promise<Array<PromiseSettledResult<Created>>> {
  return inDistinctRounds(
    runs,
    (run) => run.id,
    async (round) => {
      // Every create carries a token, claimed or not (see above).
      const tokens = round.map(() => randomUUID());
      const made = await isolatingFailures(
        round.map((run, i) => ({ run, token: tokens[i]! })),
        (items) => insertTogether(ctx, items),
        (err) => valueRefused(err) !== undefined || plainRefused(err),
      );
      return Promise.allSettled(
        round.map(async (run, i): Promise<Created> => {
          const m = made[i]!;
          if (m.status === "rejected") {
            if (plainRefused(m.reason)) return madeBeforeTheMark(ctx, run.id, tokens[i]!, m.reason);
            throw m.reason;
          }
          // The input as inserted: the row came back without it (RUN_COLUMNS_BUT_PAYLOADS).
          if (m.value) return { run: toCreatedRun(m.value, run.input), created: true };
          return readBack(ctx, run.id, tokens[i]!);
        }),
      );
    },
  );
}

/** One INSERT of runs with distinct ids: each one's row (but its payloads) if it made it,
 *  else undefined. */
async function insertTogether(
  ctx: StoreContext,
  items: Array<{ run: NewRun; token: string | null }>,
): Promise<Array<RunRowButPayloads | undefined>> {
  if (items.length === 1 && ctx.db.prepares) return [await insertLone(ctx, items[0]!)];
  const { t } = ctx;
  const ins = await ctx.db.statement<RunRowButPayloads>(
    "createRun",
    "idempotent",
    `WITH x AS (
        SELECT * FROM jsonb_to_recordset($2::jsonb) AS x(id text, workflow text,
            version text, input text, budget_limit jsonb, parent_id text, trace_context text,
            handed_input_digest text, worker_id text, lease_ms bigint, token text, hint text)),
      ins AS (
        INSERT INTO ${t.runs}
            (id, workflow, version, status, input, budget_limit, parent_id, trace_context,
             handed_input_digest, ready_at, created_at, updated_at, lease_owner, lease_until,
             epoch, claim_token, create_token)
          SELECT x.id, x.workflow, x.version,
              CASE WHEN x.worker_id IS NULL THEN 'pending' ELSE 'running' END,
              x.input, x.budget_limit, x.parent_id, x.trace_context, x.handed_input_digest,
              c.now + coalesce(x.lease_ms, 0), c.now, c.now, x.worker_id,
              CASE WHEN x.worker_id IS NULL THEN NULL ELSE c.now + x.lease_ms END,
              f.epoch + CASE WHEN x.worker_id IS NULL THEN 0 ELSE 1 END, x.token, x.token
            FROM x, (SELECT ${nowSql(1)} AS now) c,
              -- Locked: waits for a deleteRun(s) that holds it (workspace.ts). By its key:
              -- the planner then knows it is one row (the table has no statistics), where a
              -- guess of thousands made every create cost enough to be JIT-compiled (15 ms).
              (SELECT epoch FROM ${t.epochFloor} WHERE id = 1 FOR KEY SHARE) f
            -- In id order, as release_runs locks: two stores inserting the same ids in
            -- opposite orders would each wait for the other's row (a deadlock).
            ORDER BY x.id COLLATE "C"
          ON CONFLICT (id) DO NOTHING
          RETURNING ${RUN_COLUMNS_BUT_PAYLOADS})
      SELECT ins.*,
          CASE WHEN ins.lease_owner IS NULL THEN pg_notify($3, x.hint) END AS notified
        FROM ins JOIN x ON x.id = ins.id`,
    [
      ctx.clockParam(),
      JSON.stringify(
        items.map(({ run, token }) => ({
          id: run.id,
          workflow: run.workflow,
          version: run.version,
          input: run.input,
          budget_limit: run.budgetLimit ?? {},
          parent_id: run.parentId ?? null,
          trace_context: run.traceContext ?? null,
          handed_input_digest: run.handedInputDigest ?? null,
          worker_id: run.claimBy?.workerId ?? null,
          lease_ms: run.claimBy ? Math.round(run.claimBy.leaseMs) : null,
          token,
          hint: run.claimBy ? null : hintPayload({ kind: "runnable", runId: run.id }),
        })),
      ),
      ctx.channel,
    ],
    // Prepared on the store's own pool: planning this statement took about half of a
    // create's server time (a sequential run's create, 1.0 ms of CPU on a loaded machine,
    // 0.5 prepared).
    "cairn_create_runs",
  );
  const rows = new Map(ins.rows.map((row) => [row.id, row]));
  return items.map(({ run }) => rows.get(run.id));
}

/**
 * A create alone in its turn (a sequential start), on the store's own pool: the INSERT of
 * insertTogether for one run, its values as parameters of their own rather than a jsonb
 * batch unpacked by jsonb_to_recordset and joined back for the hint. The same row, lock and
 * hint; about a fifth less of the server's CPU (553 us against 681, medians on a loaded
 * 2-core machine).
 */
async function insertLone(
  ctx: StoreContext,
  { run, token }: { run: NewRun; token: string | null },
): Promise<RunRowButPayloads | undefined> {
  const r = await ctx.db.statement<RunRowButPayloads>(
    "createRun",
    "idempotent",
    insertLoneSql(ctx),
    [
      ctx.clockParam(),
      run.id,
      run.workflow,
      run.version,
      run.input,
      JSON.stringify(run.budgetLimit ?? {}),
      run.parentId ?? null,
      run.traceContext ?? null,
      run.handedInputDigest ?? null,
      run.claimBy?.workerId ?? null,
      run.claimBy ? Math.round(run.claimBy.leaseMs) : null,
      token,
      ctx.channel,
      hintPayload({ kind: "runnable", runId: run.id }),
    ],
    "cairn_create_run",
  );
  return r.rows[0];
}

const loneTexts = new WeakMap<StoreContext["t"], string>();

function insertLoneSql(ctx: StoreContext): string {
  const { t } = ctx;
  let sql = loneTexts.get(t);
  if (sql === undefined) {
    // Claimed ($10, the worker, not null): running, leased to it, no hint (nobody else may
    // claim it). Else pending and ready now, with a "runnable" hint sent iff it commits.
    sql = `WITH ins AS (
        INSERT INTO ${t.runs}
            (id, workflow, version, status, input, budget_limit, parent_id, trace_context,
             handed_input_digest, ready_at, created_at, updated_at, lease_owner, lease_until,
             epoch, claim_token, create_token)
          SELECT $2::text, $3::text, $4::text,
              CASE WHEN $10::text IS NULL THEN 'pending' ELSE 'running' END,
              $5::text, $6::jsonb, $7::text, $8::text, $9::text,
              c.now + coalesce($11::bigint, 0), c.now, c.now, $10::text,
              CASE WHEN $10::text IS NULL THEN NULL ELSE c.now + $11::bigint END,
              f.epoch + CASE WHEN $10::text IS NULL THEN 0 ELSE 1 END, $12::text, $12::text
            FROM (SELECT ${nowSql(1)} AS now) c,
              -- As insertTogether: waits for a deleteRun(s) that holds it (workspace.ts).
              (SELECT epoch FROM ${t.epochFloor} WHERE id = 1 FOR KEY SHARE) f
          ON CONFLICT (id) DO NOTHING
          RETURNING ${RUN_COLUMNS_BUT_PAYLOADS})
      SELECT ins.*,
          CASE WHEN ins.lease_owner IS NULL THEN pg_notify($13::text, $14::text) END AS notified
        FROM ins`;
    loneTexts.set(t, sql);
  }
  return sql;
}

/** A create that inserted nothing: the run was there already, made by an earlier try of
 *  this very claimed create (its claim token) or by someone else. */
async function readBack(ctx: StoreContext, runId: string, token: string | null): Promise<Created> {
  const existing = await ctx.db.statement<RunRow & { mine: boolean }>(
    "createRun",
    "idempotent",
    `SELECT *, $2::text IS NOT NULL AND create_token IS NOT DISTINCT FROM $2 AS mine
      FROM ${ctx.t.runs} WHERE id = $1`,
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

/**
 * A create the mark's triggers refused (plainRefused). A retry of a create whose commit's
 * answer was lost fires the runs trigger on the row it proposes, for PostgreSQL runs a row's
 * BEFORE INSERT triggers before ON CONFLICT finds the run there: a store marked between the
 * lost try and the retry refused the plain input this very call had committed before the
 * mark, and the call was answered "nothing was written" for a run that workers execute. Its
 * own earlier create (its token) is the answer; else the refusal stands. Read only on a
 * refusal (a keyless process's first writes after another marked the store).
 */
async function madeBeforeTheMark(
  ctx: StoreContext,
  runId: string,
  token: string,
  refusal: unknown,
): Promise<Created> {
  const r = await ctx.db.statement<RunRow>(
    "createRun",
    "idempotent",
    `SELECT * FROM ${ctx.t.runs} WHERE id = $1 AND create_token = $2`,
    [runId, token],
  );
  const row = r.rows[0];
  if (!row) throw refusal;
  return { run: toRun(row), created: true };
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
      `status IN (${TERMINAL_STATUS_LIST}) AND updated_at < ${param(msParam(filter.finishedBefore))}::bigint`,
    );
  }
  if (filter.before !== undefined) {
    where.push(
      `(created_at, id) < (${param(msParam(filter.before.createdAt))}::bigint, ${param(filter.before.id)}::text)`,
    );
  }
  let sql = `SELECT * FROM ${t.runs}`;
  if (where.length > 0) sql += ` WHERE ${where.join(" AND ")}`;
  sql += " ORDER BY created_at DESC, id DESC";
  if (filter.limit !== undefined) sql += ` LIMIT ${param(pageCount(filter.limit))}`;
  const r = await db.statement<RunRow>("listRuns", "idempotent", sql, params);
  return r.rows.map(toRun);
}

/** A time bound as bigint text. Every stored time is a Date's (within ±8.64e15 ms), so a
 *  bound past ±2^53 compares as that: sent as is, 1e300 would be "1e+300", which bigint
 *  refuses, where SQLite compares it as the number it is. */
function msParam(ms: number): number {
  return Math.max(-Number.MAX_SAFE_INTEGER, Math.min(Number.MAX_SAFE_INTEGER, Math.round(ms)));
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
