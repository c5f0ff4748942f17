// What the parts of an engine share, built once by createEngine and handed to each part
// explicitly (start-run.ts, run-handle.ts, send-event.ts, run-control.ts, fork.ts,
// inspection.ts, engine-lifecycle.ts): the config, the committer, the worker it owns, the
// result() waiters, and whether it is open. No part keeps state of its own about the engine.

import { EngineClosedError, StoreError } from "../errors.js";
import { newId } from "../lib/ids.js";
import { neverThrows } from "../lib/never-throws.js";
import type { FoundChild } from "../workflow/child-identity.js";
import type { Workflow } from "../workflow/define.js";
import { cancelChildren } from "./cancel-children.js";
import { Committer } from "./committer.js";
import type { EngineConfig } from "./engine-config.js";
import { EngineOpening } from "./engine-open.js";
import { type RetentionLoop, startRetentionLoop } from "./engine-retention.js";
import type { ExecutionDeps } from "./execution.js";
import { dropLine, type WorkerEventFields, workerEventMessage } from "./logger.js";
import { RunWaiters } from "./run-waiters.js";
import { Worker, type WorkerOptions } from "./worker.js";

export interface EngineInternals {
  readonly config: EngineConfig;
  readonly workerId: string;
  readonly committer: Committer;
  /** The worker this engine owns; none with `worker: false`. */
  readonly worker: Worker | undefined;
  readonly waiters: RunWaiters;
  /** The store, its subscription and the worker: open, or being opened (a failed open is
   *  tried again, see engine-open.ts). */
  readonly opening: EngineOpening;
  readonly retention: RetentionLoop | undefined;
  /** Set by close(); from then on every verb refuses (see ready()). */
  closed: boolean;
  /** gc() calls under way: close() stops them between batches (as it does retention) and
   *  waits for the batch in flight before it closes the store. */
  readonly collections: { readonly stop: AbortController; readonly running: Set<Promise<void>> };
  /** The close() under way or done: a later close() waits for it. */
  closing?: Promise<void>;
  /** Work close() left running when it resolved (close-leftovers.ts); each one settles,
   *  never rejects, once it is done. */
  readonly lateWork: Promise<void>[];
}

/** How a new child run is created (start-run.ts), handed in to avoid an import cycle. */
export type StartChildRun = (
  internals: EngineInternals,
  parentId: string,
  childId: string,
  wf: Workflow<unknown, unknown>,
  input: unknown,
  inputDigest: string | undefined,
  inputByName?: string,
) => Promise<FoundChild | undefined>;

/** Builds the shared parts and starts opening the store (and the worker, and retention). */
export function createEngineInternals(
  config: EngineConfig,
  startChildRun: StartChildRun,
): EngineInternals {
  const workerId = newId("wrk");
  const committer = new Committer(config.store, (err) =>
    config.log("a record's write was answered, and the code waiting for it threw", err),
  );
  // The worker's children are created through the internals being built here.
  let internals: EngineInternals | undefined;
  const waiters = new RunWaiters();
  const worker = config.runsWorker
    ? createWorker(
        config,
        workerId,
        {
          ...executionDeps(config, committer, workerId),
          startChild: (parentId, childId, wf, input, inputDigest, inputByName) =>
            startChildRun(internals!, parentId, childId, wf, input, inputDigest, inputByName),
          cancelChildren: (runId, reason) =>
            cancelChildren(config.store, runId, reason, (child, why) =>
              internals?.worker?.active.get(child)?.cancel(why),
            ),
        },
        // Wakes result() with the run as the release left it (durable): no read needed.
        (runId, run) => waiters.wake(runId, run),
      )
    : undefined;
  const opening = new EngineOpening(config, worker, waiters);
  const retention = config.retention
    ? startRetentionLoop(
        {
          store: config.store,
          clock: config.clock,
          workerId,
          logger: config.logger,
          log: config.log,
          opened: opening.everOpened,
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
    opening,
    retention,
    closed: false,
    collections: { stop: new AbortController(), running: new Set() },
    lateWork: [],
  };
  return internals;
}

/** Whether the engine is open and not closed: a verb on the per-run path (start, result)
 *  then goes on without awaiting ready(), a hop through the promise hooks of every run. */
export function openNow(internals: EngineInternals): boolean {
  return !internals.closed && internals.opening.isOpen();
}

/** Refuses once the engine is closed; otherwise resolves once it is open. Every verb of the
 *  engine starts with it. */
export async function ready(internals: EngineInternals): Promise<void> {
  if (internals.closed) {
    throw new EngineClosedError(
      "This engine is closed: close() was called, so it serves no more calls. Create a new engine with createEngine() to go on; runs are not affected, they live in the store.",
    );
  }
  await internals.opening.whenOpen();
}

/** The error of a call that close() overtook: the store's "not open: call open() first",
 *  which no user of an engine calls, becomes an EngineClosedError (the store's error its
 *  cause); any other error is returned as it is. */
export function closedUnder(internals: EngineInternals, call: string, err: unknown): unknown {
  if (!internals.closed || !(err instanceof StoreError)) return err;
  return new EngineClosedError(
    `${call}: the engine was closed while this call was under way, and its store with it (${err.message}). What the call did before that is in the store: read it with a new engine (createEngine()).`,
    { cause: err },
  );
}

/** A run has something new to read (an event, an approval's answer): the execution of it in
 *  this process looks now; otherwise a claim round may pick it up. */
export function runHasNews(internals: EngineInternals, runId: string): void {
  const local = internals.worker?.active.get(runId);
  if (local) local.refreshEvents();
  else internals.worker?.requestClaimRound();
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
    leaseMs: config.leaseMs,
    workspaceRoot: config.workspaceRoot,
    lifecycle: lifecycleReporter(config, workerId),
    log: config.log,
  };
}

/** The worker's lifecycle events as info lines of the logger. */
function lifecycleReporter(config: EngineConfig, workerId: string): ExecutionDeps["lifecycle"] {
  if (config.logger.info === dropLine) return () => {};
  // A logger that throws must not stop the worker between a claim and its execution.
  return neverThrows((event) => {
    const fields: WorkerEventFields = { ...event, workerId };
    config.logger.info(fields, workerEventMessage(fields));
  });
}
