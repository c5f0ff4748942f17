// The dashboard's sign-in sessions, held by the server. Signing in (the login form, or a
// link with ?token=) creates a session: a random id given to the browser as an HttpOnly
// cookie, kept here (as its digest) with the role it grants and when it expires. Logging
// out ends the session here, so a copy of the cookie (from a shared machine, a proxy's
// log, a copied browser profile) stops working too: the cookie is not derived from the
// token and says nothing about it.
//
// Sessions live in this process's memory: a restart signs every browser out, and apps in
// several processes behind one address each know only their own sessions. Bearer tokens
// are not sessions and are unaffected.

import { createHash, randomBytes } from "node:crypto";
import type { Clock } from "../index.js";
import type { Role } from "./security.js";

/** How long a session lasts from sign-in (the cookie's Max-Age too). */
export const SESSION_MAX_AGE_MS = 7 * 24 * 3600 * 1000;
/** Sessions kept at most; signing in beyond it ends the oldest. */
export const MAX_SESSIONS = 10_000;

interface Session {
  role: Role;
  expiresAt: number;
}

const digest = (id: string) => createHash("sha256").update(id).digest("base64url");

export class Sessions {
  /** By the digest of the id, in the order created (so also in the order they expire). */
  private readonly byDigest = new Map<string, Session>();

  constructor(
    private readonly clock: Clock,
    private readonly max = MAX_SESSIONS,
  ) {}

  /** A new session for `role`; its id, the cookie's value. */
  create(role: Role): string {
    this.prune();
    while (this.byDigest.size >= this.max) {
      const oldest = this.byDigest.keys().next().value;
      if (oldest === undefined) break;
      this.byDigest.delete(oldest);
    }
    const id = randomBytes(32).toString("base64url");
    this.byDigest.set(digest(id), { role, expiresAt: this.clock.now() + SESSION_MAX_AGE_MS });
    return id;
  }

  /** The role of a live session, or undefined (unknown, ended, expired). */
  roleOf(id: string): Role | undefined {
    if (id.length > 100) return undefined;
    const key = digest(id);
    const s = this.byDigest.get(key);
    if (!s) return undefined;
    if (s.expiresAt <= this.clock.now()) {
      this.byDigest.delete(key);
      return undefined;
    }
    return s.role;
  }

  /** Ends a session: its cookie is worthless from now on, wherever it was copied to. */
  end(id: string): void {
    this.byDigest.delete(digest(id));
  }

  /** How many sessions are kept (for tests). */
  get size(): number {
    return this.byDigest.size;
  }

  private prune(): void {
    const now = this.clock.now();
    for (const [key, s] of this.byDigest) {
      if (s.expiresAt > now) break;
      this.byDigest.delete(key);
    }
  }
}
