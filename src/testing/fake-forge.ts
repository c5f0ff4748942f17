// A fake "forge": a tiny pull-request service on 127.0.0.1 for tests and examples that
// must COUNT real side effects. Like many real systems it has no idempotency keys: every
// POST /pulls creates a new pull request, so a caller that retries blindly opens
// duplicates. What it does have is a searchable `marker`, which is what `ctx.effect`'s
// `reconcile` needs. A pull request can be merged once (a second merge is refused, as
// GitHub's is, so a merge is reconciled by reading the pull request). Every request is
// written to a ledger, and failures can be injected (rate limits, server errors, and
// "created, but the response was lost").
//
// The client talks plain HTTP through fetch, so a worker in another process can use it
// given only the URL (`forgeClient(url)`).

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
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
  merged: boolean;
  /** ISO timestamp, once merged. */
  mergedAt?: string;
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
  /** The pull request a POST created or merged, if it did. */
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
  /** GET /pulls/:n: the pull request, or undefined if there is none. */
  getPullRequest(number: number, options?: RequestOptions): Promise<PullRequest | undefined>;
  /** POST /pulls/:n/merge. Rejects with `ForgeHttpError` 405 if it is merged already, 404
   *  if there is no such pull request. */
  mergePullRequest(number: number, options?: RequestOptions): Promise<PullRequest>;
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
  /** Runs after a pull request was merged and before the response is sent. */
  onMerge?: (pull: PullRequest) => void | Promise<void>;
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

/** What the forge holds: every request received, the pull requests, the failures still to
 *  inject, and its own address (known once it listens). */
interface ForgeState {
  readonly ledger: ForgeLedgerEntry[];
  readonly pulls: PullRequest[];
  readonly failures: Failure[];
  base: string;
  readonly options: FakeForgeOptions;
}

/** Answers a request and writes the status into its ledger entry. */
type Reply = (status: number, body: unknown, headers?: Record<string, string>) => void;

export async function startFakeForge(options: FakeForgeOptions = {}): Promise<FakeForge> {
  const forge: ForgeState = { ledger: [], pulls: [], failures: [], base: "", options };
  const server = createServer((req, res) => {
    handle(forge, req, res).catch((err) => {
      if (!res.headersSent) send(res, 500, { error: (err as Error).message });
      else res.destroy();
    });
  });
  await listen(server);
  forge.base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const client = forgeClient(forge.base);

  let closing: Promise<void> | undefined;
  return {
    ...client,
    url: forge.base,
    ledger: forge.ledger,
    pulls: () => forge.pulls.map((p) => ({ ...p })),
    failNext(n, status, opts = {}) {
      if (!Number.isInteger(n) || n < 0) {
        throw new TypeError(`failNext(): n must be a whole number >= 0 (got ${n})`);
      }
      if (!Number.isInteger(status) || status < 400 || status > 599) {
        throw new TypeError(`failNext(): status must be an HTTP error status (got ${status})`);
      }
      const retryAfterSeconds = opts.retryAfterSeconds ?? (status === 429 ? 1 : undefined);
      for (let i = 0; i < n; i++) {
        forge.failures.push({ status, retryAfterSeconds, afterCreate: opts.afterCreate ?? false });
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

function listen(server: Server): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
}

function send(res: ServerResponse, status: number, body: unknown, headers = {}): void {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

/** Routes one request, after writing it to the ledger. */
async function handle(forge: ForgeState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? "/", forge.base);
  const entry: ForgeLedgerEntry = {
    method: req.method ?? "GET",
    path: url.pathname,
    status: 0,
    at: Date.now(),
  };
  forge.ledger.push(entry);
  const reply: Reply = (status, body, headers = {}) => {
    entry.status = status;
    send(res, status, body, headers);
  };

  if (url.pathname === "/pulls" && req.method === "GET") {
    const marker = url.searchParams.get("marker");
    if (marker === null) return reply(200, forge.pulls);
    entry.marker = marker;
    return reply(
      200,
      forge.pulls.filter((p) => p.marker === marker),
    );
  }
  if (url.pathname === "/pulls" && req.method === "POST") {
    return createPull(forge, req, entry, reply);
  }
  const one = /^\/pulls\/(\d+)$/.exec(url.pathname);
  if (one && req.method === "GET") {
    const pull = forge.pulls.find((p) => p.number === Number(one[1]));
    return pull ? reply(200, pull) : reply(404, { error: "no such pull request" });
  }
  const merge = /^\/pulls\/(\d+)\/merge$/.exec(url.pathname);
  if (merge && req.method === "POST") return mergePull(forge, Number(merge[1]), entry, reply);
  if (url.pathname === "/pulls" || one || merge) {
    return reply(405, { error: "method not allowed" });
  }
  return reply(404, { error: "not found" });
}

/** POST /pulls: creates a pull request, unless a failure is due (which may create it
 *  anyway and lose the answer). */
async function createPull(
  forge: ForgeState,
  req: IncomingMessage,
  entry: ForgeLedgerEntry,
  reply: Reply,
): Promise<void> {
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
  const failure = forge.failures.shift();
  if (failure && !failure.afterCreate) return replyFailure(reply, failure);
  const { pulls } = forge;
  const pull: PullRequest = {
    number: pulls.length + 1,
    url: `${forge.base}/pulls/${pulls.length + 1}`,
    title,
    body,
    ...(marker !== undefined ? { marker } : {}),
    createdAt: new Date().toISOString(),
    merged: false,
  };
  pulls.push(pull);
  entry.pull = pull.number;
  await forge.options.onCreate?.({ ...pull });
  if (failure) return replyFailure(reply, failure);
  return reply(201, pull);
}

/** POST /pulls/:n/merge: merges once; a second merge is refused, as GitHub's is. */
async function mergePull(
  forge: ForgeState,
  number: number,
  entry: ForgeLedgerEntry,
  reply: Reply,
): Promise<void> {
  const pull = forge.pulls.find((p) => p.number === number);
  if (!pull) return reply(404, { error: "no such pull request" });
  if (pull.merged) return reply(405, { error: `pull request #${pull.number} is already merged` });
  pull.merged = true;
  pull.mergedAt = new Date().toISOString();
  entry.pull = pull.number;
  await forge.options.onMerge?.({ ...pull });
  return reply(200, pull);
}

function replyFailure(reply: Reply, f: Failure): void {
  const headers: Record<string, string> = {};
  if (f.retryAfterSeconds !== undefined) headers["retry-after"] = String(f.retryAfterSeconds);
  reply(f.status, { error: `injected failure (${f.status})` }, headers);
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
    async getPullRequest(number, options) {
      try {
        return await call<PullRequest>("GET", `/pulls/${pullNumber(number)}`, undefined, options);
      } catch (err) {
        if (err instanceof ForgeHttpError && err.status === 404) return undefined;
        throw err;
      }
    },
    mergePullRequest: (number, options) =>
      call<PullRequest>("POST", `/pulls/${pullNumber(number)}/merge`, undefined, options),
  };
}

function pullNumber(n: number): number {
  if (!Number.isSafeInteger(n) || n < 1) {
    throw new TypeError(`a pull request number is a whole number >= 1 (got ${n})`);
  }
  return n;
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
