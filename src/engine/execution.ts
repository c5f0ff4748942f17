// One execution of one claimed run: read the journal (one query), replay/execute through a
// Context, then release the run with the outcome — all writes fenced by the claim's epoch.

import { decode, encode } from "../codec/codec.js";
import { SerializationError } from "../errors.js";
import type { Clock } from "../lib/clock.js";
import type { ClaimedRun, ErrorRecord, NewEvent, Release, Store } from "../store/store.js";
import { CHILD_EVENT_PREFIX, Context, type Outcome, toErrorRecord } from "../workflow/context.js";
import type { Workflow } from "../workflow/define.js";
import type { Committer } from "./committer.js";
import type { RetryPolicy } from "./retry.js";

export interface ExecutionDeps {
  store: Store;
  committer: Committer;
  clock: Clock;
  maxPayloadBytes: number;
  inProcessRetryMs: number;
  startChild(
    parentId: string,
    childId: string,
    wf: Workflow<unknown, unknown>,
    input: unknown,
  ): Promise<void>;
  log(message: string, err?: unknown): void;
}

export class Execution {
  readonly runId: string;
  readonly epoch: number;
  private ctx: Context | undefined;
  private pendingCancel: string | undefined;
  private abandoned = false;
  readonly finished: Promise<void>;

  constructor(
    private readonly deps: ExecutionDeps,
    private readonly claim: ClaimedRun,
    private readonly wf: Workflow<unknown, unknown>,
  ) {
    this.runId = claim.run.id;
    this.epoch = claim.run.epoch;
    this.finished = this.execute().catch((err) => this.handBack(err));
  }

  cancel(reason: string): void {
    if (this.ctx) this.ctx.cancel(reason);
    else this.pendingCancel = reason;
  }

  leaseLost(): void {
    this.abandoned = true;
    this.ctx?.leaseLost();
  }

  poke(): void {
    this.ctx?.poke().catch((err) => this.deps.log(`reading events of run "${this.runId}"`, err));
  }

  /** Stops executing without writing anything (engine close after the grace period). */
  abandon(): void {
    this.abandoned = true;
    this.ctx?.leaseLost();
  }

  private async execute(): Promise<void> {
    const { store, committer, clock } = this.deps;
    const run = this.claim.run;
    if (run.cancelRequested) {
      await this.release({ kind: "canceled", reason: run.reason ?? "canceled" });
      return;
    }
    const journal = await store.loadJournal(run.id);
    const ctx = new Context(
      {
        runId: run.id,
        workflow: run.workflow,
        version: run.version,
        generation: run.generation,
        recovered: this.claim.recovered,
        budgetLimit: run.budgetLimit,
        budgetSpent: run.budgetSpent,
        clock,
        maxPayloadBytes: this.deps.maxPayloadBytes,
        inProcessRetryMs: this.deps.inProcessRetryMs,
        retry: this.wf.options.retry as Partial<RetryPolicy> | undefined,
        commit: (w) => committer.write({ ...w, runId: run.id, epoch: run.epoch }),
        startChild: (childId, wf, input) => this.deps.startChild(run.id, childId, wf, input),
        loadEvents: async () => (await store.loadJournal(run.id)).events,
      },
      journal,
    );
    this.ctx = ctx;
    if (this.pendingCancel !== undefined) ctx.cancel(this.pendingCancel);
    if (this.abandoned) ctx.leaseLost();
    const outcome = await ctx.start(this.wf.fn as never, decode(run.input));
    await this.release(outcome);
  }

  /** The store failed under this execution (connection lost, disk full): hand the run back
   *  so it resumes from its journal. A store problem never fails a run. */
  private async handBack(err: unknown): Promise<void> {
    this.deps.log(`run "${this.runId}": interrupted by a store error; it will resume`, err);
    if (this.abandoned) return;
    await handBackRun(this.deps.store, this.runId, this.epoch);
  }

  private async release(outcome: Outcome): Promise<void> {
    // "frontier" only happens in replay-only mode (the replay check), never here.
    if (outcome.kind === "lease-lost" || outcome.kind === "frontier" || this.abandoned) return;
    if (outcome.kind === "interrupted") {
      await this.handBack(outcome.error);
      return;
    }
    const { store, committer } = this.deps;
    // Records the context queued without awaiting (ctx.now/random/uuid) land first.
    await committer.drain();
    const run = this.claim.run;
    const base = { runId: run.id, epoch: run.epoch };
    let release: Release;
    switch (outcome.kind) {
      case "completed": {
        let output: string;
        try {
          output = encode(outcome.output, this.deps.maxPayloadBytes);
        } catch (err) {
          const e = new SerializationError(
            `Run "${run.id}" returned an output that ${(err as Error).message}; workflow outputs must be serializable and within the payload limit`,
            { cause: err },
          );
          release = this.failed(base, e);
          break;
        }
        release = {
          ...base,
          status: "completed",
          output,
          readyAt: null,
          reason: null,
          events: this.parentEvents({ output: outcome.output }),
        };
        break;
      }
      case "failed":
        release = this.failed(base, outcome.error);
        break;
      case "canceled": {
        const error: ErrorRecord = {
          name: "RunCanceledError",
          code: "RUN_CANCELED",
          message: `Run "${run.id}" was canceled: ${outcome.reason}`,
        };
        release = {
          ...base,
          status: "canceled",
          reason: outcome.reason,
          error,
          readyAt: null,
          events: this.parentEvents({ error }),
        };
        break;
      }
      case "paused":
        release = {
          ...base,
          status: "paused",
          pausedFor: "budget",
          reason: outcome.reason,
          readyAt: null,
        };
        break;
      case "suspended":
        release = {
          ...base,
          status: "waiting",
          readyAt: outcome.wakeAt,
          wakeAt: outcome.wakeAt,
          waitingFor: outcome.waitingFor,
          reason: null,
        };
        break;
    }
    const res = await store.releaseRun(release);
    if (!res.ok) this.deps.log(`run "${run.id}": lease lost before release; another worker has it`);
  }

  private failed(base: { runId: string; epoch: number }, err: Error): Release {
    const error = toErrorRecord(err);
    return {
      ...base,
      status: "failed",
      error,
      reason: `${error.name}: ${error.message}`,
      readyAt: null,
      events: this.parentEvents({
        error: { name: error.name, code: error.code, message: error.message },
      }),
    };
  }

  private parentEvents(result: { output?: unknown; error?: ErrorRecord }): NewEvent[] | undefined {
    const parentId = this.claim.run.parentId;
    if (!parentId) return undefined;
    let payload: string;
    try {
      payload = encode(result, this.deps.maxPayloadBytes);
    } catch (err) {
      payload = encode({ error: toErrorRecord(err) });
    }
    return [{ runId: parentId, name: `${CHILD_EVENT_PREFIX}${this.runId}`, payload }];
  }
}

/** Releases a claimed run to pending, ready now, fenced by `epoch`: another worker (or this
 *  one) resumes it from its journal. If even that fails, the lease runs out instead. */
export async function handBackRun(store: Store, runId: string, epoch: number): Promise<boolean> {
  try {
    const res = await store.releaseRun({
      runId,
      epoch,
      status: "pending",
      readyAt: await store.now(),
      reason: null,
    });
    return res.ok;
  } catch {
    return false;
  }
}
