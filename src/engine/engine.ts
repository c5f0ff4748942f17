// The user's handle: registers workflows, starts, signals, cancels, resumes, forks and
// inspects runs, and owns a worker unless `worker: false`. All persistence goes through
// the Store; all time through the Clock. This file holds the Engine's types and composes
// it; each verb lives in a module of its own (docs/ARCHITECTURE.md, "src/engine/").

import { EngineClosedError } from "../errors.js";
import type { Clock } from "../lib/clock.js";
import type { Duration } from "../lib/duration.js";
import { DEFAULT_CANCEL_REASON } from "../store/cancel-texts.js";
import { encrypts } from "../store/encrypted-store.js";
import type { Amounts, RunFilter, Store, StreamChunk } from "../store/store.js";
import type { AnyWorkflow, Workflow } from "../workflow/define.js";
import type { ApprovalKey } from "./approval-tokens.js";
import { type ApprovalsApi, createApprovalsApi } from "./approvals.js";
import { trackCloseLeftovers } from "./close-leftovers.js";
import { resolveEngineConfig } from "./engine-config.js";
import { trackHeartbeat } from "./engine-heartbeat.js";
import {
  closedUnder,
  createEngineInternals,
  type EngineInternals,
  ready,
  runHasNews,
} from "./engine-internals.js";
import { closeEngine, engineMetrics } from "./engine-lifecycle.js";
import { collectOnRequest } from "./engine-retention.js";
import { forkRun } from "./fork.js";
import { inspectionVerbs } from "./inspection.js";
import type { Limits } from "./limits.js";
import type { Logger } from "./logger.js";
import type { CollectResult as GcResult } from "./retention.js";
import { cancelRun, resumeRun } from "./run-control.js";
import { handleFor, runHandle } from "./run-handle.js";
import { sendEvent } from "./send-event.js";
import { startChildRun, startRun } from "./start-run.js";
import { markEncrypting, readsStoreMark } from "./unreadable-payloads.js";
import type { EventView, RunView, StepView, WorkerView } from "./views.js";
import { createWorkspaceViews, type WorkspaceViewsApi } from "./workspace-views.js";

export type { GcResult };

export interface EngineOptions {
  /** Default: sqliteStore(".cairn/cairn.db"). */
  store?: Store;
  workflows?: AnyWorkflow[];
  /** Runs this process executes at once. Default 16. */
  concurrency?: number;
  /** A crashed worker's runs are taken over after this. Default 30 s. */
  leaseMs?: number;
  /** How often leases are renewed. Default leaseMs / 3. */
  heartbeatMs?: number;
  /** How often the store is polled for runnable runs. Default 250 ms. */
  pollIntervalMs?: number;
  /** false: a client that starts/signals/inspects but never executes. Default true. */
  worker?: boolean;
  clock?: Clock;
  /** close() waits this long for running steps. Default 10 s. */
  closeGraceMs?: number;
  /** Largest encoded step result, input, output or event payload. Default 2 MiB. */
  maxPayloadBytes?: number;
  /** Retry backoffs up to this long wait in process; longer ones release the run. Default 5 s. */
  inProcessRetryMs?: number;
  /** How long an aborted attempt (timeout, cancel) may take to stop, so that the spend it
   *  reports is recorded with it. Default 1 s. */
  abortGraceMs?: number;
  /** How long a replay waits for a call that the first run made after awaiting something
   *  that is not a recorded call (a timer, a file), before it reports non-determinism.
   *  Default 60 s. */
  replayStallMs?: number;
  /** Receives internal problems (never user payloads). Default: the logger's warn, and
   *  without a logger, console.error. */
  log?: (message: string, err?: unknown) => void;
  /** Structured logs (a pino logger fits as it is): the worker's lifecycle at info (one
   *  line per claimed, recovered, takeover, completed, failed, canceled, paused, released,
   *  lease-lost), internal problems at warn. Never payloads. Default: problems to stderr,
   *  no lifecycle lines. */
  logger?: Logger;
  /** Where ctx.workspace() puts a workspace given no `dir`: <workspaceRoot>/<run id>/<name>.
   *  Default ".cairn/workspaces". Cairn's own: a run's first opening of such a workspace
   *  empties its directory when cairn made the run's directory (it holds `.cairn-run`), so
   *  keep nothing of yours in those. */
  workspaceRoot?: string;
  /** Keys that sign and verify approval links (approval-tokens.ts): the first signs, all
   *  verify. No default: without keys, links can be neither made nor accepted. */
  approvalKeys?: ApprovalKey[];
  /** Limits, each with a clear error when reached (docs/API.md, "Limits"). */
  limits?: Partial<Limits>;
  /** Deletes finished runs in the worker, in batches (engine/retention.ts): those that
   *  finished more than `finishedOlderThan` ago, checked every `every` (default "1h").
   *  Off by default. Ignored with `worker: false`. */
  retention?: { finishedOlderThan: Duration; every?: Duration; batchSize?: number };
}

export interface GcOptions {
  /** Runs that finished more than this long ago (by the store's clock) are deleted. */
  olderThan: Duration;
  /** Count what would be deleted; delete nothing. */
  dryRun?: boolean;
  /** Runs per transaction. Default 500, at most 1,000. */
  batchSize?: number;
  /** After each batch, the totals so far. */
  onBatch?: (progress: GcResult) => void;
}

export interface StartOptions {
  id?: string;
  budget?: Amounts;
}

export interface SendEventOptions {
  /** Makes the send idempotent: sending again with the same key (e.g. a webhook's delivery
   *  id) stores nothing and answers the first event (`duplicate: true`). 1-256 characters. */
  idempotencyKey?: string;
}

export interface SentEvent {
  event: EventView;
  /** True when an event with the same idempotency key had been stored before. */
  duplicate: boolean;
}

export interface RunHandle<O = unknown> {
  readonly id: string;
  result(): Promise<O>;
  info(): Promise<RunView | undefined>;
}

/** What start() returns: a handle, and whether this call created the run. */
export interface StartedRun<O = unknown> extends RunHandle<O> {
  /** false: a run with this id and the same input already existed, and start() returned it
   *  without creating anything (a different input is a RunConflictError). */
  readonly created: boolean;
}

/** Approvals (ctx.approval): list, approve, reject, and approval links: approvals.ts.
 *  Workspaces (ctx.workspace) as recorded: checkpoints, files, diffs: workspace-views.ts. */
/** A page of a run's steps (Engine.readSteps). */
export interface StepsPage {
  steps: StepView[];
  /** Present while completed calls follow: the `from` of the next page. */
  next?: number;
  /** Present (true) when no later read shows this page otherwise: every position from the
   *  page's `from` to `next` holds calls that completed with a value, none in flight among
   *  them and none failed (a resume executes a failed call again). A live view keeps such
   *  pages and reads again only from the first page that is not settled. */
  settled?: true;
}

/** A page of a run's events (Engine.readEvents). */
export interface EventsPage {
  events: EventView[];
  /** Present while events follow: the `after` of the next page. */
  next?: number;
}

export interface Engine extends ApprovalsApi, WorkspaceViewsApi {
  readonly workerId: string;
  /** Starts a run of `wf`; or of a workflow by name: "name@version", or "name" for the
   *  newest version this engine registers or a live worker serves (see docs/API.md). */
  start<I, O>(wf: Workflow<I, O>, input: I, options?: StartOptions): Promise<StartedRun<O>>;
  start(name: string, input: unknown, options?: StartOptions): Promise<StartedRun>;
  /** A handle on an existing run; given its workflow, the output type is inferred. */
  handle<I, O>(wf: Workflow<I, O>, id: string): RunHandle<O>;
  handle<O = unknown>(id: string): RunHandle<O>;
  sendEvent(
    id: string,
    name: string,
    payload?: unknown,
    options?: SendEventOptions,
  ): Promise<SentEvent>;
  cancel(id: string, reason?: string): Promise<void>;
  resume(id: string, options?: { budget?: Amounts }): Promise<RunHandle>;
  fork(
    id: string,
    options: { fromStep: string; version?: string; id?: string },
  ): Promise<RunHandle>;
  /** The run, or undefined for an unknown id: the one read of a run that does not refuse
   *  it (every other rejects with RunNotFoundError). */
  getRun(id: string): Promise<RunView | undefined>;
  listRuns(filter?: RunFilter): Promise<RunView[]>;
  /** The run's calls in call order; RunNotFoundError for an unknown run. */
  getSteps(id: string): Promise<StepView[]>;
  /** A page of getSteps, read from the store a page at a time: the completed calls from
   *  call position `from` (default 0) on, at most `limit` (default 500; fewer when calls
   *  share a position, a whole such group when it alone fills the page), then, on the last
   *  page, the calls begun but not completed. `next`: where the next page starts, while
   *  completed calls follow. RunNotFoundError for an unknown run. */
  readSteps(id: string, options?: { from?: number; limit?: number }): Promise<StepsPage>;
  // For dashboards (the HTTP API): what else a run and the store hold.
  /** Every event sent to a run, consumed or not, in the order sent; RunNotFoundError for an
   *  unknown run. */
  listEvents(id: string): Promise<EventView[]>;
  /** A page of listEvents: the events with `seq` greater than `after` (default 0), at most
   *  `limit` (default 500); `next` (the last `seq` shown) while more follow. Events sent
   *  meanwhile come on later pages, never before one already read. RunNotFoundError for an
   *  unknown run. */
  readEvents(id: string, options?: { after?: number; limit?: number }): Promise<EventsPage>;
  /** Worker processes registered in the store; `live` judged by this engine's leaseMs. */
  listWorkers(): Promise<WorkerView[]>;
  /** A page of the run's stream (what cairn/ai forwards of streamed model calls), raw, from
   *  offset `from` (default 0); cairn/ai's readStream decodes it. RunNotFoundError for an
   *  unknown run. */
  readStream(id: string, options?: { from?: number; limit?: number }): Promise<StreamChunk[]>;
  /** The workflows given to createEngine, each name@version once. */
  readonly workflows: readonly AnyWorkflow[];
  /** Counters for tests and dashboards: executions held in memory, commits, claims. */
  metrics(): EngineMetrics;
  /** Retention: deletes finished runs older than `olderThan` with every record they own and
   *  the workspace objects only they held; never an unfinished run. Idempotency of `start`
   *  by id ends with it (a deleted id can be started anew). */
  gc(options: GcOptions): Promise<GcResult>;
  close(): Promise<void>;
}

export interface EngineMetrics {
  activeExecutions: number;
  commitBatches: number;
  commitWrites: number;
  claimed: number;
}

/** Builds an engine from its parts, each a module of its own that is handed the shared
 *  internals (engine-internals.ts) rather than closing over them. */
export function createEngine(options: EngineOptions = {}): Engine {
  const config = resolveEngineConfig(options);
  const internals = createEngineInternals(config, startChildRun);
  const engineReady = () => ready(internals);
  const engine = closedAware(internals, {
    ...createApprovalsApi({
      store: config.store,
      clock: config.clock,
      maxPayloadBytes: config.maxPayloadBytes,
      approvalKeys: config.approvalKeys,
      ready: engineReady,
      answered: (runId) => {
        runHasNews(internals, runId);
        internals.waiters.wake(runId);
      },
    }),
    ...createWorkspaceViews({ store: config.store, ready: engineReady }),
    workerId: internals.workerId,
    // Not async: startRun's promise, then the handle (an async function is a hop through the
    // promise hooks of every run).
    start: (wfOrName: AnyWorkflow | string, input: unknown, opts: StartOptions = {}) =>
      startRun(internals, wfOrName, input, opts).then(({ run, created }) => ({
        ...runHandle(internals, run.id, run),
        created,
      })),
    handle: ((idOrWorkflow: string | AnyWorkflow, maybeId?: string) =>
      handleFor(internals, idOrWorkflow, maybeId)) as Engine["handle"],
    sendEvent: (id, name, payload, opts = {}) => sendEvent(internals, id, name, payload, opts),
    cancel: (id, reason = DEFAULT_CANCEL_REASON) => cancelRun(internals, id, reason),
    resume: (id, opts = {}) => resumeRun(internals, id, opts),
    fork: (id, opts) => forkRun(internals, id, opts),
    ...inspectionVerbs(internals),
    workflows: Object.freeze([...config.workflows.values()]) as readonly AnyWorkflow[],
    metrics: () => engineMetrics(internals),
    async gc(gcOptions) {
      await engineReady();
      // close() stops a gc() between batches: it went on until the store closed under it,
      // and failed with "the store is not open; call open() first".
      const { stop, running } = internals.collections;
      if (stop.signal.aborted) await ready(internals); // closed while it opened: refused
      const collecting = collectOnRequest(config.store, gcOptions, stop.signal);
      const settled = collecting.then(
        () => {},
        () => {},
      );
      running.add(settled);
      let result: GcResult;
      try {
        result = await collecting;
      } finally {
        running.delete(settled);
      }
      if (stop.signal.aborted) {
        throw new EngineClosedError(
          `gc(): close() was called; it stopped between batches, having deleted ${result.runs} runs. Run it again on a new engine for the rest.`,
        );
      }
      return result;
    },
    close: () => closeEngine(internals),
  });
  if (encrypts(config.store)) markEncrypting(engine);
  readsStoreMark(engine, async () => {
    await engineReady();
    const marked = (await config.store.isMarkedEncrypted?.()) ?? false;
    return marked ? config.store.description : undefined;
  });
  trackCloseLeftovers(engine, internals);
  trackHeartbeat(engine, internals.worker);
  return engine;
}

/** Members that never reach the store, or say themselves how close() ended them. */
const NOT_CLOSED_AWARE = new Set<string>(["handle", "metrics", "close"]);

/** A call under way when close() closed the store under it failed with the store's "not
 *  open: call open() first", which no user of an engine calls: it now says the engine was
 *  closed meanwhile (EngineClosedError), with the store's error as its cause. */
function closedAware(internals: EngineInternals, engine: Engine): Engine {
  const members = engine as unknown as Record<string, unknown>;
  for (const [name, member] of Object.entries(members)) {
    if (typeof member !== "function" || NOT_CLOSED_AWARE.has(name)) continue;
    const fn = member as (...args: unknown[]) => Promise<unknown>;
    const rethrow = (err: unknown) => {
      throw closedUnder(internals, `${name}()`, err);
    };
    // Not an async wrapper: one promise, not two hops through the promise hooks, per call.
    members[name] = (...args: unknown[]) => {
      try {
        return Promise.resolve(fn(...args)).catch(rethrow);
      } catch (err) {
        return Promise.reject(closedUnder(internals, `${name}()`, err));
      }
    };
  }
  return engine;
}
