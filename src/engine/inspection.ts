// The engine's read verbs: a run, a page of runs, a run's steps and events, the workers
// registered in the store, and a page of a run's stream, as views (views.ts). They write
// nothing.

import { runNotFound } from "../errors.js";
import type { RunFilter, StreamChunk } from "../store/store.js";
import type { Engine } from "./engine.js";
import { type EngineInternals, ready } from "./engine-internals.js";
import { stepViews } from "./step-views.js";
import { type RunView, toEventView, toRunView, toWorkerView } from "./views.js";

type InspectionVerbs = Pick<
  Engine,
  "getRun" | "listRuns" | "getSteps" | "listEvents" | "listWorkers" | "readStream"
>;

export function inspectionVerbs(internals: EngineInternals): InspectionVerbs {
  const { store, leaseMs } = internals.config;
  return {
    getRun: (id) => getRunView(internals, id),
    async listRuns(filter?: RunFilter) {
      await ready(internals);
      return (await store.listRuns(filter)).map(toRunView);
    },
    async getSteps(id) {
      await ready(internals);
      return stepViews(await store.loadJournal(id));
    },
    async listEvents(id) {
      await ready(internals);
      return (await store.listEvents(id)).map(toEventView);
    },
    async listWorkers() {
      await ready(internals);
      const [workers, now] = await Promise.all([store.listWorkers(), store.now()]);
      return workers.map((w) => toWorkerView(w, now, leaseMs));
    },
    readStream: (id, options = {}) => readStreamPage(internals, id, options),
  };
}

export async function getRunView(
  internals: EngineInternals,
  id: string,
): Promise<RunView | undefined> {
  await ready(internals);
  const run = await internals.config.store.getRun(id);
  return run ? toRunView(run) : undefined;
}

/** A page of the run's stream from offset `from`; RunNotFoundError for an unknown run. */
async function readStreamPage(
  internals: EngineInternals,
  id: string,
  options: { from?: number; limit?: number },
): Promise<StreamChunk[]> {
  await ready(internals);
  const { store } = internals.config;
  const from = options.from ?? 0;
  const limit = options.limit ?? 500;
  if (!Number.isSafeInteger(from) || from < 0 || !Number.isSafeInteger(limit) || limit < 1) {
    throw new TypeError(
      `readStream(): "from" must be a whole number >= 0 and "limit" one >= 1 (run "${id}")`,
    );
  }
  const chunks = await store.readStream({ runId: id, from, limit });
  if (chunks.length === 0 && !(await store.getRun(id))) {
    throw runNotFound(id, "it has no stream");
  }
  return chunks;
}
