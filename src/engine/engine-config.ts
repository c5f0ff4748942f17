// createEngine()'s options, checked and with their defaults filled in, once: every other
// part of the engine reads this config and never the raw options. A bad option throws here,
// before anything is opened or started.

import { DEFAULT_MAX_PAYLOAD_BYTES } from "../codec/codec.js";
import { LimitError } from "../errors.js";
import { type Clock, realClock } from "../lib/clock.js";
import { toMs } from "../lib/duration.js";
import { neverThrows } from "../lib/never-throws.js";
import { unknownOptionNames, unknownOptionsText } from "../lib/option-names.js";
import { sqliteStore } from "../store/sqlite/sqlite-store.js";
import type { Store } from "../store/store.js";
import type { Workflow } from "../workflow/define.js";
import { type ApprovalKey, checkApprovalKeys } from "./approval-tokens.js";
import type { EngineOptions } from "./engine.js";
import { type Limits, resolveLimits } from "./limits.js";
import { consoleLogger, type Logger } from "./logger.js";
import { checkBatchSize } from "./retention.js";
import { checkEngineOptions } from "./validate.js";

/** The `retention` option in milliseconds; only for an engine that runs a worker. */
export interface RetentionSchedule {
  olderThanMs: number;
  everyMs: number;
  batchSize?: number;
}

/** createEngine()'s options with those that are internal: cairn's own tests pass these, and
 *  they are in no public type (EngineOptions) nor in docs/API.md. */
export interface InternalEngineOptions extends EngineOptions {
  /** The least time close() waits for the store's own close() (default STORE_CLOSE_MIN_MS,
   *  10 s; the grace when longer). A test of a store whose close() never answers passes less,
   *  so that it waits that bound out in less than 10 s. */
  storeCloseMinMs?: number;
}

/** The options createEngine() takes (EngineOptions, every one: checked below), in docs/API.md's
 *  order; a name not among them (`leaseMS`, `workflow`) was dropped silently, the engine
 *  running without what was meant. */
const ENGINE_OPTIONS = [
  "store",
  "workflows",
  "worker",
  "concurrency",
  "leaseMs",
  "heartbeatMs",
  "pollIntervalMs",
  "clock",
  "closeGraceMs",
  "maxPayloadBytes",
  "inProcessRetryMs",
  "abortGraceMs",
  "replayStallMs",
  "log",
  "logger",
  "workspaceRoot",
  "approvalKeys",
  "limits",
  "retention",
] as const satisfies readonly (keyof EngineOptions)[];
/** InternalEngineOptions' own: taken, but not named in the error (they are in no public type). */
const INTERNAL_ENGINE_OPTIONS: readonly (keyof InternalEngineOptions)[] = ["storeCloseMinMs"];
const TAKEN_ENGINE_OPTIONS: readonly string[] = [...ENGINE_OPTIONS, ...INTERNAL_ENGINE_OPTIONS];
// An option added to EngineOptions but not to ENGINE_OPTIONS fails to compile here.
const EVERY_ENGINE_OPTION: Exclude<
  keyof EngineOptions,
  (typeof ENGINE_OPTIONS)[number]
> extends never
  ? true
  : never = true;
void EVERY_ENGINE_OPTION;

/** How long close() waits for the store's own close() at least: longer than the other
 *  stages, as it has bounds of its own (PostgreSQL's: 2 s for verbs under way, then 2 s for
 *  the pool's goodbyes, in a partition) that should end it first. */
export const STORE_CLOSE_MIN_MS = 10_000;

export interface EngineConfig {
  store: Store;
  clock: Clock;
  /** The registered workflows by "name@version". */
  workflows: Map<string, Workflow<unknown, unknown>>;
  limits: Limits;
  /** false with `worker: false`: a client that never executes runs. */
  runsWorker: boolean;
  concurrency: number;
  leaseMs: number;
  heartbeatMs: number;
  pollIntervalMs: number;
  closeGraceMs: number;
  /** InternalEngineOptions.storeCloseMinMs, STORE_CLOSE_MIN_MS by default. */
  storeCloseMinMs: number;
  maxPayloadBytes: number;
  inProcessRetryMs: number;
  abortGraceMs: number;
  replayStallMs: number;
  workspaceRoot: string;
  approvalKeys: ApprovalKey[];
  retention: RetentionSchedule | undefined;
  logger: Logger;
  /** Internal problems (never payloads). */
  log: (message: string, err?: unknown) => void;
}

/** Checks `options` and fills in the defaults; throws a TypeError or LimitError naming the
 *  option otherwise. */
export function resolveEngineConfig(options: InternalEngineOptions): EngineConfig {
  const unknown = unknownOptionNames(options, TAKEN_ENGINE_OPTIONS);
  if (unknown.length > 0) {
    throw new TypeError(`createEngine(): ${unknownOptionsText(unknown, ENGINE_OPTIONS)}`);
  }
  checkEngineOptions(options);
  const { storeCloseMinMs = STORE_CLOSE_MIN_MS } = options;
  if (typeof storeCloseMinMs !== "number" || !(storeCloseMinMs >= 0)) {
    throw new TypeError(
      `createEngine(): storeCloseMinMs (internal) must be a number >= 0 (got ${String(storeCloseMinMs)})`,
    );
  }
  const limits = resolveLimits(options.limits);
  checkWorkflowCount(options.workflows ?? [], limits);
  const runsWorker = options.worker !== false;
  const retention = runsWorker ? retentionSchedule(options.retention) : undefined;
  const store = options.store ?? sqliteStore();
  // A worker's hand-backs of runs taken from crashed workers need it, and swallow its
  // failure (a store error): on a store written for an earlier cairn those runs stayed
  // leased to this worker, which never claims its own runs, for as long as it lived.
  if (runsWorker && typeof (store as Partial<Store>).expireLease !== "function") {
    throw new TypeError(
      "createEngine(): the store has no expireLease({ runId, epoch }) (a Store written for an earlier cairn): a worker needs it to hand back runs taken over from crashed workers; implement it (see Store.expireLease and describeStoreContract), or pass worker: false",
    );
  }
  const workflows = workflowsById(options.workflows ?? []);
  checkApprovalKeys(options.approvalKeys ?? []);
  const leaseMs = options.leaseMs ?? 30_000;
  const logger = options.logger ?? consoleLogger();
  const config: EngineConfig = {
    store,
    clock: options.clock ?? realClock,
    workflows,
    limits,
    runsWorker,
    concurrency: options.concurrency ?? 16,
    leaseMs,
    heartbeatMs: options.heartbeatMs ?? Math.max(10, Math.floor(leaseMs / 3)),
    pollIntervalMs: options.pollIntervalMs ?? 250,
    closeGraceMs: options.closeGraceMs ?? 10_000,
    storeCloseMinMs,
    maxPayloadBytes: options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES,
    inProcessRetryMs: options.inProcessRetryMs ?? 5_000,
    abortGraceMs: options.abortGraceMs ?? 1_000,
    replayStallMs: options.replayStallMs ?? 60_000,
    workspaceRoot: options.workspaceRoot ?? ".cairn/workspaces",
    approvalKeys: [...(options.approvalKeys ?? [])],
    retention,
    logger,
    // A log that throws must not turn a handled problem into an unhandled rejection.
    log: neverThrows(
      options.log ??
        ((message: string, err?: unknown) =>
          logger.warn(err === undefined ? {} : { err }, message)),
    ),
  };
  if (runsWorker && config.heartbeatMs >= leaseMs) {
    // Not refused: tests (cairn's own too) stop renewals this way to play a stuck worker.
    config.log(
      `createEngine(): heartbeatMs (${config.heartbeatMs}) is not below leaseMs (${leaseMs}): this worker's leases expire between renewals, and another worker may take its runs while it executes them; use a heartbeatMs of at most leaseMs / 2 (the default is leaseMs / 3)`,
    );
  }
  return config;
}

function checkWorkflowCount(workflows: readonly unknown[], limits: Limits): void {
  if (workflows.length > limits.maxWorkflows) {
    throw new LimitError(
      `createEngine(): ${workflows.length} workflows given, over the limit (limits.maxWorkflows: ${limits.maxWorkflows}); split them across workers or raise the limit`,
      { limit: "maxWorkflows", max: limits.maxWorkflows },
    );
  }
}

function retentionSchedule(retention: EngineOptions["retention"]): RetentionSchedule | undefined {
  if (!retention) return undefined;
  const everyMs = toMs(retention.every ?? "1h", "createEngine(): retention.every");
  // An `every` of 0 collected again as soon as a collection ended: the store read in a loop
  // for as long as the worker ran.
  if (everyMs <= 0) {
    throw new TypeError(
      `createEngine(): retention.every must be longer than 0 (got ${JSON.stringify(retention.every)}); it is how often finished runs are collected`,
    );
  }
  // Checked here, as the other options are: a batchSize out of range was accepted, then
  // every collection failed with a TypeError the log reported, and nothing was deleted.
  const { batchSize } = retention;
  if (batchSize !== undefined) checkBatchSize(batchSize, "createEngine(): retention.batchSize");
  return {
    olderThanMs: toMs(retention.finishedOlderThan, "createEngine(): retention.finishedOlderThan"),
    everyMs,
    ...(batchSize !== undefined && { batchSize }),
  };
}

function workflowsById(
  given: NonNullable<EngineOptions["workflows"]>,
): Map<string, Workflow<unknown, unknown>> {
  const workflows = new Map<string, Workflow<unknown, unknown>>();
  for (const wf of given) {
    if (workflows.has(wf.id)) {
      throw new TypeError(`createEngine(): workflow "${wf.id}" is registered twice`);
    }
    workflows.set(wf.id, wf as unknown as Workflow<unknown, unknown>);
  }
  return workflows;
}
