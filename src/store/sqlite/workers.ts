// Worker rows on SQLite: who is alive and which name@version pairs it runs (so a run whose
// version no live worker has can say so), and handing back the runs of a worker that is
// gone.

import { displayText } from "../../lib/text.js";
import type { WorkerRecord } from "../store.js";
import { type WorkerRow, workerFromRow } from "./rows.js";
import type { StoreContext } from "./sql.js";

export async function registerWorker(
  ctx: StoreContext,
  w: Omit<WorkerRecord, "startedAt" | "heartbeatAt">,
): Promise<void> {
  await ctx.write("registerWorker", (tx) => {
    tx.prepare(
      `INSERT INTO workers
           (id, host, pid, pid_namespace, workflows, lease_ms, started_at, heartbeat_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
           pid_namespace = excluded.pid_namespace, workflows = excluded.workflows,
           lease_ms = excluded.lease_ms, started_at = excluded.started_at,
           heartbeat_at = excluded.heartbeat_at`,
    ).run(
      w.id,
      displayText(w.host),
      w.pid,
      w.pidNamespace == null ? null : displayText(w.pidNamespace),
      JSON.stringify(w.workflows),
      w.leaseMs == null ? null : Math.round(w.leaseMs),
      tx.now,
      tx.now,
    );
  });
}

export async function heartbeatWorker(ctx: StoreContext, id: string): Promise<void> {
  await ctx.write("heartbeatWorker", (tx) => {
    tx.prepare("UPDATE workers SET heartbeat_at = ? WHERE id = ?").run(tx.now, id);
  });
}

export async function removeWorker(
  ctx: StoreContext,
  id: string,
  options: { expireLeases?: boolean } = {},
): Promise<void> {
  await ctx.write("removeWorker", (tx) => {
    tx.prepare("DELETE FROM workers WHERE id = ?").run(id);
    if (options.expireLeases === false) return;
    // Expire the leases now: the runs become claimable, and a claim reports them recovered.
    const freed = tx
      .prepare(
        `UPDATE runs SET ready_at = ?, lease_until = ?, updated_at = ?
         WHERE lease_owner = ? AND status = 'running'`,
      )
      .run(tx.now, tx.now, tx.now, id);
    // Its holds end too: no body of a worker known dead runs (migration 15 finds them).
    // updated_at stays: a failed run's is when it finished, which retention goes by.
    const unheld = tx
      .prepare(
        "UPDATE runs SET held_by = NULL, held_until = NULL WHERE held_by = ? AND held_until > ?",
      )
      .run(id, tx.now);
    if (freed.changes > 0 || unheld.changes > 0) tx.hint({ kind: "runnable" });
  });
}

export function listWorkers(ctx: StoreContext): Promise<WorkerRecord[]> {
  return ctx.read("listWorkers", (tx) =>
    (tx.prepare("SELECT * FROM workers ORDER BY id").all() as WorkerRow[]).map(workerFromRow),
  );
}
