// A worker's row in the workers table, and its sweeps of that table: writing the row (again,
// if another worker removed it), taking over the runs of dead workers on this host
// (dead-workers.ts), and pausing runs whose version no live worker has.

import { hostname } from "node:os";
import { pidNamespace } from "../lib/process-identity.js";
import { displayText } from "../lib/text.js";
import { isDeadLocalWorker, pidKnownDead, workerLive } from "./dead-workers.js";
import type { WorkerOptions } from "./worker-options.js";

export class WorkerTable {
  /** The write of this worker's row in flight, if any: close() removes the row after it. */
  private registering: Promise<void> | undefined;
  /** The sweep of the worker table in flight, if any (sweepAside). */
  private sweeping: Promise<void> | undefined;

  constructor(
    private readonly options: WorkerOptions,
    private readonly hooks: {
      /** close() began: the row is about to go. */
      closed(): boolean;
      /** Runs a sweep canceled as unserved: their children go with them. */
      canceled(runIds: string[]): void;
    },
  ) {}

  /** The write of the row in flight, if any. */
  get registerInFlight(): Promise<void> | undefined {
    return this.registering;
  }

  /** The sweep in flight, if any. */
  get sweepInFlight(): Promise<void> | undefined {
    return this.sweeping;
  }

  /** Writes this worker's row (an upsert): who it is and what it serves. */
  register(): Promise<void> {
    const writing = this.options.store.registerWorker({
      id: this.options.id,
      host: hostname(),
      pid: process.pid,
      pidNamespace: pidNamespace(),
      workflows: [...this.options.workflows.keys()],
      leaseMs: this.options.leaseMs,
    });
    this.registering = writing;
    const done = () => {
      if (this.registering === writing) this.registering = undefined;
    };
    writing.then(done, done);
    return writing;
  }

  /** Sweeps the worker table beside the heartbeat, one sweep at a time: a slow one (a lock
   *  wait, a scan of a large backlog) must not hold up the renewals of the next heartbeats,
   *  or the leases of running runs would run out under them. */
  sweepAside(): void {
    if (this.sweeping !== undefined) return;
    this.sweeping = this.sweep()
      .catch((err: unknown) => this.options.execution.log("sweeping the worker table failed", err))
      .finally(() => {
        this.sweeping = undefined;
      });
  }

  /** Takes over the runs of dead workers on this host (removing a row makes the runs it
   *  leases claimable now; fencing keeps that safe should the worker still write), then
   *  pauses runs whose version no live worker has. */
  async sweep(): Promise<void> {
    const { store, leaseMs } = this.options;
    // Heartbeats are stamped by the store's clock (the database's on PostgreSQL): judge
    // them by the same clock, never this worker's, or skew would make live workers "dead".
    const now = await store.now();
    const here = {
      workerId: this.options.id,
      host: displayText(hostname()),
      pid: process.pid,
      pidNamespace: pidNamespace(),
      now,
      leaseMs,
    };
    const served = new Set<string>();
    const rows = await store.listWorkers();
    // Our row is gone while we live: another worker judged us dead (a heartbeat held up past
    // our lease: a step that blocked the event loop, a paused container). A heartbeat only
    // updates the row, so we would stay invisible for good: starts by name would find no
    // live worker for our workflows, and other workers would pause their runs as unserved.
    // Not once close() began: the row is about to go, and a write landing after its removal
    // would leave it behind.
    if (!this.hooks.closed() && !rows.some((w) => w.id === this.options.id)) {
      await this.register();
    }
    for (const w of rows) {
      if (isDeadLocalWorker(w, here)) {
        // Only a pid known dead (same PID namespace) frees its leases at once. A worker
        // judged by its heartbeat alone may have a longer lease (and heartbeat interval)
        // than ours: its runs are taken when their own leases end.
        await store.removeWorker(w.id, { expireLeases: pidKnownDead(w, here) });
        this.options.execution.lifecycle({ event: "takeover", deadWorkerId: w.id });
      } else if (workerLive(w, now, leaseMs)) for (const wf of w.workflows) served.add(wf);
    }
    for (const wf of this.options.workflows.keys()) served.add(wf);
    await store.markUnserved({
      served: [...served],
      graceMs: Math.min(leaseMs, 5_000),
      canceled: (ids) => this.hooks.canceled(ids),
    });
  }
}
