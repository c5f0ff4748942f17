// Which worker rows belong to processes that are gone, judged from this process. A worker
// that died leaves its runs leased until the leases expire; removing its row (removeWorker)
// makes them claimable at once, which is only safe when the process is KNOWN to be dead.
//
// kill(pid, 0) knows that only inside one PID namespace. Containers on host networking share
// the hostname but not the namespace: their pid 7 is not ours, and taking it for dead ran a
// step twice at once. So a row's pid is trusted only when its namespace identity equals ours
// (lib/process-identity.ts; both unknown: the hostname alone, as on platforms without one).
// Otherwise only a heartbeat older than a lease says the worker is gone: its leases have
// run out by then anyway, and a worker that cannot heartbeat for that long stops its own
// executions (worker.ts), so nothing it runs is taken over while it still runs it.

import type { WorkerRecord } from "../store/store.js";

export interface ThisProcess {
  workerId: string;
  host: string;
  pid: number;
  pidNamespace: string | null;
  /** The store's now: heartbeats are stamped with it. */
  now: number;
  leaseMs: number;
}

/** True when `w` is a worker on this host whose process is known to be gone. */
export function isDeadLocalWorker(
  w: WorkerRecord,
  here: ThisProcess,
  alive: (pid: number) => boolean = pidAlive,
): boolean {
  if (w.id === here.workerId || w.host !== here.host) return false;
  if (pidKnownDead(w, here, alive)) return true;
  // Our own pid is another engine in this very process: alive while we are (one cut off from
  // the store stays listed, not live, as a worker on another host does).
  if (pidMeansSameProcess(w, here) && w.pid === here.pid) return false;
  // A live pid is no proof of life: after a crash the pid may be reused by an unrelated
  // process (or by this very worker), and the row would stay for good. Silence past a lease
  // says the worker is gone, here as in another namespace.
  return !workerLive(w, here.now, here.leaseMs);
}

/** True when `w`'s pid means the same process here and that process is gone: only then may
 *  its leases be ended at once. Our own pid is another engine in this very process. */
export function pidKnownDead(
  w: WorkerRecord,
  here: ThisProcess,
  alive: (pid: number) => boolean = pidAlive,
): boolean {
  return pidMeansSameProcess(w, here) && w.pid !== here.pid && !alive(w.pid);
}

/** Whether `w`'s pid names the same process here: its PID namespace is ours (both unknown:
 *  the hostname alone decides, as on platforms without one). Only then is a dead pid proof
 *  that the worker is gone; otherwise only its silence is. */
export function pidMeansSameProcess(w: WorkerRecord, here: ThisProcess): boolean {
  return (w.pidNamespace ?? null) === here.pidNamespace;
}

/** Whether `w`'s last heartbeat is within its own lease (`readerLeaseMs` for a row that does
 *  not say): a worker with longer leases heartbeats less often, and judged by a shorter lease
 *  would look dead while it runs. `now`: the store's (heartbeats are stamped with it). */
export function workerLive(w: WorkerRecord, now: number, readerLeaseMs: number): boolean {
  return now - w.heartbeatAt <= (w.leaseMs ?? readerLeaseMs);
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
