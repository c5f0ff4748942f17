// The lease renewal round an engine's worker has in flight, for a harness that moves a
// virtual clock (testing/test-engine.ts). Such a clock jumps where real time only creeps: a
// harness that moves it on before the renewals its last move set off have answered makes
// the worker's leases look stale to the worker itself (an effect then stops its execution
// rather than perform, and the run is executed again), though nothing went wrong. Not
// public API.

import type { Engine } from "./engine.js";
import type { Worker } from "./worker.js";

const workerOf = new WeakMap<Engine, Worker>();

/** Lets heartbeatInFlight(engine) find the engine's worker (none with `worker: false`). */
export function trackHeartbeat(engine: Engine, worker: Worker | undefined): void {
  if (worker) workerOf.set(engine, worker);
}

/** The renewal round the engine's worker has in flight (it never rejects), if any. */
export function heartbeatInFlight(engine: Engine): Promise<void> | undefined {
  return workerOf.get(engine)?.heartbeatInFlight;
}
