// Delivers StoreHints published with pg_notify to in-process subscribers, over ONE
// dedicated LISTEN connection per store (never a pooled one: a pooled connection would
// hold its LISTEN for whoever checks it out next, and would be returned and reused).
//
// Failure mode: notifications sent while the LISTEN connection is
// down are lost for good. So the connection reconnects with backoff, and after every
// reconnect emits a synthetic {kind:"runnable"} hint so subscribers poll at once instead
// of waiting for their next tick (after the first LISTEN too: a subscriber may have missed
// hints published between subscribe() and the LISTEN taking effect). Hints are only hints: nothing may depend on them.

import { createHash } from "node:crypto";
import pg from "pg";
import { settlesWithin } from "../../lib/timers.js";
import type { StoreHint } from "../store.js";
import { dropSocket } from "./connection.js";

const RECONNECT_FIRST_MS = 100;
const RECONNECT_MAX_MS = 5_000;
/** How long close() waits for the server to say goodbye before it drops the socket: a
 *  peer gone silent (a network partition) never answers, and pg's end() would wait for it
 *  forever, with the socket keeping the process alive. */
const END_WAIT_MS = 2_000;

/** Ends `client` politely, or after `ms` by dropping its socket. */
async function endWithin(client: pg.Client, ms: number): Promise<void> {
  if (!(await settlesWithin(client.end(), ms))) dropSocket(client);
}

/** The NOTIFY channel of a schema. Channel names are identifiers (at most 63 bytes), so a
 *  long schema name is shortened with a hash that keeps schemas apart. */
export function channelFor(schema: string): string {
  const full = `cairn_${schema}`;
  if (full.length <= 63) return full;
  const hash = createHash("sha256").update(schema).digest("hex").slice(0, 12);
  return `cairn_${schema.slice(0, 44)}_${hash}`;
}

const HINT_KINDS = new Set(["runnable", "finished", "cancel", "event"]);

function parseHint(payload: string | undefined): StoreHint | undefined {
  if (payload === undefined) return undefined;
  try {
    const v: unknown = JSON.parse(payload);
    if (v === null || typeof v !== "object") return undefined;
    const { kind, runId } = v as { kind?: unknown; runId?: unknown };
    if (typeof kind !== "string" || !HINT_KINDS.has(kind)) return undefined;
    const hint: StoreHint = { kind: kind as StoreHint["kind"] };
    if (typeof runId === "string") hint.runId = runId;
    return hint;
  } catch {
    return undefined;
  }
}

export class HintListener {
  readonly #config: pg.ClientConfig;
  readonly #channel: string;
  readonly #listeners = new Set<(hint: StoreHint) => void>();
  #client: pg.Client | undefined;
  #started = false;
  #closed = false;
  #failures = 0;
  #timer: NodeJS.Timeout | undefined;
  #connecting: Promise<void> | undefined;
  /** The client #connecting is connecting and LISTENing with, until it has settled. */
  #pending: pg.Client | undefined;

  constructor(config: pg.ClientConfig, channel: string) {
    // keepAlive: a LISTEN connection is idle for long stretches; a dead peer must surface as
    // an error (and a reconnect), not as silence. A connect timeout bounds close().
    this.#config = { connectionTimeoutMillis: 10_000, ...config, keepAlive: true };
    this.#channel = channel;
  }

  /** Adds a listener; the first one starts the connection. */
  add(listener: (hint: StoreHint) => void): () => void {
    this.#listeners.add(listener);
    if (!this.#started && !this.#closed) {
      this.#started = true;
      this.#connecting = this.#connect();
    }
    return () => {
      this.#listeners.delete(listener);
    };
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#listeners.clear();
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    const client = this.#client;
    this.#client = undefined;
    // A connect under way gets the same bound: a server gone silent after accepting the
    // connection never answers its LISTEN (no query timeout here: a LISTEN connection is
    // idle by design), which held close(), and the socket the process, for ever.
    const connecting = this.#connecting;
    if (connecting !== undefined && !(await settlesWithin(connecting, END_WAIT_MS))) {
      if (this.#pending) dropSocket(this.#pending);
      await settlesWithin(connecting, END_WAIT_MS);
    }
    if (client) await endWithin(client, END_WAIT_MS);
  }

  #emit(hint: StoreHint): void {
    for (const listener of [...this.#listeners]) {
      try {
        listener(hint);
      } catch {
        // A subscriber's bug must not stop the others from hearing hints.
      }
    }
  }

  async #connect(): Promise<void> {
    if (this.#closed) return;
    let client: pg.Client;
    try {
      // Can throw: the connection string's sslrootcert/sslcert/sslkey files are read here.
      client = new pg.Client(this.#config);
    } catch {
      this.#failures++;
      this.#scheduleReconnect();
      return;
    }
    let lost = false;
    const onLost = () => {
      if (lost) return;
      lost = true;
      void client.end().catch(() => {});
      if (this.#client === client) {
        this.#client = undefined;
        this.#scheduleReconnect();
      }
    };
    client.on("error", onLost);
    client.on("end", onLost);
    client.on("notification", (msg) => {
      if (msg.channel !== this.#channel) return;
      const hint = parseHint(msg.payload);
      if (hint) this.#emit(hint);
    });
    this.#pending = client;
    try {
      await client.connect();
      await client.query(`LISTEN "${this.#channel}"`);
    } catch {
      lost = true;
      await endWithin(client, END_WAIT_MS);
      this.#failures++;
      this.#scheduleReconnect();
      return;
    } finally {
      this.#pending = undefined;
    }
    if (this.#closed || lost) {
      await endWithin(client, END_WAIT_MS);
      if (!this.#closed) this.#scheduleReconnect();
      return;
    }
    this.#client = client;
    this.#failures = 0;
    // Anything published while no LISTEN was active (before the first one too: between
    // subscribe() and now) is lost: tell subscribers to look.
    this.#emit({ kind: "runnable" });
  }

  #scheduleReconnect(): void {
    if (this.#closed || this.#timer) return;
    const base = Math.min(RECONNECT_MAX_MS, RECONNECT_FIRST_MS * 2 ** Math.min(this.#failures, 6));
    const delay = base * (0.75 + Math.random() * 0.5);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#connecting = this.#connect();
    }, delay);
    this.#timer.unref();
  }
}
