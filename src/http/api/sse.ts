// One Server-Sent Events response, as every live route sends it: events go out in order
// (a write that fails ends the stream), a comment every 15 s keeps proxies from closing an
// idle stream, and the stream ends when the client goes away, the app closes, or the route
// ends it.

import type { Context } from "hono";
import { streamSSE } from "hono/streaming";
import type { LiveEvent } from "../live/hub.js";
import type { AppEnv } from "../security.js";
import type { ApiDeps } from "./route.js";

const PING_MS = 15_000;
/** How long EventSource waits before it reconnects. */
const RETRY_MS = 2_000;

export interface SseSession {
  /** Queues an event; settles once it is written, or the stream has ended. Never rejects. */
  send(e: LiveEvent): Promise<void>;
  /** Ends the stream (what is queued is still written). */
  end(): void;
  /** Settles when the stream ends, whoever ends it. */
  readonly ended: Promise<void>;
  isOpen(): boolean;
}

/** Answers with an event stream that `body` writes to; `body` returns when it is done with
 *  the session (usually after awaiting `ended`). */
export function sseResponse(
  c: Context<AppEnv>,
  deps: Pick<ApiDeps, "live">,
  body: (session: SseSession) => Promise<void>,
): Response {
  c.header("x-accel-buffering", "no");
  if (c.req.method === "HEAD") {
    // Hono answers HEAD with the GET handler's response without its body, and never
    // cancels that body: a stream opened here would be read by nobody and never end (its
    // subscription polling the store, its pings, its queue of unwritten events).
    return c.body(null, 200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  }
  return streamSSE(c, async (sse) => {
    let open = true;
    let resolveEnded!: () => void;
    const ended = new Promise<void>((resolve) => {
      resolveEnded = resolve;
    });
    const end = () => {
      open = false;
      resolveEnded();
    };
    let writing: Promise<void> = sse.write(`retry: ${RETRY_MS}\n\n`).then(() => {}, end);
    const write = (fn: () => Promise<unknown>): Promise<void> => {
      writing = writing.then(fn).then(() => {}, end);
      return writing;
    };
    const send = (e: LiveEvent) =>
      write(() =>
        sse.writeSSE({
          ...(e.id !== undefined ? { id: e.id } : {}),
          event: e.event,
          data: JSON.stringify(e.data),
        }),
      );
    sse.onAbort(end);
    const offClose = deps.live.onClose(end);
    const ping = setInterval(() => write(() => sse.write(": ping\n\n")), PING_MS);
    try {
      await body({ send, end, ended, isOpen: () => open });
    } finally {
      clearInterval(ping);
      offClose();
      await writing;
    }
  });
}
