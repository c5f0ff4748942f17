// Leases on PostgreSQL: claiming runs and keeping them. The claim is where the epoch moves
// on (invariant 3), so every fenced write that comes after it from an older owner fails.
//
// Claims never block each other: FOR UPDATE SKIP LOCKED hands each concurrent claimer
// different rows, and a row changed by someone else meanwhile is
// re-checked against the WHERE under its lock. Lease times come from the database clock
// (not the workers'), so workers with skewed clocks agree on expiry.

import { randomUUID } from "node:crypto";
import type { ClaimedRun, RenewLeases } from "../store.js";
import { pageCount } from "../verb-arguments.js";
import { type RunRow, toRun } from "./rows.js";
import { nowSql, publish, type StoreContext } from "./sql.js";

export async function claimRuns(
  ctx: StoreContext,
  p: {
    workerId: string;
    workflows: string[];
    limit: number;
    leaseMs: number;
  },
): Promise<ClaimedRun[]> {
  if (p.limit <= 0 || p.workflows.length === 0) return [];
  const { db, t } = ctx;
  // Names this call's claim in the rows it takes (see the retry below).
  const token = randomUUID();
  return db.statements("claimRuns", "idempotent", async (tx) => {
    if (tx.mayHaveCommitted) {
      // The connection died while the claim committed, or after: if it did commit, the
      // runs are leased to this worker, which never claims its own runs again, so they
      // would sit until the lease expired AND another worker came by. Hand them over now.
      const prior = await tx.query<RunRow & { claimed_from: string }>(
        `SELECT * FROM ${t.runs}
          WHERE lease_owner = $1 AND claim_token = $2 AND status = 'running'`,
        [p.workerId, token],
      );
      if (prior.rows.length > 0) return prior.rows.map(toClaimed);
    }
    // SKIP LOCKED: concurrent claimers each take different rows and never wait on each
    // other; a row changed meanwhile is re-checked against the WHERE under its lock.
    // The epoch increments under the same lock every fenced write takes.
    const r = await tx.query<RunRow & { claimed_from: string }>(
      `WITH c AS (SELECT ${nowSql(1)} AS now),
        cand AS (
          -- now as a scalar (SELECT ... FROM c), not a join with c: a value the index scan
          -- can bound ready_at by (runs_claimable), where a join filtered every entry of
          -- the index after reading it, dead ones of runs released since the last vacuum
          -- too (196 buffers read for a claim that found nothing, against 2).
          SELECT r.id FROM ${t.runs} r
          WHERE r.ready_at <= (SELECT now FROM c)
            AND r.status IN ('pending', 'waiting', 'running', 'paused')
            AND (r.status <> 'paused' OR r.paused_for = 'version')
            AND (r.workflow || '@' || r.version) = ANY($3::text[])
            AND r.lease_owner IS DISTINCT FROM $2
            -- Held for a step body still running in the worker that released it
            -- (migration 22): that worker's alone until held_until.
            AND (r.held_by IS NULL OR r.held_by = $2 OR r.held_until <= (SELECT now FROM c))
          ORDER BY r.ready_at, r.id
          LIMIT $4
          FOR UPDATE OF r SKIP LOCKED
        )
      UPDATE ${t.runs} r SET
          status = 'running', lease_owner = $2,
          lease_until = c.now + $5::bigint, ready_at = c.now + $5::bigint,
          epoch = r.epoch + 1,
          reason = CASE WHEN r.cancel_requested THEN r.reason ELSE NULL END,
          paused_for = NULL, wake_at = NULL, waiting_for = '{}', updated_at = c.now,
          claim_token = $6,
          claimed_from = CASE WHEN r.crash_unjudged THEN 'running' ELSE r.status END,
          crash_unjudged = false, held_by = NULL, held_until = NULL
        FROM cand, c
        WHERE r.id = cand.id
        RETURNING r.*`,
      [ctx.clockParam(), p.workerId, p.workflows, pageCount(p.limit), Math.round(p.leaseMs), token],
      // Prepared on the store's own pool: planned anew, a claim round that found nothing
      // cost about 700 us of server CPU (a loaded 2-core machine), and a worker polls
      // every 250 ms by default while its own runs execute.
      "cairn_claim_runs",
    );
    return r.rows.map(toClaimed);
  });
}

/** `claimed_from` is the status the claim found: "running" means the lease had expired
 *  without a release, i.e. the previous owner crashed; so does a run paused (or resumed)
 *  since as that crash left it (crash_unjudged, migration 18), which counts as found running. */
function toClaimed(row: RunRow & { claimed_from: string }): ClaimedRun {
  return { run: toRun(row), recovered: row.claimed_from === "running" };
}

export async function renewLeases(
  ctx: StoreContext,
  p: RenewLeases,
): Promise<{ lost: string[]; cancelRequested: string[] }> {
  if (p.holds !== undefined && p.holds.length > 0) await renewHolds(ctx, p, p.holds);
  if (p.endHolds !== undefined && p.endHolds.length > 0) await endHolds(ctx, p, p.endHolds);
  if (p.runs.length === 0) return { lost: [], cancelRequested: [] };
  const { db, t } = ctx;
  // Locks taken in id order, as removeWorker does, so the two never deadlock.
  const r = await db.statement<{ id: string; cancel_requested: boolean }>(
    "renewLeases",
    "idempotent",
    `WITH c AS (SELECT ${nowSql(1)} AS now),
      l AS (
        SELECT r.id FROM ${t.runs} r
        JOIN unnest($2::text[], $3::bigint[]) AS u(id, epoch)
          ON r.id = u.id AND r.epoch = u.epoch
        WHERE r.status = 'running' AND r.lease_owner = $4
        ORDER BY r.id
        FOR NO KEY UPDATE OF r
      )
    UPDATE ${t.runs} r SET lease_until = c.now + $5::bigint, ready_at = c.now + $5::bigint
      FROM l, c WHERE r.id = l.id
      RETURNING r.id, r.cancel_requested`,
    [
      ctx.clockParam(),
      p.runs.map((x) => x.runId),
      p.runs.map((x) => x.epoch),
      p.workerId,
      Math.round(p.leaseMs),
    ],
  );
  const held = new Set(r.rows.map((row) => row.id));
  return {
    lost: p.runs.filter((x) => !held.has(x.runId)).map((x) => x.runId),
    cancelRequested: r.rows.filter((row) => row.cancel_requested).map((row) => row.id),
  };
}

/** A hold still this worker's (no claim or release cleared it) goes on as a lease does.
 *  Locks taken in id order, as renewLeases and removeWorker do. */
async function renewHolds(ctx: StoreContext, p: RenewLeases, holds: string[]): Promise<void> {
  const { db, t } = ctx;
  await db.statement(
    "renewLeases",
    "idempotent",
    `WITH c AS (SELECT ${nowSql(1)} AS now),
      h AS (
        SELECT r.id FROM ${t.runs} r
        WHERE r.id = ANY($2::text[]) AND r.held_by = $3 AND r.held_until IS NOT NULL
        ORDER BY r.id
        FOR NO KEY UPDATE OF r
      )
    UPDATE ${t.runs} r SET held_until = c.now + $4::bigint FROM h, c WHERE r.id = h.id`,
    [ctx.clockParam(), holds, p.workerId, Math.round(p.leaseMs)],
  );
}

/** A hold whose bodies ended goes now, if still this worker's and no claim took the run
 *  since (its epoch). Locks taken in id order, as renewLeases and removeWorker do. */
async function endHolds(
  ctx: StoreContext,
  p: RenewLeases,
  ended: Array<{ runId: string; epoch: number }>,
): Promise<void> {
  const { db, t, channel } = ctx;
  await db.transaction("renewLeases", "idempotent", async (tx) => {
    const r = await tx.query(
      `WITH h AS (
          SELECT r.id FROM ${t.runs} r
          JOIN unnest($1::text[], $2::bigint[]) AS u(id, epoch)
            ON r.id = u.id AND r.epoch = u.epoch
          WHERE r.held_by = $3 AND r.held_until IS NOT NULL
          ORDER BY r.id
          FOR NO KEY UPDATE OF r
        )
      UPDATE ${t.runs} r SET held_by = NULL, held_until = NULL FROM h WHERE r.id = h.id`,
      [ended.map((x) => x.runId), ended.map((x) => x.epoch), p.workerId],
    );
    if ((r.rowCount ?? 0) > 0) await publish(tx, channel, [{ kind: "runnable" }]);
  });
}

/** Idempotent: the epoch is left alone, so a repeat of a commit whose answer was lost finds
 *  the run as it left it (unless a claim took it meanwhile: then ok is false, and the run
 *  is that claimer's, as the expired lease meant). */
export async function expireLease(
  ctx: StoreContext,
  p: { runId: string; epoch: number; onlyIfRecovered?: boolean },
): Promise<{ ok: boolean }> {
  const { db, t, channel } = ctx;
  return db.transaction("expireLease", "idempotent", async (tx) => {
    // The owner goes too: claimRuns never gives a worker its own runs, so a lease left
    // with this worker's name would keep the run from it when no other worker exists. Not
    // a run with a cancel asked (read here, not from the caller's snapshot): released, it
    // ends canceled at once, where left running it would wait for a worker to end it.
    const r = await tx.query(
      `WITH c AS (SELECT ${nowSql(1)} AS now)
      UPDATE ${t.runs} r SET lease_owner = NULL, lease_until = c.now, ready_at = c.now,
          updated_at = c.now
        FROM c WHERE r.id = $2 AND r.epoch = $3 AND r.status = 'running'
          AND NOT r.cancel_requested AND (NOT $4::boolean OR r.claimed_from = 'running')`,
      [ctx.clockParam(), p.runId, p.epoch, p.onlyIfRecovered === true],
    );
    const ok = (r.rowCount ?? 0) > 0;
    if (ok) await publish(tx, channel, [{ kind: "runnable", runId: p.runId }]);
    return { ok };
  });
}
