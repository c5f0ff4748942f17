// What the live streams watch (see hub.ts for how watching works):
// - one run: "snapshot" {run, steps, events}, then "run" {run} when the run changes,
//   "step" {step} when a step appears or changes (an attempt, a retry, completion),
//   "run-event" {event} when an event is sent or consumed (run-feed.ts: each poll reads
//   only what can still change);
// - a page of runs (a list with its filters): "snapshot" {runs}, then "run" {run} for a
//   run that is new on the page or changed, "leave" {id} for one no longer on it;
// - the workers: "snapshot" and then "workers", each {workers, unserved}.
// Every message carries complete objects, so a client applies it by replacing by key.

import type { Feed } from "./hub.js";
import { type Json, type Keyed, keyed, upserts } from "./keyed.js";

export { runFeed } from "./run-feed.js";

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
