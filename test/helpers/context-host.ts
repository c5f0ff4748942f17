// A ContextHost for tests and benches that run the Context alone, without an engine or a
// store: a virtual clock, no children, no events, and every run write pushed onto `writes`.

import type { Journal, RunWrite } from "../../src/store/store.js";
import { createVirtualClock } from "../../src/testing/virtual-clock.js";
import type { ContextHost } from "../../src/workflow/context.js";

export function emptyJournal(): Journal {
  return { steps: [], attempts: [], intents: [], events: [] };
}

/** A host for run "r" (workflow "w", version "1", generation 0); `over` replaces any part. */
export function testContextHost(
  writes: RunWrite[] = [],
  over: Partial<ContextHost> = {},
): ContextHost {
  return {
    runId: "r",
    workflow: "w",
    version: "1",
    generation: 0,
    recovered: false,
    budgetLimit: {},
    budgetSpent: {},
    failedCalls: [],
    clock: createVirtualClock(),
    maxPayloadBytes: 1_000_000,
    inProcessRetryMs: 5_000,
    abortGraceMs: 50,
    replayStallMs: 2_000,
    commit: async (w) => {
      writes.push({ runId: "r", epoch: 1, ...w });
    },
    startChild: async () => undefined,
    childOutcome: async () => undefined,
    deletedChild: async () => undefined,
    loadEvents: async () => [],
    log: () => {},
    ...over,
  };
}
