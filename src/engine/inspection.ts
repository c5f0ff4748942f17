// The engine's read verbs: a run, a page of runs, a run's steps and events, the workers
// registered in the store, and a page of a run's stream, as views (views.ts). They write
// nothing. A run's reads refuse an unknown run (RunNotFoundError); getRun alone answers
// undefined.

import { runNotFound } from "../errors.js";
import type { RunFilter, RunRecord, StepRecord, Store, StreamChunk } from "../store/store.js";
import type { Engine, EventsPage, StepsPage } from "./engine.js";
import { type EngineInternals, ready } from "./engine-internals.js";
import { stepViews } from "./step-views.js";
import { type RunView, toEventView, toRunView, toWorkerView } from "./views.js";

type InspectionVerbs = Pick<
  Engine,
  | "getRun"
  | "listRuns"
  | "getSteps"
  | "readSteps"
  | "listEvents"
  | "readEvents"
  | "listWorkers"
  | "readStream"
>;

export function inspectionVerbs(internals: EngineInternals): InspectionVerbs {
  const { store, leaseMs } = internals.config;
  return {
    getRun: (id) => getRunView(internals, id),
    async listRuns(filter?: RunFilter) {
      await ready(internals);
      return (await store.listRuns(filter)).map((run) => heldTo(internals, run));
    },
    async getSteps(id) {
      await ready(internals);
      // The steps need no event (a run may have 100,000 pending, or gigabytes of payloads).
      const journal = await store.loadJournal(id, { eventPayloads: false, pendingEvents: false });
      const empty = journal.steps.length + journal.attempts.length + journal.intents.length === 0;
      if (empty) await mustExist(store, id);
      return stepViews(journal);
    },
    readSteps: (id, options = {}) => readStepsPage(internals, id, options),
    async listEvents(id) {
      await ready(internals);
      const events = await store.listEvents(id);
      if (events.length === 0) await mustExist(store, id);
      return events.map(toEventView);
    },
    readEvents: (id, options = {}) => readEventsPage(internals, id, options),
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
  return run ? heldTo(internals, run) : undefined;
}

/** Every read verb of one run but getRun (undefined) answers an unknown id with
 *  RunNotFoundError: an id with a typo, or a run retention deleted, is not a run with
 *  nothing recorded yet. Asked only when the read came back empty, so a run with records
 *  costs nothing more; a run created after that read was empty then too, and one deleted
 *  after it was read is answered as read. */
async function mustExist(store: Store, id: string): Promise<void> {
  if (!(await store.getRun(id))) throw runNotFound(id);
}

/** A run's view with the budget it is held to. A run started by name without the workflow's
 *  code stores only the limits given, and every execution holds it to the workflow's
 *  defaults for the names not stored (execution.ts): the view merges them in the same way
 *  when this engine has the workflow registered, and says it cannot when it has not. */
function heldTo(internals: EngineInternals, run: RunRecord): RunView {
  const view = toRunView(run);
  const wf = internals.config.workflows.get(`${run.workflow}@${run.version}`);
  if (!wf) view.budget.defaultsUnknown = true;
  else if (wf.options.budget) view.budget.limit = { ...wf.options.budget, ...run.budgetLimit };
  return view;
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

/** The default page of readSteps and readEvents. */
const JOURNAL_PAGE = 500;

/** A page of the run's steps, read a page at a time (Store.readJournalPage). */
async function readStepsPage(
  internals: EngineInternals,
  id: string,
  options: { from?: number; limit?: number },
): Promise<StepsPage> {
  await ready(internals);
  const { store } = internals.config;
  const from = options.from ?? 0;
  const limit = options.limit ?? JOURNAL_PAGE;
  checkPage("readSteps", id, "from", from, limit);
  needPagedRead(store, "readJournalPage", "readSteps");
  const page = await store.readJournalPage({ runId: id, from, limit });
  const empty = page.steps.length + page.attempts.length + page.intents.length === 0;
  if (empty) await mustExist(store, id);
  const steps = stepViews({ ...page, events: [] });
  const last = page.steps[page.steps.length - 1];
  if (!page.more || !last) return { steps };
  const settled = completedInPlace(page.steps, from) && (await neverResumed(store, id));
  return { steps, next: last.seq + 1, ...(settled ? { settled: true } : {}) };
}

/** Whether each position from `from` to the last of `steps` holds a call that completed
 *  with a value: a missing position is a call in flight (it completes there later), a
 *  failed call may execute again after a resume; an ok outcome is final. */
function completedInPlace(steps: StepRecord[], from: number): boolean {
  const last = steps[steps.length - 1]!;
  const positions = new Set(steps.map((s) => s.seq));
  return steps.every((s) => s.outcome === "ok") && positions.size === last.seq + 1 - from;
}

/** Whether the run is in its first generation, read after the page (a generation only
 *  grows, so the page was read in it too). A resumed run's calls share positions with the
 *  failed generation's (a key of the new one can come to a position an old record holds),
 *  so its pages are never settled; positions judged settled before the resume stay so,
 *  since every call the new generation makes comes after a failed call's position. */
async function neverResumed(store: Store, id: string): Promise<boolean> {
  return (await store.getRun(id))?.generation === 0;
}

/** A page of the run's events; one more than the page is read, so a last page that is
 *  exactly full says so (no `next`) and a client stops without asking for an empty one. */
async function readEventsPage(
  internals: EngineInternals,
  id: string,
  options: { after?: number; limit?: number },
): Promise<EventsPage> {
  await ready(internals);
  const { store } = internals.config;
  const after = options.after ?? 0;
  const limit = options.limit ?? JOURNAL_PAGE;
  checkPage("readEvents", id, "after", after, limit);
  needPagedRead(store, "readEvents", "readEvents");
  const read = await store.readEvents({ runId: id, after, limit: limit + 1 });
  if (read.length === 0) await mustExist(store, id);
  const events = read.slice(0, limit).map(toEventView);
  const last = events[events.length - 1];
  return { events, ...(read.length > limit && last ? { next: last.seq } : {}) };
}

function checkPage(verb: string, id: string, name: string, position: number, limit: number) {
  if (
    !Number.isSafeInteger(position) ||
    position < 0 ||
    !Number.isSafeInteger(limit) ||
    limit < 1
  ) {
    throw new TypeError(
      `${verb}(): "${name}" must be a whole number >= 0 and "limit" one >= 1 (run "${id}")`,
    );
  }
}

/** A store written for an earlier cairn lacks the paged reads: say so, rather than "is not
 *  a function" (the HTTP API's and the dashboard's run pages need them). */
function needPagedRead(store: Store, verb: "readJournalPage" | "readEvents", caller: string) {
  if (typeof (store as Partial<Store>)[verb] !== "function") {
    throw new TypeError(
      `${caller}(): the store has no ${verb} (a Store written for an earlier cairn); implement it (see Store.${verb} and describeStoreContract)`,
    );
  }
}
