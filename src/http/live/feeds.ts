// What the live streams watch (see hub.ts for how watching works):
// - one run: "snapshot" {run, steps, events}, then "run" {run} when the run changes,
//   "step" {step} when a step appears or changes (an attempt, a retry, completion),
//   "run-event" {event} when an event is sent or consumed;
// - a page of runs (a list with its filters): "snapshot" {runs}, then "run" {run} for a
//   run that is new on the page or changed, "leave" {id} for one no longer on it;
// - the workers: "snapshot" and then "workers", each {workers, unserved}.
// Every message carries complete objects, so a client applies it by replacing by key.

import type { Engine } from "../../index.js";
import { eventJson, runJson, stepJson } from "../json.js";
import type { Feed, LiveMessage } from "./hub.js";

type Json = Record<string, unknown>;

interface Keyed {
  key: string;
  json: Json;
  sig: string;
}

function keyed(items: Json[], keyOf: (j: Json) => string): Keyed[] {
  return items.map((json) => ({ key: keyOf(json), json, sig: JSON.stringify(json) }));
}

/** Messages for the items of `next` that are new or differ from `prev`. */
function upserts(prev: Keyed[], next: Keyed[], make: (j: Json) => LiveMessage): LiveMessage[] {
  const before = new Map(prev.map((k) => [k.key, k.sig]));
  return next.filter((k) => before.get(k.key) !== k.sig).map((k) => make(k.json));
}

interface RunState {
  run: Json | null;
  runSig: string;
  steps: Keyed[];
  events: Keyed[];
}

export function runFeed(engine: Engine, id: string): Feed<RunState> {
  return {
    async read() {
      // The run first, then what it holds: a status read before the steps never runs ahead
      // of them (read together, on PostgreSQL's separate connections, "completed" could
      // arrive before the step recorded just before it).
      const run = await engine.getRun(id);
      const [steps, events] = await Promise.all([engine.getSteps(id), engine.listEvents(id)]);
      const runJ = run ? runJson(run) : null;
      return {
        run: runJ,
        runSig: JSON.stringify(runJ),
        steps: keyed(steps.map(stepJson), (j) => j.key as string),
        events: keyed(events.map(eventJson), (j) => String(j.seq)),
      };
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

interface PageState {
  runs: Keyed[];
}

export function runsPageFeed(read: () => Promise<Json[]>): Feed<PageState> {
  return {
    async read() {
      return { runs: keyed(await read(), (j) => j.id as string) };
    },
    snapshot(s) {
      return { event: "snapshot", data: { runs: s.runs.map((k) => k.json) } };
    },
    changes(prev, next) {
      const out = upserts(prev.runs, next.runs, (run) => ({ event: "run", data: { run } }));
      const now = new Set(next.runs.map((k) => k.key));
      for (const k of prev.runs) {
        if (!now.has(k.key)) out.push({ event: "leave", data: { id: k.key } });
      }
      return out;
    },
  };
}

interface WholeState {
  data: Json;
  sig: string;
}

/** A feed whose state is one value, sent whole whenever it changes. */
export function wholeFeed(event: string, read: () => Promise<Json>): Feed<WholeState> {
  return {
    async read() {
      const data = await read();
      return { data, sig: JSON.stringify(data) };
    },
    snapshot(s) {
      return { event: "snapshot", data: s.data };
    },
    changes(prev, next) {
      return prev.sig === next.sig ? [] : [{ event, data: next.data }];
    },
  };
}
