// Who may do what, and from where. Every request passes these checks before any route:
//
// 1. Host: the request's host name must be a loopback name, the bound host, or one the
//    app was told to allow. A page on another site that rebinds its DNS name to 127.0.0.1
//    sends its own name as Host, and is refused (no DNS rebinding).
// 2. Origin: a state-changing request (not GET/HEAD/OPTIONS) whose Origin is another
//    origin — or, without Origin, whose Sec-Fetch-Site says another site — is refused, so
//    no page elsewhere can make a browser act here (no cross-site POST). Clients that are
//    not browsers send neither header and pass.
// 3. Token: when tokens are configured, a request carries one as `Authorization: Bearer`
//    or in the session cookie set by the login page; none or a wrong one is a 401. The
//    read-only token reads; acting (start, send, cancel, resume, fork) needs the full one
//    (403 otherwise). With no token configured everyone may act: only safe on loopback,
//    which is why serveHttp refuses any other bind without a token. Approval links (the
//    page and its API routes) need no token: the signed token in their path is the
//    credential, and it answers one approval one way, once.
// 4. Body size: a request body over the limit is a 413 before anything parses it.

import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import { networkInterfaces, hostname as osHostname } from "node:os";
import type { Context, MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { getCookie, setCookie } from "hono/cookie";
import { APPROVAL_LINK_API, APPROVAL_LINK_PAGE } from "./approval-link-paths.js";
import { HttpError } from "./errors.js";

export type Role = "act" | "read";

/** What the app's middleware leaves on a request's context. */
export interface AppEnv {
  Variables: {
    role: Role | undefined;
    /** The OpenAPI document (set by the API before its handler runs). */
    openapi: unknown;
  };
}

export interface SecurityOptions {
  /** Full access: read and act. */
  token?: string;
  /** Read-only access. */
  readToken?: string;
  /** Host names (no port) requests may be addressed to, besides the loopback names; "*"
   *  allows any (only behind a proxy that checks Host itself). */
  allowedHosts?: string[];
  /** Origins (e.g. "https://ops.example.com") allowed to make state-changing requests
   *  besides the app's own. */
  allowedOrigins?: string[];
  /** Largest request body in bytes. Default 2 MiB + 64 KiB (a payload at the engine's
   *  default limit, with room for JSON around it). */
  maxBodyBytes?: number;
  /** Acknowledges that a non-loopback allowed host without any token is intended (e.g. a
   *  proxy in front authenticates). Default false: such a configuration is refused. */
  allowUnauthenticated?: boolean;
}

export const DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024 + 64 * 1024;
export const SESSION_COOKIE = "cairn_session";

const LOOPBACK_NAMES = ["localhost", "127.0.0.1", "::1"];

export function isLoopback(host: string): boolean {
  const h = unbracket(host.toLowerCase());
  return LOOPBACK_NAMES.includes(h) || /^127(\.\d{1,3}){3}$/.test(h);
}

function unbracket(host: string): string {
  return host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
}

/** The names a server bound to `host` answers to: the host itself, and for a wildcard bind
 *  (0.0.0.0, ::) this machine's name and addresses. */
export function namesForBind(host: string): string[] {
  const h = unbracket(host.toLowerCase());
  if (h !== "0.0.0.0" && h !== "::") return [h];
  const names = [osHostname().toLowerCase()];
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) names.push(a.address.toLowerCase());
  }
  return names;
}

export interface Security {
  /** Sets the caller's role (c.get("role")) or answers 401/403/413 itself. */
  middleware: MiddlewareHandler<AppEnv>;
  /** Refuses a caller without the "act" role (403). */
  requireAct(c: Context<AppEnv>): void;
  /** Whether tokens are configured (then the dashboard offers a login page). */
  readonly authRequired: boolean;
  /** Checks a token typed into the login page; the cookie value for it, or undefined. */
  sessionFor(token: string): { role: Role; cookie: string } | undefined;
  cookiePath: string;
}

export interface SecurityContext {
  basePath: string;
  /** Extra names this app is reachable under (the bound host, from serveHttp). */
  boundHosts?: string[];
  /** Answers a refused request: JSON under /api, a page elsewhere. */
  refuse(c: Context, err: HttpError): Response | Promise<Response>;
}

const digest = (text: string) => createHash("sha256").update(text).digest();

function sameSecret(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

export function createSecurity(options: SecurityOptions, ctx: SecurityContext): Security {
  checkTokens(options);
  const authRequired = options.token !== undefined || options.readToken !== undefined;
  const allowsHost = hostRule(options, ctx.boundHosts ?? [], authRequired);
  const origins = new Set(options.allowedOrigins ?? []);
  const roles = tokenRoles(options);
  const signIn = signInRules(ctx.basePath, roles, ctx.refuse);
  const limit = bodyLimitOf(options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES, ctx.refuse);

  const middleware: MiddlewareHandler<AppEnv> = async (c, next) => {
    const url = new URL(c.req.url);
    if (!allowsHost(url.hostname)) {
      return ctx.refuse(
        c,
        new HttpError(
          403,
          "FORBIDDEN_HOST",
          "This server does not answer to that host name (allow it with --allow-host)",
        ),
      );
    }
    const method = c.req.method;
    const unsafe = method !== "GET" && method !== "HEAD" && method !== "OPTIONS";
    if (unsafe && fromAnotherSite(c, url, origins)) {
      return ctx.refuse(
        c,
        new HttpError(
          403,
          "FORBIDDEN_ORIGIN",
          "Requests that change something must come from this app's own pages (the Origin is another site)",
        ),
      );
    }
    const verdict: Verdict = authRequired ? authenticate(c, url, signIn) : { role: "act" };
    if ("answer" in verdict) return verdict.answer;
    c.set("role", verdict.role);
    if (unsafe) return limit(c, next);
    await next();
  };

  return {
    middleware,
    authRequired,
    cookiePath: signIn.cookiePath,
    requireAct(c) {
      if (c.get("role") !== "act") {
        throw new HttpError(
          403,
          "FORBIDDEN",
          "This token may read but not act; acting needs the full token",
        );
      }
    },
    sessionFor(token) {
      const role = roles.ofToken(token);
      return role ? { role, cookie: cookieValue(token) } : undefined;
    },
  };
}

/** Refuses a token too short to be a secret, and one token given as both. */
function checkTokens(options: SecurityOptions): void {
  for (const [name, value] of [
    ["token", options.token],
    ["readToken", options.readToken],
  ] as const) {
    if (value !== undefined && (typeof value !== "string" || value.length < 8)) {
      throw new TypeError(`cairn http: ${name} must be a string of at least 8 characters`);
    }
  }
  if (
    options.token !== undefined &&
    options.readToken !== undefined &&
    options.token === options.readToken
  ) {
    throw new TypeError("cairn http: token and readToken must differ");
  }
}

/** Which host names requests may be addressed to. Refuses an app reachable under a
 *  non-loopback name without a token, unless told something in front authenticates. */
function hostRule(
  options: SecurityOptions,
  boundHosts: string[],
  authRequired: boolean,
): (hostname: string) => boolean {
  const anyHost = options.allowedHosts?.includes("*") ?? false;
  const hosts = new Set(
    [...LOOPBACK_NAMES, ...boundHosts, ...(options.allowedHosts ?? [])].map((h) =>
      unbracket(h.toLowerCase()),
    ),
  );
  const exposed = anyHost || [...hosts].some((h) => !isLoopback(h));
  if (exposed && !authRequired && !options.allowUnauthenticated) {
    throw new TypeError(
      "cairn http: the app is reachable under a non-loopback host name but has no token; " +
        "give a token (and a readToken for read-only access), or set allowUnauthenticated " +
        "when something in front of it authenticates",
    );
  }
  return (hostname) => anyHost || hosts.has(unbracket(hostname.toLowerCase()));
}

/** Whether a request comes from a page of another site: by its Origin, else by its
 *  Sec-Fetch-Site. Clients that are not browsers send neither and are not foreign. */
function fromAnotherSite(c: Context, url: URL, allowedOrigins: Set<string>): boolean {
  const origin = c.req.header("origin");
  if (origin !== undefined) {
    let host: string | undefined;
    try {
      host = origin === "null" ? undefined : new URL(origin).host;
    } catch {
      host = undefined;
    }
    return host !== url.host && !allowedOrigins.has(origin);
  }
  const site = c.req.header("sec-fetch-site");
  return site !== undefined && site !== "same-origin" && site !== "none";
}

/** The role a token or a session cookie gives (compared as digests, in constant time). */
interface TokenRoles {
  ofToken(token: string): Role | undefined;
  ofCookie(value: string): Role | undefined;
}

function tokenRoles(options: SecurityOptions): TokenRoles {
  const secrets: Array<{ role: Role; token: Buffer; cookie: string }> = [];
  for (const [role, token] of [
    ["act", options.token],
    ["read", options.readToken],
  ] as const) {
    if (token !== undefined) {
      secrets.push({ role, token: digest(token), cookie: cookieValue(token) });
    }
  }
  return {
    ofToken(token) {
      const d = digest(token);
      return secrets.find((s) => sameSecret(s.token, d))?.role;
    },
    ofCookie(value) {
      const d = digest(value);
      return secrets.find((s) => sameSecret(digest(s.cookie), d))?.role;
    },
  };
}

/** What deciding a request's role needs, when tokens are configured. */
interface SignIn {
  roles: TokenRoles;
  cookiePath: string;
  isApi(path: string): boolean;
  /** Paths anyone may open: the login page, assets, approval links. */
  isOpen(path: string): boolean;
  refuse: SecurityContext["refuse"];
}

function signInRules(base: string, roles: TokenRoles, refuse: SignIn["refuse"]): SignIn {
  return {
    roles,
    cookiePath: base === "" ? "/" : base,
    isApi: (path) => path.startsWith(`${base}/api/`) || path === `${base}/api`,
    // Approval links carry their own credential (a signed, single-use token in the path).
    isOpen: (path) =>
      path === `${base}/login` ||
      path.startsWith(`${base}/assets/`) ||
      path.startsWith(`${base}${APPROVAL_LINK_PAGE}/`) ||
      path.startsWith(`${base}/api${APPROVAL_LINK_API}/`),
    refuse,
  };
}

/** The caller's role, or the answer that ends the request (a 401, or the redirect that
 *  follows a sign-in by link). */
type Verdict = { role: Role | undefined } | { answer: Response | Promise<Response> };

function authenticate(c: Context, url: URL, s: SignIn): Verdict {
  let role: Role | undefined;
  const bearer = c.req.header("authorization")?.match(/^Bearer\s+(\S+)\s*$/i)?.[1];
  if (bearer !== undefined) role = s.roles.ofToken(bearer);
  else {
    const cookie = getCookie(c, SESSION_COOKIE);
    if (cookie !== undefined) role = s.roles.ofCookie(cookie);
  }
  // A link carrying ?token= signs the browser in, then drops the token from the URL.
  const queryToken = url.searchParams.get("token");
  if (c.req.method === "GET" && !s.isApi(url.pathname) && queryToken !== null) {
    if (s.roles.ofToken(queryToken)) {
      setSession(c, cookieValue(queryToken), s.cookiePath, url.protocol === "https:");
      url.searchParams.delete("token");
      // "//evil.example/?token=..." must not send the browser to evil.example.
      const path = `/${url.pathname.replace(/^\/+/, "")}`;
      return { answer: c.redirect(`${path}${url.search}`, 303) };
    }
  }
  if (role === undefined && !s.isOpen(url.pathname)) {
    const err = new HttpError(
      401,
      "UNAUTHORIZED",
      "A valid token is required (Authorization: Bearer <token>)",
    );
    return { answer: s.refuse(c, err) };
  }
  return { role };
}

/** A 413 for a body over `maxBodyBytes`, before anything parses it. */
function bodyLimitOf(maxBodyBytes: number, refuse: SecurityContext["refuse"]) {
  return bodyLimit({
    maxSize: maxBodyBytes,
    onError: (c) =>
      refuse(
        c,
        new HttpError(
          413,
          "PAYLOAD_TOO_LARGE",
          `The request body is larger than ${maxBodyBytes} bytes; nothing was done`,
        ),
      ),
  });
}

/** The session cookie for a token: derived from it, so the cookie is not the token. */
function cookieValue(token: string): string {
  return createHmac("sha256", token).update("cairn-ui-session").digest("base64url");
}

export function setSession(c: Context, value: string, path: string, secure: boolean): void {
  setCookie(c, SESSION_COOKIE, value, {
    path,
    httpOnly: true,
    sameSite: "Strict",
    secure,
    maxAge: 30 * 24 * 3600,
  });
}
