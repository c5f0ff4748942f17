// What a Worker is given (engine-internals.ts builds it), shared by the worker's pieces:
// the claim loop (worker.ts), its heartbeat, its row in the workers table, its orphans.

import type { Clock } from "../lib/clock.js";
import type { ReleasedRun, Store } from "../store/store.js";
import type { Workflow } from "../workflow/define.js";
import type { ExecutionDeps } from "./execution.js";

export interface WorkerOptions {
  id: string;
  store: Store;
  clock: Clock;
  workflows: Map<string, Workflow<unknown, unknown>>;
  concurrency: number;
  leaseMs: number;
  heartbeatMs: number;
  pollIntervalMs: number;
  execution: ExecutionDeps;
  /** An execution of `runId` ended; `run` is the run as its release left it, if it
   *  released the run (durably) itself. */
  ended?(runId: string, run: ReleasedRun | undefined): void;
}
