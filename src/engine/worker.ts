// The claim loop: claims runnable runs of the registered name@version pairs, holds their
// leases (heartbeats renew them; a renewal that reports a lost lease stops the execution),
// and reports runs whose version no live worker has. Polling is the source of truth;
// store hints and virtual-clock jumps only make the next poll come sooner.

import { hostname } from "node:os";
import type { Clock } from "../lib/clock.js";
import type { ClaimedRun, Store } from "../store/store.js";
import type { Workflow } from "../workflow/define.js";
import { Execution, type ExecutionDeps, handBackRun } from "./execution.js";

export interface WorkerOptions {
  id: string;
  store: Store;
  clock: Clock;
  workflows: Map<string, Workflow<unknown, unknown>>;
  concurrency: number;
  leaseMs: number;
  heartbeatMs: number;
  pollIntervalMs: number;
  execution: ExecutionDeps;
}

export class Worker {
  readonly active = new Map<string, Execution>();
  private pollTimer: NodeJS.Timeout | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  /** The claim round in flight, if any: close() waits for it. */
  private polling: Promise<void> | undefined;
  /** Releases of runs claimed after close() began. */
  private readonly handingBack = new Set<Promise<void>>();
  private pollAgain = false;
  private closed = false;
  private lastRenewOk: number;
  /** The heartbeat in flight, if any: close() waits for it before the store closes. */
  private heartbeating: Promise<void> | undefined;
  private heartbeatAgain = false;
  private unsubscribe: Array<() => void> = [];
  readonly stats = { claimed: 0, executions: 0 };

  constructor(private readonly o: WorkerOptions) {
    this.lastRenewOk = o.clock.now();
  }

  async start(): Promise<void> {
    const { store } = this.o;
    await this.recoverDeadLocalWorkers();
    await store.registerWorker({
      id: this.o.id,
      host: hostname(),
      pid: process.pid,
      workflows: [...this.o.workflows.keys()],
    });
    this.unsubscribe.push(
      store.subscribe((hint) => {
        if (hint.kind === "runnable") {
          if (hint.runId) this.active.get(hint.runId)?.poke();
          this.poke();
        } else if (hint.kind === "cancel" && hint.runId && this.active.has(hint.runId)) {
          void this.heartbeat();
        }
      }),
    );
    const onAdvance = this.o.clock.onAdvance?.(() => {
      void this.heartbeat();
      this.poke();
    });
    if (onAdvance) this.unsubscribe.push(onAdvance);
    this.heartbeatTimer = setInterval(() => void this.heartbeat(), this.o.heartbeatMs);
    this.heartbeatTimer.unref?.();
    await this.markUnserved();
    this.poke();
  }

  /** Asks for a claim round now (a run was started, an event sent, a slot freed). */
  poke(): void {
    if (this.closed) return;
    if (this.polling !== undefined) {
      this.pollAgain = true;
      return;
    }
    this.schedulePoll(0);
  }

  private schedulePoll(delayMs: number): void {
    if (this.closed) return;
    if (this.pollTimer) clearTimeout(this.pollTimer);
    this.pollTimer = setTimeout(() => {
      this.pollTimer = undefined;
      void this.pollOnce();
    }, delayMs);
  }

  private pollOnce(): Promise<void> {
    if (this.closed || this.polling !== undefined) return this.polling ?? Promise.resolve();
    this.polling = this.claimRound().finally(() => {
      this.polling = undefined;
      if (this.pollAgain) {
        this.pollAgain = false;
        this.schedulePoll(0);
      } else {
        this.schedulePoll(this.o.pollIntervalMs);
      }
    });
    return this.polling;
  }

  private async claimRound(): Promise<void> {
    try {
      const free = this.o.concurrency - this.active.size;
      if (free > 0) {
        const limit = Math.min(free, 64);
        const claims = await this.o.store.claimRuns({
          workerId: this.o.id,
          workflows: [...this.o.workflows.keys()],
          limit,
          leaseMs: this.o.leaseMs,
        });
        for (const c of claims) this.launch(c);
        if (claims.length === limit) this.pollAgain = true;
      }
    } catch (err) {
      this.o.execution.log("claiming runs failed; retrying at the next poll", err);
    }
  }

  private launch(claim: ClaimedRun): void {
    if (this.closed) {
      // Claimed by a round that was in flight when close() began: hand it straight back.
      const p = this.handBack(claim).finally(() => this.handingBack.delete(p));
      this.handingBack.add(p);
      return;
    }
    const wf = this.o.workflows.get(`${claim.run.workflow}@${claim.run.version}`);
    if (!wf) return; // cannot happen: claims are filtered by our workflows
    this.stats.claimed++;
    const ex = new Execution(this.o.execution, claim, wf);
    this.active.set(claim.run.id, ex);
    void ex.finished.then(() => {
      if (this.active.get(claim.run.id) === ex) this.active.delete(claim.run.id);
      this.stats.executions++;
      this.poke();
    });
  }

  /** Renews the leases of executing runs; stops those whose lease is gone; delivers
   *  cancel requests made in other processes. */
  private async heartbeat(): Promise<void> {
    if (this.closed) return;
    if (this.heartbeating !== undefined) {
      this.heartbeatAgain = true;
      return this.heartbeating;
    }
    this.heartbeating = (async () => {
      try {
        do {
          this.heartbeatAgain = false;
          await this.heartbeatOnce();
        } while (this.heartbeatAgain && !this.closed);
      } finally {
        this.heartbeating = undefined;
      }
    })();
    return this.heartbeating;
  }

  private async heartbeatOnce(): Promise<void> {
    const { store, clock, leaseMs } = this.o;
    const runs = [...this.active.values()].map((e) => ({ runId: e.runId, epoch: e.epoch }));
    try {
      if (runs.length > 0) {
        const res = await store.renewLeases({ workerId: this.o.id, runs, leaseMs });
        for (const id of res.lost) this.active.get(id)?.leaseLost();
        for (const id of res.cancelRequested) {
          const run = await store.getRun(id);
          this.active.get(id)?.cancel(run?.reason ?? "canceled");
        }
      }
      await store.heartbeatWorker(this.o.id);
      this.lastRenewOk = clock.now();
      await this.markUnserved();
    } catch (err) {
      this.o.execution.log("renewing leases failed", err);
      // Past our own lease we may no longer own anything: stop rather than act as a zombie.
      if (clock.now() - this.lastRenewOk > leaseMs) {
        for (const ex of this.active.values()) ex.leaseLost();
      }
    }
  }

  private async markUnserved(): Promise<void> {
    const { store, leaseMs } = this.o;
    // Heartbeats are stamped by the store's clock (the database's on PostgreSQL): judge
    // them by the same clock, never this worker's, or skew would make live workers "dead".
    const now = await store.now();
    const served = new Set<string>();
    for (const w of await store.listWorkers()) {
      if (now - w.heartbeatAt <= leaseMs) for (const wf of w.workflows) served.add(wf);
    }
    for (const wf of this.o.workflows.keys()) served.add(wf);
    await store.markUnserved({ served: [...served], graceMs: Math.min(leaseMs, 5_000) });
  }

  /** Workers on this host whose process is gone: their runs are claimable at once rather
   *  than after their leases expire. Fencing keeps this safe even if a pid was reused. */
  private async recoverDeadLocalWorkers(): Promise<void> {
    const host = hostname();
    for (const w of await this.o.store.listWorkers()) {
      if (w.host !== host || w.pid === process.pid || w.id === this.o.id) continue;
      if (!pidAlive(w.pid)) await this.o.store.removeWorker(w.id);
    }
  }

  private async handBack(claim: ClaimedRun): Promise<void> {
    if (!(await handBackRun(this.o.store, claim.run.id, claim.run.epoch))) {
      this.o.execution.log(`handing back run "${claim.run.id}" failed; its lease will expire`);
    }
  }

  async close(graceMs: number): Promise<void> {
    this.closed = true;
    if (this.pollTimer) clearTimeout(this.pollTimer);
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    for (const u of this.unsubscribe) u();
    // A claim round in flight may still commit: wait for it (bounded), so whatever it
    // claimed is handed back before this worker's row goes.
    if (this.polling !== undefined) await withTimeout(this.polling, graceMs);
    const running = [...this.active.values()];
    if (running.length > 0) await withTimeout(Promise.all(running.map((e) => e.finished)), graceMs);
    for (const ex of this.active.values()) ex.abandon();
    // Let a heartbeat in flight finish before the store closes, but never wait on a store
    // that hangs.
    if (this.heartbeating !== undefined) {
      await withTimeout(this.heartbeating, Math.min(graceMs, 2_000));
    }
    await Promise.all(this.handingBack);
    // Removing the worker row makes every run it still leases claimable now.
    await this.o.store.removeWorker(this.o.id);
  }
}

/** Waits for `p`, but no longer than `ms`. */
async function withTimeout(p: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    p.then(
      () => {},
      () => {},
    ),
    new Promise<void>((r) => {
      timer = setTimeout(r, ms);
    }),
  ]);
  clearTimeout(timer);
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
