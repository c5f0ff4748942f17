// How often one client may present a wrong token to sign in (the login form, a link with
// ?token=): LOGIN_FAILURES wrong ones in LOGIN_WINDOW_MS, then every sign-in from it is
// refused (429, the right token too: otherwise guessing would go on) until the window
// that began with its first failure ends. A client is its address as the server sees it
// (the peer of the connection: behind a proxy, every client shares the proxy's, and
// X-Forwarded-For is not trusted, since anyone can send it); an IPv6 address counts by
// its /64, which one machine usually holds whole. A right token does not clear the count
// (a read-only token's holder would otherwise guess at the full token without end, nine
// at a time). Memory is bounded: at most MAX_TRACKED_CLIENTS are remembered, the oldest
// that is not limited forgotten first (forgetting a limited one would let whoever fails
// from enough other addresses, one IPv6 /48 holds 65,536 /64s, unlock it). When every
// remembered client is limited, the clients beyond them share one count.

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
  /** The shared count of clients not remembered because every remembered one is limited. */
  private overflow: Failures | undefined;

  constructor(
    private readonly clock: Clock,
    private readonly max = MAX_TRACKED_CLIENTS,
  ) {}

  /** Milliseconds until `client` may sign in again; 0 when it may now. */
  waitFor(client: string): number {
    const f = this.current(client) ?? this.currentOverflow();
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
    if (this.clients.size >= this.max && !this.forgetOneNotLimited()) {
      const o = this.currentOverflow();
      if (o) o.count += 1;
      else this.overflow = { count: 1, since: this.clock.now() };
      return;
    }
    this.clients.set(client, { count: 1, since: this.clock.now() });
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

  private currentOverflow(): Failures | undefined {
    if (this.overflow && this.overflow.since + LOGIN_WINDOW_MS <= this.clock.now()) {
      this.overflow = undefined;
    }
    return this.overflow;
  }

  /** Forgets the oldest client that is not limited; false when every one is. */
  private forgetOneNotLimited(): boolean {
    for (const [client, f] of this.clients) {
      if (f.count < LOGIN_FAILURES) {
        this.clients.delete(client);
        return true;
      }
    }
    return false;
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
