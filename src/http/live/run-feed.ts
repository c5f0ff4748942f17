// The live feed of one run (see feeds.ts for its messages): "snapshot" {run, steps, events},
// then "run", "step" and "run-event" as they change.
//
// Each poll reads only what can still change, not the whole run: steps from the first page
// that is not settled (engine.readSteps: a settled page never shows otherwise), events from
// the first one not yet consumed (an event changes only when a wait consumes it, once).
// A run deleted reads as a run with nothing, as before.
// What is before those positions is kept from the earlier readings, so every reading holds
// the whole run as a reading of everything would, and the messages are the same.

import { type Engine, RunNotFoundError, type StepsPage } from "../../index.js";
import { eventJson, runJson, stepJson } from "../json.js";
import type { Feed } from "./hub.js";
import { type Keyed, keyed, upserts } from "./keyed.js";

/** The calls in a page that may settle, and the events in a page read. */
const LIVE_PAGE = 200;

interface Settled {
  /** The items before `next`, which no later reading shows otherwise. */
  items: Keyed[];
  /** Where the next reading starts: a readSteps `from`, or a readEvents `after`. */
  next: number;
}

export interface RunState {
  run: Record<string, unknown> | null;
  runSig: string;
  steps: Keyed[];
  events: Keyed[];
  settledSteps: Settled;
  settledEvents: Settled;
}

const NOTHING_SETTLED: Settled = { items: [], next: 0 };

export function runFeed(engine: Engine, id: string, pageSize = LIVE_PAGE): Feed<RunState> {
  return {
    async read(prev) {
      // The run first, then what it holds: a status read before the steps never runs ahead
      // of them (read together, on PostgreSQL's separate connections, "completed" could
      // arrive before the step recorded just before it).
      const run = await engine.getRun(id);
      const runJ = run ? runJson(run) : null;
      const runSig = JSON.stringify(runJ);
      if (!run) return gone(runJ, runSig);
      // A run deleted and another made under its id since the last reading holds nothing
      // of what the first one settled.
      const known = prev?.run?.createdAt === runJ?.createdAt ? prev : undefined;
      try {
        const [steps, events] = await Promise.all([
          readSteps(engine, id, known?.settledSteps ?? NOTHING_SETTLED, pageSize),
          readEvents(engine, id, known?.settledEvents ?? NOTHING_SETTLED, pageSize),
        ]);
        return {
          run: runJ,
          runSig,
          steps: steps.all,
          events: events.all,
          settledSteps: steps.settled,
          settledEvents: events.settled,
        };
      } catch (err) {
        // Deleted after the run was read: as a reading of nothing.
        if (err instanceof RunNotFoundError) return gone(runJ, runSig);
        throw err;
      }
    },
    snapshot(s) {
      return {
        event: "snapshot",
        data: {
          run: s.run,
          steps: s.steps.map((k) => k.json),
          events: s.events.map((k) => k.json),
        },
      };
    },
    changes(prev, next) {
      const out = [
        ...upserts(prev.steps, next.steps, (step) => ({ event: "step", data: { step } })),
        ...upserts(prev.events, next.events, (event) => ({ event: "run-event", data: { event } })),
      ];
      if (prev.runSig !== next.runSig) out.push({ event: "run", data: { run: next.run } });
      return out;
    },
  };
}

function gone(run: Record<string, unknown> | null, runSig: string): RunState {
  return {
    run,
    runSig,
    steps: [],
    events: [],
    settledSteps: NOTHING_SETTLED,
    settledEvents: NOTHING_SETTLED,
  };
}

/** The run's steps: the settled ones kept, settled pages from there added to them, and the
 *  rest read in one page (one snapshot: a call completing between two pages would be on
 *  neither, neither completed nor begun). */
async function readSteps(
  engine: Engine,
  id: string,
  known: Settled,
  pageSize: number,
): Promise<{ all: Keyed[]; settled: Settled }> {
  const settled = { items: [...known.items], next: known.next };
  const stepsOf = (page: StepsPage) => keyed(page.steps.map(stepJson), (j) => j.key as string);
  for (;;) {
    const page = await engine.readSteps(id, { from: settled.next, limit: pageSize });
    if (page.settled && page.next !== undefined) {
      settled.items.push(...stepsOf(page));
      settled.next = page.next;
      continue;
    }
    const rest =
      page.next === undefined
        ? page
        : await engine.readSteps(id, { from: settled.next, limit: Number.MAX_SAFE_INTEGER });
    return { all: [...settled.items, ...stepsOf(rest)], settled };
  }
}

/** The run's events: those before the first unconsumed one kept, the rest read again. */
async function readEvents(
  engine: Engine,
  id: string,
  known: Settled,
  pageSize: number,
): Promise<{ all: Keyed[]; settled: Settled }> {
  const settled = { items: [...known.items], next: known.next };
  const rest: Keyed[] = [];
  for (let after: number | undefined = known.next; after !== undefined; ) {
    const page = await engine.readEvents(id, { after, limit: pageSize });
    for (const event of page.events) {
      const [item] = keyed([eventJson(event)], (j) => String(j.seq));
      if (rest.length === 0 && event.consumedBy !== undefined) {
        settled.items.push(item!);
        settled.next = event.seq;
      } else {
        rest.push(item!);
      }
    }
    after = page.next;
  }
  return { all: [...settled.items, ...rest], settled };
}
