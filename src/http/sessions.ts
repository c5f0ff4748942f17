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
/** Sessions kept at most for each role; signing in beyond it ends the oldest of that role
 *  (so read-only sign-ins, however many, never end a full-token session). */
export const MAX_SESSIONS = 10_000;

interface Session {
  role: Role;
  expiresAt: number;
}

const digest = (id: string) => createHash("sha256").update(id).digest("base64url");

export class Sessions {
  /** Per role, by the digest of the id, in the order created (so also the order they
   *  expire). */
  private readonly byRole: Record<Role, Map<string, Session>> = {
    act: new Map(),
    read: new Map(),
  };

  constructor(
    private readonly clock: Clock,
    private readonly max = MAX_SESSIONS,
  ) {}

  /** A new session for `role`; its id, the cookie's value. */
  create(role: Role): string {
    const sessions = this.byRole[role];
    this.prune(sessions);
    while (sessions.size >= this.max) {
      const oldest = sessions.keys().next().value;
      if (oldest === undefined) break;
      sessions.delete(oldest);
    }
    const id = randomBytes(32).toString("base64url");
    sessions.set(digest(id), { role, expiresAt: this.clock.now() + SESSION_MAX_AGE_MS });
    return id;
  }

  /** The role of a live session, or undefined (unknown, ended, expired). */
  roleOf(id: string): Role | undefined {
    if (id.length > 100) return undefined;
    const key = digest(id);
    for (const sessions of Object.values(this.byRole)) {
      const s = sessions.get(key);
      if (!s) continue;
      if (s.expiresAt <= this.clock.now()) {
        sessions.delete(key);
        return undefined;
      }
      return s.role;
    }
    return undefined;
  }

  /** Ends a session: its cookie is worthless from now on, wherever it was copied to. */
  end(id: string): void {
    const key = digest(id);
    for (const sessions of Object.values(this.byRole)) sessions.delete(key);
  }

  /** How many sessions are kept (for tests). */
  get size(): number {
    return this.byRole.act.size + this.byRole.read.size;
  }

  private prune(sessions: Map<string, Session>): void {
    const now = this.clock.now();
    for (const [key, s] of sessions) {
      if (s.expiresAt > now) break;
      sessions.delete(key);
    }
  }
}
