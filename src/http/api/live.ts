// Server-Sent Events: a run, a page of runs, the workers, as they change. How updates are
// found (polling, shared per watched thing) and how reconnects resume: live/hub.ts.

import type { Context } from "hono";
import { runFeed, runsPageFeed, wholeFeed } from "../live/feeds.js";
import { ENGINE_CLOSED_PROBLEM, type Feed, isEngineClosed, type LiveEvent } from "../live/hub.js";
import { s } from "../schema.js";
import type { AppEnv } from "../security.js";
import { type ApiDeps, type Route, route } from "./route.js";
import { filterFor, listRunPage, queryKey, RUN_LIST_QUERY, type RunListQuery } from "./run-list.js";
import { mustGetRun, RUN_ID_PARAM } from "./runs.js";
import { sseResponse } from "./sse.js";
import { workersState } from "./system.js";

const LAST_EVENT_ID = {
  "last-event-id": {
    schema: s.string({ maxLength: 100 }),
    description: "Sent by EventSource on reconnect: resume after this event.",
  },
};

function stream<S>(
  c: Context<AppEnv>,
  deps: ApiDeps,
  key: string,
  makeFeed: () => Feed<S>,
  lastEventId: string | undefined,
  /** An event after which nothing more will come: the stream ends once it is written (a
   *  promise: once it says true). */
  isLast?: (e: LiveEvent) => boolean | Promise<boolean>,
): Response {
  return sseResponse(c, deps, async (session) => {
    let unsubscribe: (() => void) | undefined;
    try {
      unsubscribe = await deps.live.subscribe(key, makeFeed, lastEventId, (e) => {
        void session.send(e);
        const final = e.event === "problem" && (e.data as { final?: boolean }).final === true;
        const last = final || isLast?.(e);
        if (last === true) session.end();
        else if (last instanceof Promise) {
          last.then(
            (yes) => {
              if (yes) session.end();
            },
            () => {},
          );
        }
      });
    } catch (err) {
      void session.send({
        event: "problem",
        data: isEngineClosed(err)
          ? ENGINE_CLOSED_PROBLEM
          : { ok: false, message: "The store cannot be read" },
      });
      session.end();
    }
    await session.ended;
    unsubscribe?.();
  });
}

const EVENT_STREAM = { contentType: "text/event-stream" as const };

const liveRuns = route({
  method: "get",
  path: "/live/runs",
  operationId: "liveRuns",
  summary: "A page of runs as it changes (Server-Sent Events)",
  description:
    'Takes the filters of GET /api/runs. Events: "snapshot" {runs}, then "run" {run} for a ' +
    'run new on the page or changed, "leave" {id} for one no longer on it; "problem" ' +
    "{ok, message} when the store cannot be read (and {ok: true} when it can again), " +
    "{ok: false, final: true, message} when the server's engine has closed (the stream then " +
    "ends). Event ids resume: reconnect with Last-Event-ID to get what was missed.",
  tag: "live",
  access: "read",
  query: RUN_LIST_QUERY,
  headers: LAST_EVENT_ID,
  responses: { 200: { description: "The event stream.", ...EVENT_STREAM } },
  handle({ c, query, deps }) {
    const q = query as RunListQuery & { "last-event-id"?: string };
    const { "last-event-id": last, ...list } = q;
    // A filter that is not one (a malformed cursor) is the client's error, answered now:
    // inside the feed it would read as the store failing, again on every reconnect.
    filterFor(list);
    return stream(
      c,
      deps,
      `runs:${queryKey(list)}`,
      () => runsPageFeed(async () => (await listRunPage(deps.engine, list)).runs),
      last,
    );
  },
});

const liveRun = route({
  method: "get",
  path: "/live/runs/{id}",
  operationId: "liveRun",
  summary: "One run as it changes: status, steps, events (Server-Sent Events)",
  description:
    'Events: "snapshot" {run, steps, events}, then "run" {run}, "step" {step} (a step that ' +
    'appeared or changed: an attempt, a retry, completion), "run-event" {event} (sent or ' +
    'consumed), and "problem" as for /live/runs. Reconnect with Last-Event-ID to resume. ' +
    'A run deleted meanwhile is sent as "run" {run: null} (or a "snapshot" whose run is null), and the stream ends.',
  tag: "live",
  access: "read",
  params: RUN_ID_PARAM,
  headers: LAST_EVENT_ID,
  errors: [404],
  responses: { 200: { description: "The event stream.", ...EVENT_STREAM } },
  async handle({ c, params, query, deps }) {
    const id = params.id!;
    await mustGetRun(deps.engine, id);
    return stream(
      c,
      deps,
      `run:${id}`,
      () => runFeed(deps.engine, id),
      query["last-event-id"] as string | undefined,
      // The run was deleted (retention): its stream ends rather than poll a run that is
      // gone for as long as a page stays open (reconnecting, the client gets a 404). Said
      // by a change, or by a snapshot (a run deleted between the check above and the
      // watcher's first read never changes again), but only once the store says the run
      // is gone: the snapshot may be the reading of a watcher nobody listened to for a
      // while, and a change may be replayed from its ring to a client reconnecting with an
      // older Last-Event-ID, after the run was started again under its id (a store that
      // cannot be read keeps the stream open).
      (e) =>
        (e.event === "run" || e.event === "snapshot") &&
        (e.data as { run?: unknown }).run === null &&
        deps.engine.getRun(id).then((run) => run === undefined),
    );
  },
});

const liveWorkers = route({
  method: "get",
  path: "/live/workers",
  operationId: "liveWorkers",
  summary: "Workers and unserved runs as they change (Server-Sent Events)",
  description:
    'Events: "snapshot" and then "workers", each with the body of GET /api/workers; ' +
    '"problem" as for /live/runs.',
  tag: "live",
  access: "read",
  headers: LAST_EVENT_ID,
  responses: { 200: { description: "The event stream.", ...EVENT_STREAM } },
  handle({ c, query, deps }) {
    return stream(
      c,
      deps,
      "workers",
      () => wholeFeed("workers", () => workersState(deps.engine)),
      query["last-event-id"] as string | undefined,
    );
  },
});

export const liveRoutes: Route[] = [liveRuns, liveRun, liveWorkers];
