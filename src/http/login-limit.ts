// How often one client may present a wrong token to sign in (the login form, a link with
// ?token=): LOGIN_FAILURES wrong ones in LOGIN_WINDOW_MS, then every sign-in from it is
// refused (429, the right token too: otherwise guessing would go on) until the window
// that began with its first failure ends. A client is its address as the server sees it
// (the peer of the connection: behind a proxy, every client shares the proxy's, and
// X-Forwarded-For is not trusted, since anyone can send it); an IPv6 address counts by
// its /64, which one machine usually holds whole. Memory is bounded: at most
// MAX_TRACKED_CLIENTS are remembered, the oldest forgotten first.

import type { Context } from "hono";
import type { Clock } from "../index.js";

export const LOGIN_FAILURES = 10;
export const LOGIN_WINDOW_MS = 15 * 60 * 1000;
export const MAX_TRACKED_CLIENTS = 10_000;

interface Failures {
  count: number;
  /** When the first failure of this window was. */
  since: number;
}

export class LoginLimiter {
  /** In the order their windows began (so also the order they end). */
  private readonly clients = new Map<string, Failures>();

  constructor(
    private readonly clock: Clock,
    private readonly max = MAX_TRACKED_CLIENTS,
  ) {}

  /** Milliseconds until `client` may sign in again; 0 when it may now. */
  waitFor(client: string): number {
    const f = this.current(client);
    if (!f || f.count < LOGIN_FAILURES) return 0;
    return f.since + LOGIN_WINDOW_MS - this.clock.now();
  }

  failed(client: string): void {
    this.prune();
    const f = this.current(client);
    if (f) {
      f.count += 1;
      return;
    }
    while (this.clients.size >= this.max) {
      const oldest = this.clients.keys().next().value;
      if (oldest === undefined) break;
      this.clients.delete(oldest);
    }
    this.clients.set(client, { count: 1, since: this.clock.now() });
  }

  succeeded(client: string): void {
    this.clients.delete(client);
  }

  /** How many clients are remembered (for tests). */
  get size(): number {
    return this.clients.size;
  }

  private current(client: string): Failures | undefined {
    const f = this.clients.get(client);
    if (f && f.since + LOGIN_WINDOW_MS <= this.clock.now()) {
      this.clients.delete(client);
      return undefined;
    }
    return f;
  }

  private prune(): void {
    const now = this.clock.now();
    for (const [client, f] of this.clients) {
      if (f.since + LOGIN_WINDOW_MS > now) break;
      this.clients.delete(client);
    }
  }
}

/** The client a request comes from, for the limit: the connection's peer address when the
 *  app runs on node:http (serveHttp, requestListener, @hono/node-server), else one shared
 *  "unknown" (a server that does not hand the connection over: all its clients share one
 *  limit). */
export function clientOf(c: Context): string {
  const env = c.env as
    | { incoming?: { socket?: { remoteAddress?: string } }; server?: unknown }
    | undefined;
  const bindings = (env?.server ?? env) as typeof env;
  const address = bindings?.incoming?.socket?.remoteAddress;
  return address ? addressKey(address) : "unknown";
}

/** An IPv4 address as it is; an IPv6 one as its first 64 bits. */
export function addressKey(address: string): string {
  const mapped = address.match(/^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i);
  if (mapped) return mapped[1]!;
  if (!address.includes(":")) return address;
  const [head = "", tail] = address.toLowerCase().split("%")[0]!.split("::");
  const left = head === "" ? [] : head.split(":");
  const right = tail === undefined || tail === "" ? [] : tail.split(":");
  const groups =
    tail === undefined
      ? left
      : [...left, ...Array(8 - left.length - right.length).fill("0"), ...right];
  return `${groups
    .slice(0, 4)
    .map((g) => Number.parseInt(g || "0", 16).toString(16))
    .join(":")}::/64`;
}
