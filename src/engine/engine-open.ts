// Opening an engine: the store, the subscription that wakes result() calls, and the worker.
// An open that fails (the database is not up yet, the network is down) is not kept: the
// next call of the engine tries again, and an engine that runs a worker tries again on its
// own after a backoff (1 s, doubling up to 30 s), logging each failure as it does. So a process started
// before its database (a container that comes up first) starts working once the database
// does, without a restart, as the clients of Temporal, Restate or DBOS do.

import type { EngineConfig } from "./engine-config.js";
import type { RunWaiters } from "./run-waiters.js";
import type { Worker } from "./worker.js";

const FIRST_RETRY_MS = 1_000;
const LONGEST_RETRY_MS = 30_000;

export class EngineOpening {
  /** The attempt under way, or the last one. */
  #attempt: Promise<void>;
  #lastFailed = false;
  #storeOpen = false;
  #workerStarted = false;
  #open = false;
  #unsubscribe: (() => void) | undefined;
  #failures = 0;
  #retryTimer: NodeJS.Timeout | undefined;
  #stopped = false;
  #markOpened!: () => void;
  /** Resolves when an attempt succeeds; never rejects. */
  readonly everOpened = new Promise<void>((resolve) => {
    this.#markOpened = resolve;
  });

  constructor(
    private readonly config: EngineConfig,
    private readonly worker: Worker | undefined,
    private readonly waiters: RunWaiters,
  ) {
    this.#attempt = this.#tryOpen();
  }

  /** Resolves once the engine is open. After a failed attempt, starts a new one (unless
   *  close() was called) and settles with it: its error is what the caller sees. */
  whenOpen(): Promise<void> {
    if (this.#lastFailed && !this.#stopped) this.#retryNow();
    return this.#attempt;
  }

  /** Store, subscription and worker all started. */
  isOpen(): boolean {
    return this.#open;
  }

  /** The store's open() succeeded (even if what came after it, the worker's start, failed):
   *  close() must close it. */
  storeOpened(): boolean {
    return this.#storeOpen;
  }

  /** Ends the store subscription that wakes result() calls (if it was made). */
  unsubscribe(): void {
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
  }

  /** For close(): no attempt starts from now on; settles when the one under way has. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#retryTimer !== undefined) clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    await this.#attempt.catch(() => {});
  }

  #retryNow(): void {
    if (this.#retryTimer !== undefined) clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    this.#attempt = this.#tryOpen();
  }

  #tryOpen(): Promise<void> {
    this.#lastFailed = false;
    const attempt = this.#openWhatIsNotOpen();
    attempt.then(
      () => {
        this.#failures = 0;
        this.#open = true;
        this.#markOpened();
      },
      (err) => {
        // The attempt failed: a later whenOpen() starts another. Its callers saw the error.
        if (this.#attempt === attempt) this.#lastFailed = true;
        this.#failures++;
        if (this.worker !== undefined && !this.#stopped) this.#retryLater(err);
      },
    );
    return attempt;
  }

  /** A worker has no caller to try again for it: it does so itself. The failure is logged
   *  when the next attempt starts, so an engine closed at once (the CLI, which reports the
   *  error itself and exits) does not announce an attempt it will never make. */
  #retryLater(err: unknown): void {
    const failures = this.#failures;
    const waitMs = Math.min(FIRST_RETRY_MS * 2 ** (failures - 1), LONGEST_RETRY_MS);
    if (this.#retryTimer !== undefined) clearTimeout(this.#retryTimer);
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      if (this.#stopped || !this.#lastFailed) return;
      this.config.log(
        `cannot open the store (${failures} ${failures === 1 ? "attempt" : "attempts"} failed; the last ${waitMs / 1000} s ago); this engine's worker tries again now`,
        err,
      );
      this.#retryNow();
    }, waitMs);
  }

  /** What a failed attempt left undone, in order; what succeeded is not done twice (the
   *  store's open() counts its opens, so a second would need a second close()). */
  async #openWhatIsNotOpen(): Promise<void> {
    const { config, worker, waiters } = this;
    if (!this.#storeOpen) {
      await config.store.open({ clock: config.clock });
      this.#storeOpen = true;
      this.#unsubscribe = config.store.subscribe((hint) => {
        // A run executing here wakes its waiters when its execution ends (worker `ended`).
        if (hint.kind === "finished" && hint.runId && !worker?.active.has(hint.runId)) {
          waiters.wake(hint.runId);
        }
      });
    }
    if (worker !== undefined && !this.#workerStarted) {
      await worker.start();
      this.#workerStarted = true;
    }
  }
}
