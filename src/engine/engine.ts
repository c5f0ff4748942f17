// The user's handle: registers workflows, starts, signals, cancels, resumes, forks and
// inspects runs, and owns a worker unless `worker: false`. All persistence goes through
// the Store; all time through the Clock.

import { DEFAULT_MAX_PAYLOAD_BYTES, decode, encode } from "../codec/codec.js";
import {
  errorFromRecord,
  InputValidationError,
  RunCanceledError,
  RunConflictError,
  RunNotFoundError,
  SerializationError,
} from "../errors.js";
import { type Clock, realClock } from "../lib/clock.js";
import { newId } from "../lib/ids.js";
import { sqliteStore } from "../store/sqlite/sqlite-store.js";
import type { Amounts, RunFilter, RunRecord, Store } from "../store/store.js";
import type { AnyWorkflow, Workflow } from "../workflow/define.js";
import { Committer } from "./committer.js";
import { type RunView, type StepView, stepViews, toRunView } from "./views.js";
import { Worker } from "./worker.js";

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
  /** Receives internal problems (never user payloads). Default: console.error. */
  log?: (message: string, err?: unknown) => void;
}

export interface StartOptions {
  id?: string;
  budget?: Amounts;
}

export interface RunHandle<O = unknown> {
  readonly id: string;
  result(): Promise<O>;
  info(): Promise<RunView | undefined>;
}

export interface Engine {
  readonly workerId: string;
  start<I, O>(wf: Workflow<I, O>, input: I, options?: StartOptions): Promise<RunHandle<O>>;
  handle<O = unknown>(id: string): RunHandle<O>;
  sendEvent(id: string, name: string, payload?: unknown): Promise<void>;
  cancel(id: string, reason?: string): Promise<void>;
  resume(id: string, options?: { budget?: Amounts }): Promise<RunHandle>;
  fork(
    id: string,
    options: { fromStep: string; version?: string; id?: string },
  ): Promise<RunHandle>;
  getRun(id: string): Promise<RunView | undefined>;
  listRuns(filter?: RunFilter): Promise<RunView[]>;
  getSteps(id: string): Promise<StepView[]>;
  /** Counters for tests and dashboards: executions held in memory, commits, claims. */
  metrics(): EngineMetrics;
  close(): Promise<void>;
}

export interface EngineMetrics {
  activeExecutions: number;
  commitBatches: number;
  commitWrites: number;
  claimed: number;
}

const ID_RE = /^\S.{0,255}$/s;

export function createEngine(options: EngineOptions = {}): Engine {
  const store = options.store ?? sqliteStore();
  const clock = options.clock ?? realClock;
  const leaseMs = options.leaseMs ?? 30_000;
  const pollIntervalMs = options.pollIntervalMs ?? 250;
  const maxPayloadBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
  const log =
    options.log ??
    ((message: string, err?: unknown) =>
      console.error(
        `cairn: ${message}${err ? `: ${(err as Error)?.message ?? String(err)}` : ""}`,
      ));
  const workflows = new Map<string, Workflow<unknown, unknown>>();
  for (const wf of options.workflows ?? []) {
    if (workflows.has(wf.id)) {
      throw new TypeError(`createEngine(): workflow "${wf.id}" is registered twice`);
    }
    workflows.set(wf.id, wf as unknown as Workflow<unknown, unknown>);
  }
  const committer = new Committer(store);
  const workerId = newId("wrk");
  const waiters = new Map<string, Set<() => void>>();

  const worker =
    options.worker === false
      ? undefined
      : new Worker({
          id: workerId,
          store,
          clock,
          workflows,
          concurrency: options.concurrency ?? 16,
          leaseMs,
          heartbeatMs: options.heartbeatMs ?? Math.max(10, Math.floor(leaseMs / 3)),
          pollIntervalMs,
          execution: {
            store,
            committer,
            clock,
            maxPayloadBytes,
            inProcessRetryMs: options.inProcessRetryMs ?? 5_000,
            startChild: (parentId, childId, wf, input) =>
              createRunFor(wf, input, { id: childId }, parentId).then(() => undefined),
            log,
          },
        });

  let closed = false;
  let unsubscribe: (() => void) | undefined;
  const ready: Promise<void> = (async () => {
    await store.open({ clock });
    unsubscribe = store.subscribe((hint) => {
      if (hint.kind === "finished" && hint.runId) wake(hint.runId);
    });
    await worker?.start();
  })();
  // Surface open errors on first use, not as an unhandled rejection.
  ready.catch(() => {});

  function wake(runId: string): void {
    const set = waiters.get(runId);
    if (!set) return;
    waiters.delete(runId);
    for (const fn of set) fn();
  }

  function waitForChange(runId: string, ms: number): Promise<void> {
    return new Promise((resolve) => {
      const set = waiters.get(runId) ?? new Set();
      waiters.set(runId, set);
      const done = () => {
        clearTimeout(timer);
        set.delete(done);
        if (set.size === 0 && waiters.get(runId) === set) waiters.delete(runId);
        resolve();
      };
      const timer = setTimeout(done, ms);
      set.add(done);
    });
  }

  async function use(): Promise<void> {
    if (closed) throw new Error("cairn: this engine is closed; create a new one");
    await ready;
  }

  async function createRunFor(
    wf: Workflow<unknown, unknown>,
    input: unknown,
    opts: StartOptions,
    parentId: string | null,
  ): Promise<RunRecord> {
    const id = opts.id ?? newId("run");
    if (typeof id !== "string" || !ID_RE.test(id) || id.includes("\u0000")) {
      throw new TypeError(
        `start(): run id ${JSON.stringify(id)} is invalid; use 1-256 characters, not starting with a space`,
      );
    }
    let value = input;
    const schema = wf.options.input;
    if (schema) {
      const res = await schema["~standard"].validate(input);
      if (res.issues) {
        const detail = res.issues
          .map(
            (i) =>
              `${i.path?.length ? `${i.path.map((p) => (typeof p === "object" ? p.key : p)).join(".")}: ` : ""}${i.message}`,
          )
          .join("; ");
        throw new InputValidationError(
          `Input for workflow "${wf.id}" (run "${id}") is invalid: ${detail}. Nothing was recorded.`,
          res.issues,
        );
      }
      value = res.value;
    }
    let encoded: string;
    try {
      encoded = encode(value, maxPayloadBytes);
    } catch (err) {
      throw new SerializationError(
        `Input for workflow "${wf.id}" (run "${id}") ${(err as Error).message}; nothing was recorded`,
        { cause: err },
      );
    }
    const budgetLimit = { ...(wf.options.budget ?? {}), ...(opts.budget ?? {}) };
    for (const [k, v] of Object.entries(budgetLimit)) {
      if (typeof v !== "number" || !(v >= 0)) {
        throw new TypeError(`start(): budget "${k}" must be a number >= 0 (got ${String(v)})`);
      }
    }
    const { run, created } = await store.createRun({
      id,
      workflow: wf.name,
      version: wf.version,
      input: encoded,
      budgetLimit,
      parentId,
    });
    if (!created && run.workflow !== wf.name) {
      throw new RunConflictError(
        `Run id "${id}" already belongs to workflow "${run.workflow}"; it cannot be started as "${wf.name}". Choose another id.`,
      );
    }
    if (created) worker?.poke();
    return run;
  }

  function handle<O>(id: string): RunHandle<O> {
    return {
      id,
      info: () => engine.getRun(id),
      async result(): Promise<O> {
        await use();
        for (;;) {
          const run = await store.getRun(id);
          if (!run) throw new RunNotFoundError(`Run "${id}" does not exist`);
          if (run.status === "completed") return decode<O>(run.output ?? "");
          if (run.status === "failed") {
            throw errorFromRecord(run.error ?? { name: "Error", message: run.reason ?? "failed" });
          }
          if (run.status === "canceled") {
            throw new RunCanceledError(
              `Run "${id}" was canceled: ${run.reason ?? "no reason given"}`,
            );
          }
          await waitForChange(id, pollIntervalMs);
        }
      },
    };
  }

  const engine: Engine = {
    workerId,
    async start(wf, input, opts = {}) {
      await use();
      const run = await createRunFor(
        wf as unknown as Workflow<unknown, unknown>,
        input,
        opts,
        null,
      );
      return handle(run.id);
    },
    handle,
    async sendEvent(id, name, payload) {
      await use();
      if (
        typeof name !== "string" ||
        name.length === 0 ||
        name.length > 200 ||
        name.startsWith("cairn.")
      ) {
        throw new TypeError(
          `sendEvent(): event name ${JSON.stringify(name)} for run "${id}" is invalid; use 1-200 characters not starting with "cairn."`,
        );
      }
      let encoded: string;
      try {
        encoded = encode(payload, maxPayloadBytes);
      } catch (err) {
        throw new SerializationError(
          `Event "${name}" for run "${id}": the payload ${(err as Error).message}; nothing was recorded`,
          { cause: err },
        );
      }
      const res = await store.sendEvent({ runId: id, name, payload: encoded });
      if (!res.ok) {
        if (res.reason === "not-found")
          throw new RunNotFoundError(`Run "${id}" does not exist; event "${name}" was not stored`);
        throw new RunConflictError(
          `Run "${id}" is ${res.status}; event "${name}" cannot be delivered to a finished run and was not stored`,
        );
      }
      const local = worker?.active.get(id);
      if (local) local.poke();
      else worker?.poke();
    },
    async cancel(id, reason = "canceled by request") {
      await use();
      const res = await store.requestCancel(id, reason);
      if (res.state === "not-found") throw new RunNotFoundError(`Run "${id}" does not exist`);
      if (res.state === "finished") {
        throw new RunConflictError(
          `Run "${id}" is already ${res.run.status}; it cannot be canceled`,
        );
      }
      if (res.state === "requested") worker?.active.get(id)?.cancel(reason);
      wake(id);
    },
    async resume(id, opts = {}) {
      await use();
      const res = await store.resumeRun(id, opts.budget ? { budgetLimit: opts.budget } : {});
      if (!res.ok) {
        if (res.reason === "not-found") throw new RunNotFoundError(`Run "${id}" does not exist`);
        throw new RunConflictError(
          `Run "${id}" is ${res.run.status}; only paused or failed runs can be resumed`,
        );
      }
      worker?.poke();
      return handle(id);
    },
    async fork(id, opts) {
      await use();
      const source = await store.getRun(id);
      if (!source) throw new RunNotFoundError(`Run "${id}" does not exist; nothing to fork`);
      const journal = await store.loadJournal(id);
      const from = journal.steps.find((s) => s.key === opts.fromStep);
      if (!from) {
        const keys = journal.steps
          .filter((s) => !s.key.startsWith("@"))
          .sort((a, b) => a.seq - b.seq)
          .map((s) => s.key);
        throw new RunConflictError(
          `Run "${id}" has no completed step "${opts.fromStep}"; fork from one of: ${keys.join(", ") || "(none)"}`,
        );
      }
      const newRunId = opts.id ?? newId("run");
      const res = await store.forkRun({
        sourceId: id,
        beforeSeq: from.seq,
        run: {
          id: newRunId,
          workflow: source.workflow,
          version: opts.version ?? source.version,
          input: source.input,
          budgetLimit: source.budgetLimit,
          parentId: null,
        },
      });
      if (!res.created) {
        throw new RunConflictError(
          `Run id "${newRunId}" already exists; choose another id for the fork`,
        );
      }
      worker?.poke();
      return handle(newRunId);
    },
    async getRun(id) {
      await use();
      const run = await store.getRun(id);
      return run ? toRunView(run) : undefined;
    },
    async listRuns(filter) {
      await use();
      return (await store.listRuns(filter)).map(toRunView);
    },
    async getSteps(id) {
      await use();
      return stepViews(await store.loadJournal(id));
    },
    metrics() {
      return {
        activeExecutions: worker?.active.size ?? 0,
        commitBatches: committer.stats.batches,
        commitWrites: committer.stats.writes,
        claimed: worker?.stats.claimed ?? 0,
      };
    },
    async close() {
      if (closed) return;
      closed = true;
      try {
        await ready;
      } catch {
        return;
      }
      await worker?.close(options.closeGraceMs ?? 10_000);
      await committer.drain();
      unsubscribe?.();
      for (const id of [...waiters.keys()]) wake(id);
      await store.close();
    },
  };
  return engine;
}
