// What the parts of an engine share, built once by createEngine and handed to each part
// explicitly (start-run.ts, run-handle.ts, send-event.ts, run-control.ts, fork.ts,
// inspection.ts, engine-lifecycle.ts): the config, the committer, the worker it owns, the
// result() waiters, and whether it is open. No part keeps state of its own about the engine.

import { EngineClosedError } from "../errors.js";
import { newId } from "../lib/ids.js";
import { neverThrows } from "../lib/never-throws.js";
import type { Workflow } from "../workflow/define.js";
import { Committer } from "./committer.js";
import type { EngineConfig } from "./engine-config.js";
import { type RetentionLoop, startRetentionLoop } from "./engine-retention.js";
import type { ExecutionDeps } from "./execution.js";
import { type WorkerEventFields, workerEventMessage } from "./logger.js";
import { RunWaiters } from "./run-waiters.js";
import { Worker, type WorkerOptions } from "./worker.js";

export interface EngineInternals {
  readonly config: EngineConfig;
  readonly workerId: string;
  readonly committer: Committer;
  /** The worker this engine owns; none with `worker: false`. */
  readonly worker: Worker | undefined;
  readonly waiters: RunWaiters;
  /** The store is open, subscribed to, and the worker started; rejects if opening failed. */
  readonly opened: Promise<void>;
  readonly retention: RetentionLoop | undefined;
  /** Ends the store subscription that wakes result() calls (if it was made). */
  readonly unsubscribe: () => void;
  /** The store's open() succeeded (even if what came after it, the worker's start, failed):
   *  close() must close it. */
  readonly storeOpened: () => boolean;
  /** Set by close(); from then on every verb refuses (see ready()). */
  closed: boolean;
  /** The close() under way or done: a later close() waits for it. */
  closing?: Promise<void>;
}

/** How a new child run is created (start-run.ts), handed in to avoid an import cycle. */
export type StartChildRun = (
  internals: EngineInternals,
  parentId: string,
  childId: string,
  wf: Workflow<unknown, unknown>,
  input: unknown,
) => Promise<void>;

/** Builds the shared parts and starts opening the store (and the worker, and retention). */
export function createEngineInternals(
  config: EngineConfig,
  startChildRun: StartChildRun,
): EngineInternals {
  const workerId = newId("wrk");
  const committer = new Committer(config.store);
  // The worker's children are created through the internals being built here.
  let internals: EngineInternals | undefined;
  const waiters = new RunWaiters();
  const worker = config.runsWorker
    ? createWorker(
        config,
        workerId,
        {
          ...executionDeps(config, committer, workerId),
          startChild: (parentId, childId, wf, input) =>
            startChildRun(internals!, parentId, childId, wf, input),
        },
        // Wakes result() with the run as the release left it (durable): no read needed.
        (runId, run) => waiters.wake(runId, run),
      )
    : undefined;
  const { opened, unsubscribe, storeOpened } = open(config, worker, waiters);
  const retention = config.retention
    ? startRetentionLoop(
        {
          store: config.store,
          clock: config.clock,
          workerId,
          logger: config.logger,
          log: config.log,
          opened,
        },
        config.retention,
      )
    : undefined;
  internals = {
    config,
    workerId,
    committer,
    worker,
    waiters,
    opened,
    retention,
    unsubscribe,
    storeOpened,
    closed: false,
  };
  return internals;
}

/** Refuses once the engine is closed; otherwise resolves once it is open. Every verb of the
 *  engine starts with it. */
export async function ready(internals: EngineInternals): Promise<void> {
  if (internals.closed) {
    throw new EngineClosedError(
      "This engine is closed: close() was called, so it serves no more calls. Create a new engine with createEngine() to go on; runs are not affected, they live in the store.",
    );
  }
  await internals.opened;
}

/** A run has something new to read (an event, an approval's answer): the execution of it in
 *  this process looks now; otherwise a claim round may pick it up. */
export function runHasNews(internals: EngineInternals, runId: string): void {
  const local = internals.worker?.active.get(runId);
  if (local) local.refreshEvents();
  else internals.worker?.requestClaimRound();
}

/** Opens the store, wakes result() calls when it says a run finished, starts the worker. */
function open(
  config: EngineConfig,
  worker: Worker | undefined,
  waiters: RunWaiters,
): { opened: Promise<void>; unsubscribe: () => void; storeOpened: () => boolean } {
  let unsubscribe: (() => void) | undefined;
  let storeOpened = false;
  const opened = (async () => {
    await config.store.open({ clock: config.clock });
    storeOpened = true;
    unsubscribe = config.store.subscribe((hint) => {
      // A run executing here wakes its waiters when its execution ends (worker `ended`).
      if (hint.kind === "finished" && hint.runId && !worker?.active.has(hint.runId)) {
        waiters.wake(hint.runId);
      }
    });
    await worker?.start();
  })();
  // Surface open errors on first use, not as an unhandled rejection.
  opened.catch(() => {});
  return { opened, unsubscribe: () => unsubscribe?.(), storeOpened: () => storeOpened };
}

function createWorker(
  config: EngineConfig,
  workerId: string,
  execution: ExecutionDeps,
  ended: WorkerOptions["ended"],
): Worker {
  return new Worker({
    id: workerId,
    store: config.store,
    clock: config.clock,
    workflows: config.workflows,
    concurrency: config.concurrency,
    leaseMs: config.leaseMs,
    heartbeatMs: config.heartbeatMs,
    pollIntervalMs: config.pollIntervalMs,
    execution,
    ended,
  });
}

function executionDeps(
  config: EngineConfig,
  committer: Committer,
  workerId: string,
): Omit<ExecutionDeps, "startChild"> {
  return {
    store: config.store,
    committer,
    clock: config.clock,
    maxPayloadBytes: config.maxPayloadBytes,
    maxStepsPerRun: config.limits.maxStepsPerRun,
    inProcessRetryMs: config.inProcessRetryMs,
    abortGraceMs: config.abortGraceMs,
    replayStallMs: config.replayStallMs,
    workspaceRoot: config.workspaceRoot,
    lifecycle: lifecycleReporter(config, workerId),
    log: config.log,
  };
}

/** The worker's lifecycle events as info lines of the logger. */
function lifecycleReporter(config: EngineConfig, workerId: string): ExecutionDeps["lifecycle"] {
  // A logger that throws must not stop the worker between a claim and its execution.
  return neverThrows((event) => {
    const fields: WorkerEventFields = { ...event, workerId };
    config.logger.info(fields, workerEventMessage(fields));
  });
}
