// Group commit. Every record must be durable before its run moves on, so one commit per
// step is the floor for a single run; concurrent runs share commits. Writes that become
// ready in the same turn of the event loop are flushed together in one appendRecords
// call (one transaction); one batch is in flight at a time and the next one gathers
// everything that arrived meanwhile.

import { LeaseLostError, SerializationError, WriteConflictError } from "../errors.js";
import type { RunWrite, Store } from "../store/store.js";

interface Pending {
  write: RunWrite;
  resolve: () => void;
  reject: (err: Error) => void;
}

export class Committer {
  private queue: Pending[] = [];
  /** The batch being written (flushing). */
  private batch: Pending[] = [];
  private flushing: Promise<void> | undefined;
  private scheduled = false;
  /** Count of flushes and of writes, for metrics and benchmarks. */
  readonly stats = { batches: 0, writes: 0 };
  /** Turns of the event loop in which this Committer's scheduled flush ran: an execution
   *  that saw one since it began has let the loop turn (execution.ts, before its release). */
  turns = 0;

  /** `report` hears a writeThen callback's throw (the engine's `log`, as it hears its other
   *  unexpected errors); without one, console.error. It never reaches the batch's settling,
   *  nor the process as an uncaught exception. */
  constructor(
    private readonly store: Store,
    private readonly report: (err: unknown) => void = reportToConsole,
  ) {}

  /** Resolves when `write` is durable; rejects with LeaseLostError, WriteConflictError, or
   *  SerializationError (the store cannot hold one of its records). */
  write(write: RunWrite): Promise<void> {
    return new Promise<void>((resolve, reject) => this.writeThen(write, resolve, reject));
  }

  /** write, answered by callbacks: `written` once durable, `failed` with what write's
   *  promise would reject with. Both are called from the settling of the batch, in the
   *  order of its writes. */
  writeThen(write: RunWrite, written: () => void, failed: (err: Error) => void): void {
    this.queue.push({ write, resolve: written, reject: failed });
    this.schedule();
  }

  /** Whether a write of run `runId` is queued or being written (close() waits for it). */
  writing(runId: string): boolean {
    const of = (p: Pending) => p.write.runId === runId;
    return this.queue.some(of) || this.batch.some(of);
  }

  /** Resolves once everything queued so far is flushed (successfully or not). */
  async drain(): Promise<void> {
    while (this.queue.length > 0 || this.flushing !== undefined) {
      if (this.flushing !== undefined) await this.flushing;
      else await this.flushNow();
    }
  }

  private schedule(): void {
    if (this.scheduled || this.flushing !== undefined) return;
    this.scheduled = true;
    // setImmediate: let every run whose promise resolved in this turn enqueue its write.
    setImmediate(this.scheduledFlush);
  }

  /** The scheduled flush, made once (a run executing alone schedules one every step). */
  private readonly scheduledFlush = (): void => {
    this.turns++;
    this.scheduled = false;
    void this.flushNow();
  };

  private flushNow(): Promise<void> {
    if (this.flushing !== undefined || this.queue.length === 0) {
      return this.flushing ?? Promise.resolve();
    }
    const batch = this.queue;
    this.queue = [];
    this.batch = batch;
    this.stats.batches++;
    this.stats.writes += batch.length;
    const writes: RunWrite[] = new Array(batch.length);
    for (let i = 0; i < batch.length; i++) writes[i] = batch[i]!.write;
    let written: ReturnType<Store["appendRecords"]>;
    try {
      written = this.store.appendRecords(writes);
    } catch (err) {
      written = Promise.reject(err);
    }
    // One reaction settles the batch and ends the flush: an async function with a finally
    // made five promises a batch, one batch a step for a run on its own. Its two callbacks
    // are made once: the batch they settle is `this.batch` (one batch is written at a time).
    this.flushing = written.then(this.batchWritten, this.batchFailed);
    return this.flushing;
  }

  private readonly batchWritten = (outcomes: Awaited<ReturnType<Store["appendRecords"]>>): void => {
    this.flushed(false, outcomes, undefined);
  };

  private readonly batchFailed = (err: unknown): void => {
    this.flushed(true, undefined, err as Error);
  };

  /** Settles each write of the batch just flushed (`this.batch`), by its outcome, or with
   *  `failure` when the store's whole call `failed`; then the next batch may begin. */
  private flushed(
    failed: boolean,
    outcomes: Awaited<ReturnType<Store["appendRecords"]>> | undefined,
    failure: Error | undefined,
  ): void {
    const batch = this.batch;
    try {
      // A writeThen callback that throws must not keep the rest of the batch unanswered.
      for (let i = 0; i < batch.length; i++) {
        try {
          if (failed) batch[i]!.reject(failure!);
          else this.settle(batch[i]!, outcomes![i]);
        } catch (err) {
          this.reported(err);
        }
      }
    } finally {
      this.flushing = undefined;
      this.batch = [];
      if (this.queue.length > 0) this.schedule();
    }
  }

  /** A callback's throw, reported; a report that throws too is dropped (it would end the
   *  process, as a callback's throw did when it was thrown again in a microtask). */
  private reported(err: unknown): void {
    try {
      this.report(err);
    } catch {}
  }

  private settle(p: Pending, o: Awaited<ReturnType<Store["appendRecords"]>>[number] | undefined) {
    if (!o || o.ok) p.resolve();
    else if (o.reason === "lease-lost") {
      p.reject(leaseTakenOver(p.write.runId, p.write.epoch));
    } else if (o.reason === "unstorable") {
      // Only this write failed; the rest of its batch landed.
      p.reject(
        new SerializationError(
          `Run "${p.write.runId}": the record ${JSON.stringify(o.key)} cannot be stored (${o.message}); nothing of this write was recorded. Values pass through the codec; check names, keys and spend names for NUL characters or broken UTF-16.`,
        ),
      );
    } else p.reject(new WriteConflictError(p.write.runId, o.key));
  }
}

/** What a write fenced by `epoch` meets once another worker has claimed the run. */
export function leaseTakenOver(runId: string, epoch: number): LeaseLostError {
  return new LeaseLostError(
    `Run "${runId}": this worker's lease (epoch ${epoch}) was taken over; it stops executing the run`,
  );
}

function reportToConsole(err: unknown): void {
  console.error("cairn: a Committer.writeThen callback threw (ignored):", err);
}
