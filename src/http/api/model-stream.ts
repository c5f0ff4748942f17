// A run's model stream: the parts of its streamed model calls (cairn/ai with
// `stream: true` forwards them to the store while the call runs), as a JSON page and as
// Server-Sent Events. The stream's offsets are durable and the same in every process, so
// an event's id is its offset: a client that reconnects with Last-Event-ID (to this server
// or another one, after a restart) gets exactly the chunks after it.

import type { Context } from "hono";
import { decodeChunk, nextOffset, STREAM_PAGE } from "../../ai/run-stream.js";
import type { Engine, StreamChunk } from "../../index.js";
import { HttpError } from "../errors.js";
import { toJsonValue } from "../json.js";
import { MAX_REPLAY_BYTES } from "../live/backlog.js";
import { ENGINE_CLOSED_PROBLEM } from "../live/hub.js";
import type { StreamFollower } from "../live/stream-tail.js";
import { s } from "../schema.js";
import type { AppEnv } from "../security.js";
import { ref } from "./models.js";
import { type ApiDeps, json, type Route, route } from "./route.js";
import { mustGetRun, RUN_ID_PARAM } from "./runs.js";
import { type SseSession, sseResponse } from "./sse.js";

/** A stored chunk as JSON; one that is not what cairn/ai writes is shown as undecodable. */
export function chunkJson(c: StreamChunk): Record<string, unknown> {
  try {
    const d = decodeChunk(c.offset, c.data);
    if (typeof d.call === "string" && typeof d.attempt === "number" && d.part) {
      return {
        offset: c.offset,
        call: d.call,
        name: String(d.name ?? ""),
        generation: d.generation,
        attempt: d.attempt,
        part: toJsonValue(d.part),
      };
    }
  } catch {
    // fall through
  }
  return {
    offset: c.offset,
    call: "",
    name: "",
    generation: 0,
    attempt: 1,
    part: { type: "undecodable" },
  };
}

const FROM = {
  from: {
    schema: s.integer({ minimum: 0 }),
    description: "The first offset to read (default 0).",
  },
};

const getStream = route({
  method: "get",
  path: "/runs/{id}/stream",
  operationId: "getRunStream",
  summary: "A page of a run's model stream (streamed model calls, cairn/ai)",
  description:
    "Chunks in offset order. Each names its model call, generation and attempt: a call retried " +
    "after an error or a crash streams again under a higher attempt, one made again after a " +
    "resume of its failed run under a higher generation (attempts start again at 1); a later " +
    "(generation, attempt) replaces what the earlier showed. `next` is the offset to ask for next.",
  tag: "runs",
  access: "read",
  params: RUN_ID_PARAM,
  query: {
    ...FROM,
    limit: {
      schema: s.integer({ minimum: 1, maximum: STREAM_PAGE }),
      description: `At most this many chunks (default ${STREAM_PAGE}).`,
    },
  },
  errors: [404],
  responses: {
    200: {
      description: "The chunks.",
      schema: s.object({ chunks: s.array(ref.StreamChunk), next: s.integer() }, ["chunks", "next"]),
    },
  },
  async handle({ c, params, query, deps }) {
    const from = (query.from as number | undefined) ?? 0;
    const chunks = await deps.engine.readStream(params.id!, {
      from,
      limit: (query.limit as number | undefined) ?? STREAM_PAGE,
    });
    return json(c, 200, { chunks: chunks.map(chunkJson), next: nextOffset(chunks, from) });
  },
});

/** Where a (re)connecting client starts: after its Last-Event-ID, else at `from`. */
function startOffset(lastEventId: string | undefined, from: number | undefined): number {
  if (lastEventId !== undefined) {
    if (!/^\d{1,15}$/.test(lastEventId)) {
      throw new HttpError(
        400,
        "VALIDATION",
        'header "last-event-id" must be the offset of a chunk of this stream (a whole number)',
      );
    }
    return Number(lastEventId) + 1;
  }
  return from ?? 0;
}

/** Sends the run's chunks from `start` on: first what is stored, a page at a time at the
 *  pace the client takes them; then, from where that ended, the run's shared tail. */
function streamChunks(c: Context<AppEnv>, deps: ApiDeps, id: string, start: number): Response {
  return sseResponse(c, deps, async (session) => {
    const follower: StreamFollower = {
      next: await catchUp(session, deps.engine, id, start),
      chunk: (ch) => void session.send(chunkEvent(ch)),
      end(status, next) {
        void session.send({ event: "end", data: { status, next } });
        session.end();
      },
      problem(ok) {
        const data = ok ? { ok } : { ok, message: "The store cannot be read; retrying" };
        void session.send({ event: "problem", data });
      },
      engineClosed() {
        void session.send({ event: "problem", data: ENGINE_CLOSED_PROBLEM });
        session.end();
      },
    };
    const unfollow = session.isOpen() ? deps.streams.follow(id, follower) : undefined;
    if (!unfollow) return session.end();
    await session.ended;
    unfollow();
  });
}

const chunkEvent = (ch: StreamChunk) => ({
  id: String(ch.offset),
  event: "chunk",
  data: chunkJson(ch),
});

/** The stored chunks from `from` on, sent as long as the client is there; the offset after
 *  the last one sent. A store that fails here is left to the tail (it retries and says so).
 *  It waits for the client whenever half the stream's backlog limit is queued, so a page of
 *  large chunks never gets the stream cut off (api/sse.ts): a reconnect starts here again. */
async function catchUp(
  session: SseSession,
  engine: Engine,
  id: string,
  from: number,
): Promise<number> {
  try {
    while (session.isOpen()) {
      const chunks = await engine.readStream(id, { from, limit: STREAM_PAGE });
      let sent: Promise<void> | undefined;
      for (const ch of chunks) {
        sent = session.send(chunkEvent(ch));
        if (session.unsentBytes() >= MAX_REPLAY_BYTES) await sent;
      }
      from = nextOffset(chunks, from);
      await sent;
      if (chunks.length < STREAM_PAGE) break;
    }
  } catch {
    // The tail reads from here again.
  }
  return from;
}

const liveStream = route({
  method: "get",
  path: "/live/runs/{id}/stream",
  operationId: "liveRunStream",
  summary: "A run's model stream as it is written (Server-Sent Events)",
  description:
    'Events: "chunk" (a StreamChunk; its event id is its offset), "end" {status, next} once ' +
    "the run has finished and every chunk was sent (the stream then closes: a client should " +
    'not reconnect), "problem" {ok, message} while the store cannot be read ({ok: false, ' +
    "final: true, message} when the server's engine has closed: the stream then ends). Reconnect with " +
    "Last-Event-ID (the last offset received) to get exactly the chunks after it.",
  tag: "live",
  access: "read",
  params: RUN_ID_PARAM,
  query: FROM,
  headers: {
    "last-event-id": {
      schema: s.string({ maxLength: 100 }),
      description: "Sent by EventSource on reconnect: resume after this offset.",
    },
  },
  errors: [404],
  responses: { 200: { description: "The event stream.", contentType: "text/event-stream" } },
  async handle({ c, params, query, deps }) {
    const id = params.id!;
    const start = startOffset(
      query["last-event-id"] as string | undefined,
      query.from as number | undefined,
    );
    await mustGetRun(deps.engine, id);
    return streamChunks(c, deps, id, start);
  },
});

export const modelStreamRoutes: Route[] = [getStream, liveStream];
