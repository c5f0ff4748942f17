// A run that this engine's own worker executes as it starts it (start-run.ts), on a store
// that can create a run and release it in one transaction (Store.createReleasedRun, SQLite):
// its execution begins while the create waits for the turn's commit. A workflow function that
// ends before it needs any record (a run with no call) has its release go into the create's
// transaction: one commit instead of two. Otherwise its first call that needs a record (a
// step, an effect, a child, a wait, ctx.now()'s record: Context.beforeExecute and every write)
// asks for the create and waits until it is durable, so nothing begins before the run exists;
// a function still running when the turn ends (awaiting I/O of its own) gets the create asked
// then. Only the workflow function's own code runs before the create commits, as it runs again
// on every replay; if the create fails, nothing of the execution is written and start() fails.

import { setImmediate } from "node:timers";
import type { ClaimedRun, NewRun, RunEnd, RunRecord, Store } from "../store/store.js";

/** A create's answer (Store.createRun). */
export type Made = { run: RunRecord; created: boolean };

/** What an execution begun before its run's create committed asks of that create. */
export interface PendingCreate {
  /** Asks for the create now (if not yet asked) and settles once it is answered: the claim
   *  the execution then holds, or undefined when it holds nothing (the create failed, or
   *  found the id taken): then nothing of the execution may be written. */
  durable(): Promise<ClaimedRun | undefined>;
  /** The execution ended with `end` before the create was asked: both go in one
   *  transaction, answered here (rejects as the create does). Undefined once the create was
   *  asked: release the run as usual, once durable() says it is held. */
  fold(end: RunEnd): Promise<Made> | undefined;
}

/** Called once a create is answered, before the execution hears of it: the worker tracks the
 *  run it holds (returns the claim) or frees the slot (undefined). */
export type OnAnswer = (made: Made | undefined, folded: boolean) => ClaimedRun | undefined;

export class FoldedStart implements PendingCreate {
  #asked: Promise<Made> | undefined;
  #folded = false;
  #resolveAsked!: (p: Promise<Made>) => void;
  /** The create's answer, whoever asked for it: what start() waits for. */
  readonly answer: Promise<Made>;
  #held: Promise<ClaimedRun | undefined> | undefined;

  constructor(
    private readonly store: Store,
    private readonly run: NewRun & { claimBy: NonNullable<NewRun["claimBy"]> },
    private readonly onAnswer: OnAnswer,
  ) {
    const asked = new Promise<Promise<Made>>((resolve) => {
      this.#resolveAsked = resolve;
    });
    this.answer = asked.then((p) => p);
    // A function still running at the end of this turn (awaiting I/O of its own) is not
    // waited for: its run is created now, and start() resolves as it would have.
    setImmediate(() => this.#ask(undefined));
  }

  durable(): Promise<ClaimedRun | undefined> {
    this.#ask(undefined);
    this.#held ??= this.answer.then(
      (made) => this.onAnswer(made, false),
      () => this.onAnswer(undefined, false),
    );
    return this.#held;
  }

  fold(end: RunEnd): Promise<Made> | undefined {
    if (this.#asked !== undefined) return undefined;
    this.#folded = true;
    this.#ask(end);
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

  /** Whether the create was asked with the execution's release in it. */
  get folded(): boolean {
    return this.#folded;
  }

  #ask(end: RunEnd | undefined): void {
    if (this.#asked !== undefined) return;
    const { store, run } = this;
    // Called from a timer or the execution: a throw (a refused argument) is the create's
    // answer, not an exception here.
    const asked = (async () =>
      end !== undefined && store.createReleasedRun
        ? store.createReleasedRun(run, end)
        : store.createRun(run))();
    this.#asked = asked;
    this.#resolveAsked(asked);
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
