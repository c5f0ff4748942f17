// Leases on SQLite: claiming runs and keeping them. The claim is where the epoch moves on
// (invariant 3), so every fenced write that comes after it from an older owner fails.
// Claims take the file's write lock (BEGIN IMMEDIATE), so no two claimers, in this process
// or another, ever see the same candidate free. Times are the store's Clock.

import type { ClaimedRun, RenewLeases } from "../store.js";
import { pageCount } from "../verb-arguments.js";
import { mustGetRun, type StoreContext } from "./sql.js";

export function claimRuns(
  ctx: StoreContext,
  p: { workerId: string; workflows: string[]; limit: number; leaseMs: number },
): Promise<ClaimedRun[]> {
  if (p.workflows.length === 0 || p.limit <= 0) return Promise.resolve([]);
  return ctx.write("claimRuns", (tx) => {
    // A running run is claimable once readyAt (= leaseUntil) has passed: its lease expired.
    // A run held for a step body still running in the worker that released it (Release's
    // heldFor) is that worker's alone until held_until. The runs that are not running are
    // searched in runs_ready_idle (migration 17), by ready_at: a poll reads the ready ones,
    // not every unfinished run; running runs (the leased ones, few) by status.
    const candidates = tx
      .prepare(
        `SELECT id, status, crash_unjudged, ready_at FROM runs INDEXED BY runs_ready_idle
         WHERE ready_at <= ? AND status <> 'running'
           AND status IN ('pending', 'waiting', 'paused')
           AND (status <> 'paused' OR paused_for = 'version')
           AND (lease_owner IS NULL OR lease_owner <> ?)
           AND (held_by IS NULL OR held_by = ? OR held_until <= ?)
           AND (workflow || '@' || version) IN (SELECT value FROM json_each(?))
         UNION ALL
         SELECT id, status, crash_unjudged, ready_at FROM runs
         WHERE status = 'running' AND ready_at <= ?
           AND (lease_owner IS NULL OR lease_owner <> ?)
           AND (held_by IS NULL OR held_by = ? OR held_until <= ?)
           AND (workflow || '@' || version) IN (SELECT value FROM json_each(?))
         ORDER BY ready_at, id
         LIMIT ?`,
      )
      .all(
        ...claimArm(tx.now, p.workerId, p.workflows),
        ...claimArm(tx.now, p.workerId, p.workflows),
        pageCount(p.limit),
      ) as Array<{
      id: string;
      status: string;
      crash_unjudged: number;
    }>;
    const leaseUntil = tx.now + p.leaseMs;
    const claim = tx.prepare(
      `UPDATE runs SET status = 'running', lease_owner = ?, lease_until = ?, ready_at = ?,
           epoch = epoch + 1, wake_at = NULL, waiting_for = '[]',
           reason = CASE WHEN status = 'paused' THEN NULL ELSE reason END, paused_for = NULL,
           claimed_from = CASE WHEN crash_unjudged <> 0 THEN 'running' ELSE status END,
           crash_unjudged = 0, held_by = NULL, held_until = NULL, updated_at = ?
         WHERE id = ?`,
    );
    return candidates.map((c) => {
      claim.run(p.workerId, leaseUntil, leaseUntil, tx.now, c.id);
      // Running: its lease expired without a release (its worker crashed). A run paused
      // (or resumed) since, as that crash left it, is marked crash_unjudged (migration 12).
      const recovered = c.status === "running" || c.crash_unjudged !== 0;
      return { run: mustGetRun(tx, c.id), recovered };
    });
  });
}

/** The parameters of one arm of the claim's search. */
function claimArm(now: number, workerId: string, workflows: string[]) {
  return [now, workerId, workerId, now, JSON.stringify(workflows)];
}

export function renewLeases(
  ctx: StoreContext,
  p: RenewLeases,
): Promise<{ lost: string[]; cancelRequested: string[] }> {
  const holds = p.holds ?? [];
  const endHolds = p.endHolds ?? [];
  if (p.runs.length === 0 && holds.length === 0 && endHolds.length === 0) {
    return Promise.resolve({ lost: [], cancelRequested: [] });
  }
  return ctx.write("renewLeases", (tx) => {
    const lost: string[] = [];
    const cancelRequested: string[] = [];
    const leaseUntil = tx.now + p.leaseMs;
    // A hold still this worker's (no claim or release cleared it) goes on as a lease does.
    const renewHold = tx.prepare(
      "UPDATE runs SET held_until = ? WHERE id = ? AND held_by = ? AND held_until IS NOT NULL",
    );
    for (const runId of holds) renewHold.run(leaseUntil, runId, p.workerId);
    // A hold whose bodies ended goes now, if no claim took the run since (its epoch).
    const endHold = tx.prepare(
      `UPDATE runs SET held_by = NULL, held_until = NULL
       WHERE id = ? AND epoch = ? AND held_by = ? AND held_until IS NOT NULL`,
    );
    let ended = 0;
    for (const { runId, epoch } of endHolds) ended += endHold.run(runId, epoch, p.workerId).changes;
    if (ended > 0) tx.hint({ kind: "runnable" });
    for (const { runId, epoch } of p.runs) {
      const renewed = tx
        .prepare(
          `UPDATE runs SET lease_until = ?, ready_at = ?
           WHERE id = ? AND epoch = ? AND status = 'running' AND lease_owner = ?
           RETURNING cancel_requested`,
        )
        .get(leaseUntil, leaseUntil, runId, epoch, p.workerId) as
        | { cancel_requested: number }
        | undefined;
      if (!renewed) lost.push(runId);
      else if (renewed.cancel_requested !== 0) cancelRequested.push(runId);
    }
    return { lost, cancelRequested };
  });
}

export function expireLease(
  ctx: StoreContext,
  p: { runId: string; epoch: number; onlyIfRecovered?: boolean },
): Promise<{ ok: boolean }> {
  return ctx.write("expireLease", (tx) => {
    // The owner goes too: claimRuns never gives a worker its own runs, so a lease left
    // with this worker's name would keep the run from it when no other worker exists. Not
    // a run with a cancel asked (read here, not from the caller's snapshot): released, it
    // ends canceled at once, where left running it would wait for a worker to end it.
    const ended = tx
      .prepare(
        `UPDATE runs SET lease_owner = NULL, lease_until = ?, ready_at = ?, updated_at = ?
         WHERE id = ? AND epoch = ? AND status = 'running' AND cancel_requested = 0
           AND (? = 0 OR claimed_from = 'running')`,
      )
      .run(tx.now, tx.now, tx.now, p.runId, p.epoch, p.onlyIfRecovered === true ? 1 : 0);
    if (ended.changes > 0) tx.hint({ kind: "runnable", runId: p.runId });
    return { ok: ended.changes > 0 };
  });
}
