// Helpers for the HTTP tests: one seeded store shared by the tests of a file (seeding takes
// seconds; each file's tests then read it and act on chosen runs), JSON requests against
// an app, and a Server-Sent Events reader (Node 20 has no EventSource).

import { afterAll } from "vitest";
import {
  createEngine,
  type Engine,
  type EngineOptions,
  type Store,
  sqliteStore,
} from "../../src/index.js";
import { postgresStore } from "../../src/store/postgres/postgres-store.js";
import { createVirtualClock } from "../../src/testing/index.js";
import { type Backend, type Harness, pgUrl } from "./engines.js";
import { testSchema } from "./postgres.js";
import { tempDbPath } from "./sqlite.js";

/** A harness whose storage and engines live until the file's tests are done. */
export function sharedHarness(backend: Backend): Harness {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterAll(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });
  const clock = createVirtualClock();
  let store: () => Store;
  if (backend === "sqlite") {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    store = () => sqliteStore(db.path);
  } else {
    const url = pgUrl;
    if (!url) throw new Error("postgres harness without a database");
    const { schema, drop } = testSchema(url, "cairn_http");
    cleanups.push(drop);
    store = () => postgresStore(url, { schema });
  }
  return {
    backend,
    clock,
    store,
    engine(workflows, opts: EngineOptions = {}): Engine {
      const e = createEngine({ store: store(), workflows, clock, pollIntervalMs: 10, ...opts });
      cleanups.push(() => e.close());
      return e;
    },
    onCleanup: (fn) => cleanups.push(fn),
  };
}

export interface JsonAnswer<T = Record<string, unknown>> {
  status: number;
  body: T;
  headers: Headers;
}

type Fetch = (request: Request) => Response | Promise<Response>;

/** A JSON request to an app (its fetch), on http://localhost unless `url` is absolute. */
export async function call<T = Record<string, unknown>>(
  fetch: Fetch,
  method: string,
  url: string,
  o: { body?: unknown; headers?: Record<string, string>; raw?: string } = {},
): Promise<JsonAnswer<T>> {
  const headers: Record<string, string> = { ...(o.headers ?? {}) };
  let body: string | undefined = o.raw;
  if (o.body !== undefined) {
    body = JSON.stringify(o.body);
    headers["content-type"] ??= "application/json";
  }
  const res = await fetch(
    new Request(url.startsWith("http") ? url : `http://localhost${url}`, {
      method,
      headers,
      ...(body !== undefined ? { body } : {}),
    }),
  );
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: keep the text
  }
  return { status: res.status, body: parsed as T, headers: res.headers };
}

export interface SseMessage {
  id?: string;
  event: string;
  data: unknown;
}

export interface SseReader {
  readonly messages: SseMessage[];
  /** Resolves with the first message (at index >= `from`) that matches, within a bound. */
  next(
    match: (m: SseMessage) => boolean,
    what: string,
    from?: number,
    timeoutMs?: number,
  ): Promise<SseMessage>;
  readonly status: number;
  close(): void;
}

/** Opens an event stream with fetch and parses it as EventSource does. */
export async function openStream(
  url: string,
  headers: Record<string, string> = {},
): Promise<SseReader> {
  const controller = new AbortController();
  const res = await fetch(url, {
    headers: { accept: "text/event-stream", ...headers },
    signal: controller.signal,
  });
  const messages: SseMessage[] = [];
  const waiters = new Set<() => void>();
  const notify = () => {
    for (const w of [...waiters]) w();
  };
  if (res.ok && res.body) {
    void (async () => {
      const decoder = new TextDecoder();
      let buffer = "";
      let current: { id?: string; event?: string; data: string[] } = { data: [] };
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          buffer += decoder.decode(chunk, { stream: true });
          let nl = buffer.indexOf("\n");
          while (nl >= 0) {
            const line = buffer.slice(0, nl).replace(/\r$/, "");
            buffer = buffer.slice(nl + 1);
            if (line === "") {
              if (current.data.length > 0) {
                messages.push({
                  ...(current.id !== undefined ? { id: current.id } : {}),
                  event: current.event ?? "message",
                  data: JSON.parse(current.data.join("\n")),
                });
                notify();
              }
              current = { data: [] };
            } else if (!line.startsWith(":")) {
              const colon = line.indexOf(":");
              const field = colon < 0 ? line : line.slice(0, colon);
              const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
              if (field === "data") current.data.push(value);
              else if (field === "event") current.event = value;
              else if (field === "id") current.id = value;
            }
            nl = buffer.indexOf("\n");
          }
        }
      } catch {
        // closed
      }
    })();
  }
  return {
    messages,
    status: res.status,
    close: () => controller.abort(),
    next(match, what, from = 0, timeoutMs = 20_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const found = messages.slice(from).find(match);
          if (found) {
            waiters.delete(check);
            clearTimeout(timer);
            resolve(found);
          }
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(
            new Error(
              `timed out waiting for an event: ${what}; got ${JSON.stringify(messages.map((m) => m.event))}`,
            ),
          );
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
  };
}
