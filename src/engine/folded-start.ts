// A run that this engine's own worker executes as it starts it (start-run.ts), on a store
// that can create a run and release it in one transaction (Store.createReleasedRun, SQLite):
// its create is asked as before, and its execution begins while the create waits for the
// turn's commit. The store asks, as it writes the create, whether the execution has ended
// by then: a workflow function that ended before it needed any record (a run with no call)
// has its release written in the create's transaction, one commit instead of two.
// Otherwise the run is created claimed, and the execution's first call that needs a record
// (a step, an effect, a child, a wait, ctx.now()'s record: Context.beforeExecute and every
// write) waits until the create is durable, so nothing begins before the run exists. Only
// the workflow function's own code runs before the create commits, as it runs again on every
// replay; if the create fails, nothing of the execution is written and start() fails.

import type { ClaimedRun, NewRun, RunEnd, RunRecord, Store } from "../store/store.js";

/** A create's answer (Store.createRun). */
export type Made = { run: RunRecord; created: boolean };

/** What an execution begun before its run's create committed asks of that create. */
export interface PendingCreate {
  /** Settles once the create is answered: the claim the execution then holds, or undefined
   *  when it holds nothing (the create failed, or found the id taken): then nothing of the
   *  execution may be written. */
  durable(): Promise<ClaimedRun | undefined>;
  /** The execution ended with `end` before the store wrote the create: both go in one
   *  transaction, answered here (rejects as the create does). Undefined once the store
   *  wrote it without: release the run as usual, once durable() says it is held. */
  fold(end: RunEnd): Promise<Made> | undefined;
}

/** Called once a create is answered, before the execution hears of it: the worker tracks the
 *  run it holds (returns the claim) or frees the slot (undefined). */
export type OnAnswer = (made: Made | undefined, folded: boolean) => ClaimedRun | undefined;

export class FoldedStart implements PendingCreate {
  /** The release the execution ended with before the store decided (fold). */
  #end: RunEnd | undefined;
  /** The store has asked for the release (decide): from then on the run's create is what
   *  it is, and the execution waits for it. */
  #decided = false;
  #held: Promise<ClaimedRun | undefined> | undefined;
  /** The create's answer: what start() waits for. */
  readonly answer: Promise<Made>;

  constructor(
    run: NewRun & { claimBy: NonNullable<NewRun["claimBy"]> },
    create: NonNullable<Store["createReleasedRun"]>,
    private readonly onAnswer: OnAnswer,
  ) {
    // Asked now, as a plain create would be: the store decides, as it writes (on SQLite at
    // the turn's group commit), whether the release goes with it. A throw is its answer.
    let answer: Promise<Made>;
    try {
      answer = Promise.resolve(create(run, () => this.#decide()));
    } catch (err) {
      answer = Promise.reject(err);
    }
    this.answer = answer;
  }

  #decide(): RunEnd | undefined {
    this.#decided = true;
    return this.#end;
  }

  durable(): Promise<ClaimedRun | undefined> {
    this.#held ??= this.answer.then(
      (made) => this.onAnswer(made, false),
      () => this.onAnswer(undefined, false),
    );
    return this.#held;
  }

  fold(end: RunEnd): Promise<Made> | undefined {
    // Once durable() was asked (a create that failed before the store asked: start() freed
    // the slot through it), the answer has been handed over: a second onAnswer freed the
    // worker's slot twice, which then ran above its concurrency.
    if (this.#decided || this.#held !== undefined) return undefined;
    this.#end = end;
    return this.answer.then(
      (made) => {
        this.onAnswer(made, true);
        return made;
      },
      (err: unknown) => {
        this.onAnswer(undefined, true);
        throw err;
      },
    );
  }

  /** Whether the execution's release was handed to the create (fold). */
  get folded(): boolean {
    return this.#end !== undefined;
  }
}

/** The run as a create claimed by this worker will leave it (status running, leased to
 *  it), for the execution begun before the create commits: its epoch and lease are not known
 *  yet, and nothing uses them before durable() hands over the claim the store made. */
export function claimToBe(
  run: NewRun & { claimBy: NonNullable<NewRun["claimBy"]> },
  now: number,
): ClaimedRun {
  return {
    recovered: false,
    run: {
      id: run.id,
      workflow: run.workflow,
      version: run.version,
      status: "running",
      reason: null,
      pausedFor: null,
      input: run.input,
      output: null,
      error: null,
      budgetLimit: run.budgetLimit,
      budgetSpent: {},
      parentId: run.parentId ?? null,
      readyAt: now + run.claimBy.leaseMs,
      wakeAt: null,
      waitingFor: [],
      leaseOwner: run.claimBy.workerId,
      leaseUntil: now + run.claimBy.leaseMs,
      // Not known before the create: no write is fenced by it (see above).
      epoch: 0,
      generation: 0,
      cancelRequested: false,
      failedCalls: [],
      traceContext: run.traceContext ?? null,
      handedInputDigest: run.handedInputDigest ?? null,
      createdAt: now,
      updatedAt: now,
    },
  };
}
