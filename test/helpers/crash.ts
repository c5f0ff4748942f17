// An in-process crash: an engine whose store stops answering (every verb hangs), so it
// writes nothing more, renews no lease and releases nothing, as a killed process would.
// Another engine on the same storage takes its runs over once their leases expire on the
// virtual clock. After the test (before the harness removes the storage) the frozen engine's store connection is closed; the engine
// itself is left as a killed process leaves its memory (its promises never settle).

import {
  type AnyWorkflow,
  createEngine,
  type Engine,
  type EngineOptions,
  type Store,
} from "../../src/index.js";
import { faultyStore } from "../../src/testing/index.js";
import type { Harness } from "./engines.js";

const VERBS: Array<keyof Store> = [
  "open",
  "close",
  "now",
  "createRun",
  "getRun",
  "listRuns",
  "claimRuns",
  "renewLeases",
  "expireLease",
  "appendRecords",
  "releaseRun",
  "loadJournal",
  "pendingEvents",
  "listEvents",
  "sendEvent",
  "requestCancel",
  "resumeRun",
  "forkRun",
  "markUnserved",
  "registerWorker",
  "heartbeatWorker",
  "removeWorker",
  "listWorkers",
  "acquireRate",
  "settleRate",
  "blockRate",
  "appendStream",
  "readStream",
  "missingWorkspaceObjects",
  "putWorkspaceObjects",
  "getWorkspaceObjects",
  "heldWorkspaceObjects",
  "deleteRun",
  "deleteRuns",
  "requestApproval",
  "answerApproval",
  "listApprovals",
];

export interface CrashableEngine {
  engine: Engine;
  /** From now on the engine's store never answers: it is dead. */
  crash(): void;
}

export function crashableEngine(
  h: Harness,
  workflows: AnyWorkflow[],
  opts: EngineOptions = {},
): CrashableEngine {
  if (!h.onCleanup) {
    throw new Error(
      "crashableEngine(): the harness has no onCleanup (use useHarness or sharedHarness)",
    );
  }
  const stalled = new Set<keyof Store>();
  const inner = h.store();
  const store = faultyStore(inner, { stalled });
  const engine = createEngine({
    store,
    workflows,
    clock: h.clock,
    pollIntervalMs: 10,
    closeGraceMs: 50,
    ...opts,
  });
  // Among the harness's cleanups, so before its storage goes: a cleanup of this file's own
  // (an afterEach registered when it was imported) ran after the harness had dropped or
  // emptied the storage, the frozen store's connection still open (a PostgreSQL schema
  // with a connection open cannot be reused, so it was dropped), and the close's error was
  // swallowed.
  h.onCleanup(async () => {
    if (stalled.size === 0) {
      await engine.close();
      return;
    }
    await inner.close();
  });
  return {
    engine,
    crash: () => {
      for (const v of VERBS) stalled.add(v);
    },
  };
}
