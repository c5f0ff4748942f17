// The engine's two ways into retention (retention.ts): `engine.gc()` on request, and the
// `retention` option, a loop in the worker that collects a batch at a time every so often,
// between which the worker claims and commits.

import type { Clock } from "../lib/clock.js";
import { toMs } from "../lib/duration.js";
import type { Store } from "../store/store.js";
import type { GcOptions, GcResult } from "./engine.js";
import type { RetentionSchedule } from "./engine-config.js";
import type { Logger } from "./logger.js";
import { collectFinishedRuns } from "./retention.js";

/** engine.gc(): deletes (or with dryRun counts) the finished runs older than `olderThan`. */
export function collectOnRequest(
  store: Store,
  options: GcOptions,
  signal?: AbortSignal,
): Promise<GcResult> {
  return collectFinishedRuns(store, {
    olderThanMs: toMs(options?.olderThan, "gc(): olderThan"),
    ...(signal && { signal }),
    ...(options.dryRun !== undefined && { dryRun: options.dryRun }),
    ...(options.batchSize !== undefined && { batchSize: options.batchSize }),
    ...(options.onBatch && { onBatch: options.onBatch }),
  });
}

export interface RetentionLoop {
  /** Stops between batches; resolves once the loop has ended. */
  stop(): Promise<void>;
}

export interface RetentionLoopDeps {
  store: Store;
  clock: Clock;
  workerId: string;
  logger: Logger;
  log: (message: string, err?: unknown) => void;
  /** Resolves when the engine opens (an open that fails is tried again); never rejects. */
  opened: Promise<void>;
}

/** Starts the `retention` option's loop: a collection every `schedule.everyMs`, its deletions
 *  logged at info, a failed one logged and tried again next time. */
export function startRetentionLoop(
  deps: RetentionLoopDeps,
  schedule: RetentionSchedule,
): RetentionLoop {
  const stop = new AbortController();
  const loop = (async () => {
    await Promise.race([deps.opened, aborted(stop.signal)]);
    while (!stop.signal.aborted) {
      await collectOnce(deps, schedule, stop.signal);
      await deps.clock.sleep(schedule.everyMs, stop.signal).catch(() => {});
    }
  })();
  return {
    stop: () => {
      stop.abort();
      return loop;
    },
  };
}

async function collectOnce(
  deps: RetentionLoopDeps,
  schedule: RetentionSchedule,
  signal: AbortSignal,
): Promise<void> {
  try {
    const res = await collectFinishedRuns(deps.store, {
      olderThanMs: schedule.olderThanMs,
      signal,
      ...(schedule.batchSize !== undefined && { batchSize: schedule.batchSize }),
    });
    if (res.runs > 0) {
      deps.logger.info(
        {
          event: "gc",
          workerId: deps.workerId,
          runs: res.runs,
          objects: res.objects,
          bytes: res.bytes,
        },
        `retention deleted ${res.runs} finished runs`,
      );
    }
  } catch (err) {
    deps.log("retention: a batch failed; it is tried again next time", err);
  }
}

function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener("abort", () => resolve(), { once: true });
  });
}
