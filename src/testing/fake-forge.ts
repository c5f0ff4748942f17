// A fake "forge": a tiny pull-request service on 127.0.0.1 for tests and examples that
// must COUNT real side effects. Like many real systems it has no idempotency keys: every
// POST /pulls creates a new pull request, so a caller that retries blindly opens
// duplicates. What it does have is a searchable `marker`, which is what `ctx.effect`'s
// `reconcile` needs. Every request is written to a ledger, and failures can be injected
// (rate limits, server errors, and "created, but the response was lost").
//
// The client talks plain HTTP through fetch, so a worker in another process can use it
// given only the URL (`forgeClient(url)`).

import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface PullRequest {
  number: number;
  url: string;
  title: string;
  body: string;
  /** The caller's search handle (e.g. an effect's key); absent when none was given. */
  marker?: string;
  /** ISO timestamp. */
  createdAt: string;
}

export interface NewPullRequest {
  title: string;
  body: string;
  marker?: string;
}

/** One request the forge received, in arrival order. */
export interface ForgeLedgerEntry {
  method: string;
  /** Path without the query string, e.g. "/pulls". */
  path: string;
  /** The marker sent with a POST, or searched for with GET /pulls?marker=. */
  marker?: string;
  /** HTTP status the forge answered with. */
  status: number;
  /** The pull request a POST created, if it created one. */
  pull?: number;
  /** Epoch milliseconds at arrival. */
  at: number;
}

export interface RequestOptions {
  signal?: AbortSignal;
}

/** Speaks HTTP to a fake forge; works from any process that knows its URL. */
export interface ForgeClient {
  readonly url: string;
  /** POST /pulls. Rejects with `ForgeHttpError` on a non-2xx answer. */
  createPullRequest(input: NewPullRequest, options?: RequestOptions): Promise<PullRequest>;
  /** GET /pulls?marker=: the first pull request with this marker, or undefined. */
  findPullRequestByMarker(
    marker: string,
    options?: RequestOptions,
  ): Promise<PullRequest | undefined>;
  /** GET /pulls: every pull request, oldest first. */
  listPullRequests(options?: RequestOptions): Promise<PullRequest[]>;
}

export interface FailureOptions {
  /** Sent as the Retry-After header (seconds). Default 1 for status 429, none otherwise. */
  retryAfterSeconds?: number;
  /** Create the pull request anyway and answer with the failure: the side effect happened
   *  but the caller cannot know (a lost response). Default false. */
  afterCreate?: boolean;
}

export interface FakeForge extends ForgeClient {
  /** Every request received, live (the array grows as requests arrive). */
  readonly ledger: readonly ForgeLedgerEntry[];
  /** Every pull request created, oldest first (a copy). */
  pulls(): PullRequest[];
  /** The next `n` POST /pulls answer `status` (e.g. 429 or 500) instead of succeeding. */
  failNext(n: number, status: number, options?: FailureOptions): void;
  /** Stops the server and drops open connections. Safe to call twice. */
  close(): Promise<void>;
}

export interface FakeForgeOptions {
  /** Runs after a pull request was created and before the response is sent; the response
   *  waits for it. Use it to crash a caller between a side effect and its checkpoint. */
  onCreate?: (pull: PullRequest) => void | Promise<void>;
}

/** A non-2xx answer from the forge. */
export class ForgeHttpError extends Error {
  readonly status: number;
  /** From the Retry-After header, in milliseconds, when the forge sent one. */
  readonly retryAfterMs: number | undefined;
  constructor(message: string, status: number, retryAfterMs?: number) {
    super(message);
    this.name = "ForgeHttpError";
    this.status = status;
    this.retryAfterMs = retryAfterMs;
  }
}

const MAX_BODY_BYTES = 1 << 20;

interface Failure {
  status: number;
  retryAfterSeconds: number | undefined;
  afterCreate: boolean;
}

export async function startFakeForge(options: FakeForgeOptions = {}): Promise<FakeForge> {
  const ledger: ForgeLedgerEntry[] = [];
  const pulls: PullRequest[] = [];
  const failures: Failure[] = [];
  let base = "";

  function send(res: ServerResponse, status: number, body: unknown, headers = {}): void {
    res.writeHead(status, { "content-type": "application/json", ...headers });
    res.end(JSON.stringify(body));
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", base);
    const entry: ForgeLedgerEntry = {
      method: req.method ?? "GET",
      path: url.pathname,
      status: 0,
      at: Date.now(),
    };
    ledger.push(entry);
    const reply = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      entry.status = status;
      send(res, status, body, headers);
    };

    if (url.pathname === "/pulls" && req.method === "GET") {
      const marker = url.searchParams.get("marker");
      if (marker === null) return reply(200, pulls);
      entry.marker = marker;
      return reply(
        200,
        pulls.filter((p) => p.marker === marker),
      );
    }
    if (url.pathname === "/pulls" && req.method === "POST") {
      let input: unknown;
      try {
        input = JSON.parse(await readBody(req));
      } catch (err) {
        return reply(400, { error: `invalid JSON body: ${(err as Error).message}` });
      }
      const problem = validate(input);
      if (problem) return reply(400, { error: problem });
      const { title, body, marker } = input as NewPullRequest;
      if (marker !== undefined) entry.marker = marker;
      const failure = failures.shift();
      if (failure && !failure.afterCreate) return replyFailure(failure);
      const pull: PullRequest = {
        number: pulls.length + 1,
        url: `${base}/pulls/${pulls.length + 1}`,
        title,
        body,
        ...(marker !== undefined ? { marker } : {}),
        createdAt: new Date().toISOString(),
      };
      pulls.push(pull);
      entry.pull = pull.number;
      await options.onCreate?.({ ...pull });
      if (failure) return replyFailure(failure);
      return reply(201, pull);
    }
    const one = /^\/pulls\/(\d+)$/.exec(url.pathname);
    if (one && req.method === "GET") {
      const pull = pulls.find((p) => p.number === Number(one[1]));
      return pull ? reply(200, pull) : reply(404, { error: "no such pull request" });
    }
    if (url.pathname === "/pulls" || one) return reply(405, { error: "method not allowed" });
    return reply(404, { error: "not found" });

    function replyFailure(f: Failure): void {
      const headers: Record<string, string> = {};
      if (f.retryAfterSeconds !== undefined) headers["retry-after"] = String(f.retryAfterSeconds);
      reply(f.status, { error: `injected failure (${f.status})` }, headers);
    }
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err) => {
      if (!res.headersSent) send(res, 500, { error: (err as Error).message });
      else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const client = forgeClient(base);

  let closing: Promise<void> | undefined;
  return {
    ...client,
    url: base,
    ledger,
    pulls: () => pulls.map((p) => ({ ...p })),
    failNext(n, status, opts = {}) {
      if (!Number.isInteger(n) || n < 0) {
        throw new TypeError(`failNext(): n must be a whole number >= 0 (got ${n})`);
      }
      if (!Number.isInteger(status) || status < 400 || status > 599) {
        throw new TypeError(`failNext(): status must be an HTTP error status (got ${status})`);
      }
      const retryAfterSeconds = opts.retryAfterSeconds ?? (status === 429 ? 1 : undefined);
      for (let i = 0; i < n; i++) {
        failures.push({ status, retryAfterSeconds, afterCreate: opts.afterCreate ?? false });
      }
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        // fetch keeps connections alive; without this, close() waits for them to idle out.
        server.closeAllConnections();
      });
      return closing;
    },
  };
}

/** A client for a fake forge running at `url` (in this or another process). */
export function forgeClient(url: string): ForgeClient {
  const base = url.replace(/\/+$/, "");

  async function call<T>(
    method: string,
    path: string,
    body: unknown,
    options: RequestOptions | undefined,
  ): Promise<T> {
    const res = await fetch(base + path, {
      method,
      ...(body !== undefined
        ? { body: JSON.stringify(body), headers: { "content-type": "application/json" } }
        : {}),
      ...(options?.signal ? { signal: options.signal } : {}),
    });
    const text = await res.text();
    if (!res.ok) {
      const header = res.headers.get("retry-after");
      const seconds = header === null ? Number.NaN : Number(header);
      throw new ForgeHttpError(
        `Forge answered ${method} ${path} with HTTP ${res.status}`,
        res.status,
        Number.isFinite(seconds) ? seconds * 1000 : undefined,
      );
    }
    return JSON.parse(text) as T;
  }

  return {
    url: base,
    createPullRequest: (input, options) => call<PullRequest>("POST", "/pulls", input, options),
    async findPullRequestByMarker(marker, options) {
      const found = await call<PullRequest[]>(
        "GET",
        `/pulls?marker=${encodeURIComponent(marker)}`,
        undefined,
        options,
      );
      return found[0];
    },
    listPullRequests: (options) => call<PullRequest[]>("GET", "/pulls", undefined, options),
  };
}

function validate(input: unknown): string | undefined {
  if (typeof input !== "object" || input === null) return "body must be a JSON object";
  const { title, body, marker } = input as Record<string, unknown>;
  if (typeof title !== "string" || title.length === 0) return "title must be a non-empty string";
  if (typeof body !== "string") return "body must be a string";
  if (marker !== undefined && typeof marker !== "string") return "marker must be a string";
  return undefined;
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      // Keep draining an oversized body so the 400 answer can still be read.
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
    });
    req.on("end", () => {
      if (size > MAX_BODY_BYTES) reject(new Error(`body larger than ${MAX_BODY_BYTES} bytes`));
      else resolve(Buffer.concat(chunks).toString("utf8"));
    });
    req.on("error", reject);
  });
}
