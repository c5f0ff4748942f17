// Worker rows on PostgreSQL: who is alive and which name@version pairs it runs (so a run
// whose version no live worker has can say so), and handing back the runs of a worker
// that is gone.

import { displayText } from "../../lib/text.js";
import type { WorkerRecord } from "../store.js";
import { toWorker, type WorkerRow } from "./rows.js";
import { nowSql, publish, type StoreContext } from "./sql.js";

export async function registerWorker(
  ctx: StoreContext,
  w: Omit<WorkerRecord, "startedAt" | "heartbeatAt">,
): Promise<void> {
  const { db, t } = ctx;
  await db.statement(
    "registerWorker",
    "idempotent",
    `INSERT INTO ${t.workers}
        (id, host, pid, pid_namespace, workflows, lease_ms, started_at, heartbeat_at)
      SELECT $2, $3, $4, $6, $5::text[], $7, c.now, c.now FROM (SELECT ${nowSql(1)} AS now) c
      ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid,
        pid_namespace = EXCLUDED.pid_namespace, workflows = EXCLUDED.workflows,
        lease_ms = EXCLUDED.lease_ms, started_at = EXCLUDED.started_at,
        heartbeat_at = EXCLUDED.heartbeat_at`,
    [
      ctx.clockParam(),
      w.id,
      displayText(w.host),
      w.pid,
      w.workflows,
      w.pidNamespace == null ? null : displayText(w.pidNamespace),
      w.leaseMs == null ? null : Math.round(w.leaseMs),
    ],
  );
}

export async function heartbeatWorker(ctx: StoreContext, id: string): Promise<void> {
  const { db, t } = ctx;
  await db.statement(
    "heartbeatWorker",
    "idempotent",
    `UPDATE ${t.workers} SET heartbeat_at = ${nowSql(1)} WHERE id = $2`,
    [ctx.clockParam(), id],
  );
}

export async function removeWorker(
  ctx: StoreContext,
  id: string,
  options: { expireLeases?: boolean } = {},
): Promise<void> {
  const { db, t, channel } = ctx;
  await db.transaction("removeWorker", "idempotent", async (tx) => {
    await tx.query(`DELETE FROM ${t.workers} WHERE id = $1`, [id]);
    if (options.expireLeases === false) return;
    // Its runs become claimable now (lease_until moves with ready_at, as for any running
    // run). The epoch is left alone: the next claim increments it, fencing the worker out
    // should it still be alive.
    // Its holds end too: no body of a worker known dead runs (migration 23 finds them);
    // a held run's updated_at stays (a failed run's is when it finished, which retention
    // goes by). One statement, its locks taken in id order as renewLeases takes them.
    const r = await tx.query(
      `WITH c AS (SELECT ${nowSql(1)} AS now),
        l AS (
          SELECT x.id, x.lease_owner = $2 AND x.status = 'running' AS leased,
              x.held_by = $2 AND x.held_until > c.now AS held
            FROM ${t.runs} x, c
            WHERE (x.lease_owner = $2 AND x.status = 'running')
              OR (x.held_by = $2 AND x.held_until > c.now)
          ORDER BY x.id FOR NO KEY UPDATE OF x
        )
      UPDATE ${t.runs} r SET
          ready_at = CASE WHEN l.leased THEN c.now ELSE r.ready_at END,
          lease_until = CASE WHEN l.leased THEN c.now ELSE r.lease_until END,
          held_by = CASE WHEN l.held THEN NULL ELSE r.held_by END,
          held_until = CASE WHEN l.held THEN NULL ELSE r.held_until END,
          updated_at = CASE WHEN l.leased THEN c.now ELSE r.updated_at END
        FROM l, c WHERE r.id = l.id`,
      [ctx.clockParam(), id],
    );
    if ((r.rowCount ?? 0) > 0) {
      await publish(tx, channel, [{ kind: "runnable" }]);
    }
  });
}

export async function listWorkers(ctx: StoreContext): Promise<WorkerRecord[]> {
  const { db, t } = ctx;
  const r = await db.statement<WorkerRow>(
    "listWorkers",
    "idempotent",
    `SELECT * FROM ${t.workers} ORDER BY id`,
  );
  return r.rows.map(toWorker);
}
