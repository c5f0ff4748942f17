// One Server-Sent Events response, as every live route sends it: events go out in order
// (a write that fails ends the stream), a comment every 15 s keeps proxies from closing an
// idle stream, and the stream ends when the client goes away, the app closes, or the route
// ends it.
//
// Writes wait for the client to take what was written before (back-pressure), so events a
// client does not read queue here. The queue is bounded (backlog.ts): a stream whose
// unsent events pass the limit is cut off at once, its queue dropped. Nothing after a
// dropped event is ever written, so what the client got is a prefix of what was sent, and
// EventSource reconnects with the last id it received: the feeds resume from there (or
// send a fresh snapshot), as after any broken connection.

import type { Context } from "hono";
import { streamSSE } from "hono/streaming";
import { Backlog } from "../live/backlog.js";
import type { LiveEvent } from "../live/hub.js";
import type { AppEnv } from "../security.js";
import type { ApiDeps } from "./route.js";

const PING_MS = 15_000;
/** How long EventSource waits before it reconnects. */
const RETRY_MS = 2_000;

export interface SseSession {
  /** Queues an event; settles once it is written, or the stream has ended. Never rejects.
   *  An event that takes the unsent backlog past its limit ends the stream instead, and
   *  what was queued is dropped (see backlog.ts). */
  send(e: LiveEvent): Promise<void>;
  /** Ends the stream (what is queued is still written). */
  end(): void;
  /** Settles when the stream ends, whoever ends it. */
  readonly ended: Promise<void>;
  isOpen(): boolean;
  /** Bytes queued and not yet taken by the client. */
  unsentBytes(): number;
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
    /** Set when the backlog overflowed: what is still queued is not written. */
    let cutOff = false;
    let resolveEnded!: () => void;
    const ended = new Promise<void>((resolve) => {
      resolveEnded = resolve;
    });
    const end = () => {
      open = false;
      resolveEnded();
    };
    const backlog = new Backlog();
    let writing: Promise<void> = sse.write(`retry: ${RETRY_MS}\n\n`).then(() => {}, end);
    const write = (text: string): Promise<void> => {
      const bytes = Buffer.byteLength(text);
      backlog.add(bytes);
      writing = writing
        .then(() => (cutOff ? undefined : sse.write(text)))
        .then(
          () => backlog.remove(bytes),
          () => {
            backlog.remove(bytes);
            end();
          },
        );
      return writing;
    };
    const send = (e: LiveEvent): Promise<void> => {
      if (!open) return writing;
      let text: string;
      try {
        text = sseText(e);
      } catch {
        // An id or name with a line break would forge events: none is written.
        end();
        return writing;
      }
      if (backlog.wouldOverflow(Buffer.byteLength(text))) {
        // The client does not take what it is sent: end its stream rather than hold an
        // ever longer queue. Aborting fails the write it is stuck on; the rest is skipped.
        cutOff = true;
        end();
        sse.abort();
        return writing;
      }
      return write(text);
    };
    sse.onAbort(end);
    const offClose = deps.live.onClose(end);
    // A ping is for an idle stream: one with writes queued is not idle.
    const ping = setInterval(() => {
      if (open && backlog.isEmpty()) void write(": ping\n\n");
    }, PING_MS);
    try {
      await body({ send, end, ended, isOpen: () => open, unsentBytes: () => backlog.bytes });
    } finally {
      clearInterval(ping);
      offClose();
      await writing;
    }
  });
}

/** An event as the text of the stream (hono's writeSSE, made up front so its size is
 *  known: data split into lines, no line break in the event's name or id). */
function sseText(e: LiveEvent): string {
  for (const [field, value] of [
    ["event", e.event],
    ["id", e.id],
  ] as const) {
    if (value !== undefined && /[\r\n]/.test(value)) {
      throw new TypeError(`live event ${field} ${JSON.stringify(value)} holds a line break`);
    }
  }
  const data = (JSON.stringify(e.data) ?? "null")
    .split(/\r\n|\r|\n/)
    .map((line) => `data: ${line}`)
    .join("\n");
  return `event: ${e.event}\n${data}\n${e.id !== undefined ? `id: ${e.id}\n` : ""}\n`;
}
