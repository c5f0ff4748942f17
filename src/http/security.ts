// Who may do what, and from where. Every request passes these checks before any route:
//
// 1. Host: the request's host name must be a loopback name, the bound host, or one the
//    app was told to allow. A page on another site that rebinds its DNS name to 127.0.0.1
//    sends its own name as Host, and is refused (no DNS rebinding).
// 2. Origin: a state-changing request (not GET/HEAD/OPTIONS) whose Origin is another
//    origin — or, without Origin, whose Sec-Fetch-Site says another site — is refused, so
//    no page elsewhere can make a browser act here (no cross-site POST). Clients that are
//    not browsers send neither header and pass.
// 3. Token: when tokens are configured, a request carries one as `Authorization: Bearer`,
//    or the cookie of a session the login page started (sessions.ts: held by the server,
//    ended by logging out); none or a wrong one is a 401. Signing in is limited per client
//    address (login-limit.ts: a 429 after repeated wrong tokens). The
//    read-only token reads; acting (start, send, cancel, resume, fork) needs the full one
//    (403 otherwise). With no token configured everyone may act: only safe on loopback,
//    which is why serveHttp refuses any other bind without a token. Approval links (the
//    page and its API routes) need no token: the signed token in their path is the
//    credential, and it answers one approval one way, once.
// 4. Body size: a request body over the limit is a 413 before anything parses it.

import { createHash, timingSafeEqual } from "node:crypto";
import { networkInterfaces, hostname as osHostname } from "node:os";
import type { Context, MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import type { Clock } from "../index.js";
import { APPROVAL_LINK_API, APPROVAL_LINK_PAGE } from "./approval-link-paths.js";
import { bearerProblem } from "./bearer.js";
import { HttpError } from "./errors.js";
import { clientOf, LoginLimiter } from "./login-limit.js";
import { pathBelowMount, requestBase } from "./public-base.js";
import { SESSION_MAX_AGE_MS, Sessions } from "./sessions.js";

export type Role = "act" | "read";

/** What the app's middleware leaves on a request's context. */
export interface AppEnv {
  Variables: {
    role: Role | undefined;
    /** The OpenAPI document (set by the API before its handler runs). */
    openapi: unknown;
    /** Where this app's paths begin for this request (public-base.ts). */
    base: string | undefined;
    /** The request's own text of the prefix another Hono app put the routes under
     *  (public-base.ts mountedPartOf), to compare paths with; never output. */
    mounted: string | undefined;
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
  /** Checks a token typed into the login page, under the client's limit of failures: a
   *  valid one starts a session (its cookie set on `c`). */
  signIn(c: Context, token: string): SignInResult;
  /** Ends the request's session on the server (a copy of its cookie is worthless from
   *  now on) and deletes its cookie. */
  signOut(c: Context): void;
}

export type SignInResult =
  | { ok: true; role: Role }
  | { ok: false; reason: "invalid" }
  /** Too many wrong tokens from this client: it may try again in `retryAfterS`. */
  | { ok: false; reason: "limited"; retryAfterS: number };

export interface SecurityContext {
  basePath: string;
  /** Extra names this app is reachable under (the bound host, from serveHttp). */
  boundHosts?: string[];
  /** Now, for sessions' expiry and the sign-in limit. */
  clock: Clock;
  /** Answers a refused request: JSON under /api, a page elsewhere. */
  refuse(c: Context, err: HttpError): Response | Promise<Response>;
}

const digest = (text: string) => createHash("sha256").update(text).digest();

function sameSecret(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

export function createSecurity(options: SecurityOptions, ctx: SecurityContext): Security {
  checkTokens(options);
  checkAllowLists(options);
  const authRequired = options.token !== undefined || options.readToken !== undefined;
  const allowsHost = hostRule(options, ctx.boundHosts ?? [], authRequired);
  const origins = new Set(options.allowedOrigins ?? []);
  const roles = tokenRoles(options);
  const signIn = signInRules(ctx, roles);
  const limit = bodyLimitOf(checkMaxBodyBytes(options.maxBodyBytes), ctx.refuse);

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
    requireAct(c) {
      if (c.get("role") !== "act") {
        throw new HttpError(
          403,
          "FORBIDDEN",
          "This token may read but not act; acting needs the full token",
        );
      }
    },
    signIn: (c, token) => startSession(c, token, signIn),
    signOut(c) {
      const id = getCookie(c, SESSION_COOKIE);
      if (id !== undefined) signIn.sessions.end(id);
      deleteCookie(c, SESSION_COOKIE, { path: signIn.cookiePath(c) });
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
    const problem = value === undefined ? undefined : bearerProblem(value);
    if (problem) throw new TypeError(`cairn http: ${name} ${problem}`);
  }
  if (
    options.token !== undefined &&
    options.readToken !== undefined &&
    options.token === options.readToken
  ) {
    throw new TypeError("cairn http: token and readToken must differ");
  }
}

/** The body limit, or a TypeError: unchecked, NaN (`Number(process.env.X)` of a variable
 *  not set) made every request with a body a 500, and 0 or a negative number refused every
 *  one as "larger than -1 bytes". */
function checkMaxBodyBytes(value: unknown): number {
  if (value === undefined) return DEFAULT_MAX_BODY_BYTES;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
    throw new TypeError(
      `cairn http: maxBodyBytes must be a whole number of bytes >= 1 (got ${typeof value === "string" ? JSON.stringify(value) : String(value)}); the default is ${DEFAULT_MAX_BODY_BYTES}`,
    );
  }
  return value;
}

/** allowedHosts and allowedOrigins as the checks compare them: a Host's name alone, an
 *  Origin header's exact text. An entry written otherwise ("https://ops.example.com" as a
 *  host, "https://ops.example.com/" as an origin) matched no request, and every request it
 *  was meant to let through was refused (403) with nothing saying why. */
function checkAllowLists(options: SecurityOptions): void {
  for (const [name, list] of [
    ["allowedHosts", options.allowedHosts],
    ["allowedOrigins", options.allowedOrigins],
  ] as const) {
    if (list === undefined) continue;
    if (!Array.isArray(list) || list.some((e) => typeof e !== "string")) {
      throw new TypeError(`cairn http: ${name} must be an array of strings`);
    }
  }
  for (const host of options.allowedHosts ?? []) {
    const h = unbracket(host);
    // A name, an IPv4 address, or an IPv6 address (colons, maybe in brackets): no scheme,
    // port, path or space.
    const ipv6 = /^[0-9a-f:.]+$/i.test(h) && h.includes(":");
    if (host !== "*" && (h === "" || /[\s/@?#]/.test(h) || (h.includes(":") && !ipv6))) {
      throw new TypeError(
        `cairn http: allowed host ${JSON.stringify(host)} is not a host name; give the name alone (no scheme, port or path), e.g. "ops.example.com"`,
      );
    }
  }
  for (const origin of options.allowedOrigins ?? []) {
    let own: string | undefined;
    try {
      own = new URL(origin).origin;
    } catch {
      own = undefined;
    }
    if (own !== origin) {
      const hint =
        own !== undefined && own !== "null" ? `; write it as ${JSON.stringify(own)}` : "";
      throw new TypeError(
        `cairn http: allowedOrigins entry ${JSON.stringify(origin)} is not an origin as browsers send it (scheme, host and port only, e.g. "https://ops.example.com")${hint}`,
      );
    }
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

/** The role a token gives (compared as digests, in constant time). */
interface TokenRoles {
  ofToken(token: string): Role | undefined;
}

function tokenRoles(options: SecurityOptions): TokenRoles {
  const secrets: Array<{ role: Role; token: Buffer }> = [];
  for (const [role, token] of [
    ["act", options.token],
    ["read", options.readToken],
  ] as const) {
    if (token !== undefined) secrets.push({ role, token: digest(token) });
  }
  return {
    ofToken(token) {
      const d = digest(token);
      return secrets.find((s) => sameSecret(s.token, d))?.role;
    },
  };
}

/** What deciding a request's role needs, when tokens are configured. */
interface SignIn {
  roles: TokenRoles;
  sessions: Sessions;
  limiter: LoginLimiter;
  /** The session cookie's path: the request's base (public-base.ts). */
  cookiePath(c: Context): string;
  isApi(c: Context, path: string): boolean;
  /** Paths anyone may open: the login page, assets, approval links. */
  isOpen(c: Context, path: string): boolean;
  refuse: SecurityContext["refuse"];
}

function signInRules(ctx: SecurityContext, roles: TokenRoles): SignIn {
  const baseOf = (c: Context) => requestBase(c as Context<AppEnv>, ctx.basePath);
  return {
    roles,
    sessions: new Sessions(ctx.clock),
    limiter: new LoginLimiter(ctx.clock),
    cookiePath: (c) => baseOf(c) || "/",
    // Compared below the mount's prefix, parameters and all (public-base.ts): compared with
    // the base, a prefix's parameter could make any path of the app look open.
    isApi: (c, path) => isApiPath(pathBelowMount(c as Context<AppEnv>, path), ctx.basePath),
    // Approval links carry their own credential (a signed, single-use token in the path).
    isOpen: (c, path) => {
      const own = pathBelowMount(c as Context<AppEnv>, path);
      return own !== undefined && isOpenPath(own, ctx.basePath);
    },
    refuse: ctx.refuse,
  };
}

/** Whether `own` (a path below the mount's prefix) is one of the API's. */
export function isApiPath(own: string | undefined, basePath: string): boolean {
  return own !== undefined && (own.startsWith(`${basePath}/api/`) || own === `${basePath}/api`);
}

/** Paths anyone may open below `base`: the login page, assets, approval links. */
function isOpenPath(path: string, base: string): boolean {
  return (
    path === `${base}/login` ||
    path.startsWith(`${base}/assets/`) ||
    path.startsWith(`${base}${APPROVAL_LINK_PAGE}/`) ||
    path.startsWith(`${base}/api${APPROVAL_LINK_API}/`)
  );
}

/** Signs a browser in with `token` (the login form, a link with ?token=): a session and
 *  its cookie, unless the token is wrong or the client has had too many wrong ones. */
function startSession(c: Context, token: string, s: SignIn): SignInResult {
  const client = clientOf(c);
  const wait = s.limiter.waitFor(client);
  if (wait > 0) return { ok: false, reason: "limited", retryAfterS: Math.ceil(wait / 1000) };
  const role = s.roles.ofToken(token);
  if (!role) {
    s.limiter.failed(client);
    return { ok: false, reason: "invalid" };
  }
  // The browser's previous session (signed in again, by the form or a link) ends: a copy
  // of its cookie must not outlive this one's logout.
  const previous = getCookie(c, SESSION_COOKIE);
  if (previous !== undefined) s.sessions.end(previous);
  setSession(c, s.sessions.create(role), s.cookiePath(c), new URL(c.req.url).protocol === "https:");
  return { ok: true, role };
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
    if (cookie !== undefined) role = s.sessions.roleOf(cookie);
  }
  // A link carrying ?token= signs the browser in, then drops the token from the URL. Only
  // a page opened as a page: an image, a frame or a fetch() of another site would
  // otherwise spend the limit of its visitors' address with wrong tokens (browsers say
  // what a request is for in Sec-Fetch-Dest, to https and loopback addresses).
  const queryToken = url.searchParams.get("token");
  const dest = c.req.header("sec-fetch-dest");
  if (
    c.req.method === "GET" &&
    !s.isApi(c, url.pathname) &&
    queryToken !== null &&
    (dest === undefined || dest === "document")
  ) {
    const signedIn = startSession(c, queryToken, s);
    const limited = !signedIn.ok && signedIn.reason === "limited";
    // A browser already signed in (its cookie) is not refused for following a link while
    // its address is limited: the link's token is not looked at, it goes to the page.
    if (!signedIn.ok && signedIn.reason === "limited" && role === undefined) {
      return { answer: s.refuse(c, tooManyAttempts(c, signedIn.retryAfterS)) };
    }
    if (signedIn.ok || limited) {
      url.searchParams.delete("token");
      // "//evil.example/?token=..." must not send the browser to evil.example.
      const path = `/${url.pathname.replace(/^\/+/, "")}`;
      return { answer: c.redirect(`${path}${url.search}`, 303) };
    }
  }
  if (role === undefined && !s.isOpen(c, url.pathname)) {
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

/** The refusal of a sign-in from a client that had too many wrong tokens. */
export function tooManyAttempts(c: Context, retryAfterS: number): HttpError {
  c.header("retry-after", String(retryAfterS));
  const minutes = Math.ceil(retryAfterS / 60);
  return new HttpError(
    429,
    "TOO_MANY_SIGN_INS",
    `Too many wrong tokens from this address; try again in ${minutes} minute${minutes === 1 ? "" : "s"}`,
  );
}

function setSession(c: Context, id: string, path: string, secure: boolean): void {
  setCookie(c, SESSION_COOKIE, id, {
    path,
    httpOnly: true,
    sameSite: "Strict",
    secure,
    maxAge: SESSION_MAX_AGE_MS / 1000,
  });
}
