// createHttpApp: the HTTP API and the dashboard as one Hono app over an Engine, to serve
// with serveHttp (server.ts, what `cairn ui` does) or to mount in your own server (its
// `fetch` for Hono/Bun/Deno-style servers, `requestListener` for node:http and Express).

import type { IncomingMessage, ServerResponse } from "node:http";
import { getRequestListener } from "@hono/node-server";
import { type Context, Hono } from "hono";
import { type Clock, type Engine, realClock } from "../index.js";
import { MAX_DURATION_MS } from "../lib/duration.js";
import { neverThrows } from "../lib/never-throws.js";
import { unknownOptionNames, unknownOptionsText } from "../lib/option-names.js";
import { dotSegmentRefusal } from "./api/dot-segments.js";
import { apiError, mountApi } from "./api/index.js";
import { errorAnswer, HttpError, quote } from "./errors.js";
import { LiveHub } from "./live/hub.js";
import { StreamTails } from "./live/stream-tail.js";
import { mountedPartOf, mountPrefixOf, pathBelowMount } from "./public-base.js";
import { type AppEnv, createSecurity, isApiPath, type SecurityOptions } from "./security.js";
import { loadAssets, mountDashboard, refusePage } from "./ui/index.js";
import { depsFor, type UiDeps } from "./ui/layout.js";
import { messagePage } from "./ui/pages.js";

export interface HttpAppOptions extends SecurityOptions {
  /** The engine to inspect and steer; usually a client (`worker: false`). The workflows it
   *  was created with are the ones the API can start runs of. */
  engine: Engine;
  /** Where the app is mounted, e.g. "/cairn" (default: the root). */
  basePath?: string;
  /** How often live streams poll the store. Default 1000 ms. */
  pollIntervalMs?: number;
  /** The app's notion of now: the dashboard's ages and bars of what is still running,
   *  sessions' expiry, the sign-in limit's window. */
  clock?: Clock;
  /** Receives problems (never payloads). Default: console.error. */
  log?: (message: string) => void;
  /** Host names the server is bound to (serveHttp sets it); they are allowed as Host. */
  boundHosts?: string[];
}

export interface HttpApp {
  /** Web-standard handler: Request in, Response out. `env` is the server's (on node:http,
   *  `{ incoming, outgoing }`: the sign-in limit counts by the connection's address). */
  fetch(request: Request, env?: unknown): Promise<Response>;
  /** A node:http request listener (http.createServer(app.requestListener), Express). */
  requestListener: (req: IncomingMessage, res: ServerResponse) => void;
  /** The Hono app, to mount with app.route() or to add routes beside. */
  readonly hono: Hono<AppEnv>;
  /** Ends the live streams (the engine is yours to close). */
  close(): void;
}

const CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "form-action 'self'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join("; ");

/** The options createHttpApp takes (`boundHosts` is serveHttp's). */
export const HTTP_APP_OPTIONS = [
  "engine",
  "basePath",
  "token",
  "readToken",
  "allowedHosts",
  "allowedOrigins",
  "allowUnauthenticated",
  "maxBodyBytes",
  "pollIntervalMs",
  "clock",
  "log",
] as const satisfies readonly (keyof HttpAppOptions)[];
// An option added to HttpAppOptions (or SecurityOptions) but not to HTTP_APP_OPTIONS fails to
// compile here, rather than be refused at run time as misspelt.
const EVERY_HTTP_APP_OPTION: Exclude<
  keyof HttpAppOptions,
  (typeof HTTP_APP_OPTIONS)[number] | "boundHosts"
> extends never
  ? true
  : never = true;
void EVERY_HTTP_APP_OPTION;

/** An engine and options of the names the app takes: a misspelt `tokn` or `basepath` was
 *  dropped (an app with no token, at the root), and a missing engine failed every request. */
export function checkHttpAppOptions(
  what: string,
  options: unknown,
  known: readonly string[],
): void {
  if (typeof options !== "object" || options === null) {
    throw new TypeError(
      `${what}: options must be an object with an engine, got ${options === null ? "null" : typeof options}`,
    );
  }
  const engine = (options as { engine?: Partial<Engine> }).engine;
  if (typeof engine !== "object" || engine === null || typeof engine.getRun !== "function") {
    throw new TypeError(
      `${what}: engine must be an engine (createEngine({ store, worker: false }) is enough), got ${engine === null ? "null" : typeof engine}`,
    );
  }
  const unknown = unknownOptionNames(options, known);
  if (unknown.length > 0) throw new TypeError(`${what}: ${unknownOptionsText(unknown, known)}`);
}

export function createHttpApp(options: HttpAppOptions): HttpApp {
  checkHttpAppOptions("createHttpApp()", options, [...HTTP_APP_OPTIONS, "boundHosts"]);
  const basePath = normalizeBase(options.basePath ?? "");
  const log = problemLog(options.log);
  const { assets, version } = loadAssets();
  const uiDeps: UiDeps = {
    engine: options.engine,
    basePath,
    clock: options.clock ?? realClock,
    authRequired: options.token !== undefined || options.readToken !== undefined,
    assetVersion: version,
  };
  const isApi = (c: Context<AppEnv>) =>
    isApiPath(pathBelowMount(c, new URL(c.req.url).pathname), basePath);
  const refuse = (c: Context<AppEnv>, err: HttpError) =>
    isApi(c) ? apiError(c, err, log) : refusePage(depsFor(uiDeps, c), c, err);
  const security = createSecurity(options, {
    basePath,
    clock: uiDeps.clock,
    ...(options.boundHosts ? { boundHosts: options.boundHosts } : {}),
    refuse,
  });
  const pollMs = checkPollInterval(options.pollIntervalMs ?? 1_000);
  const live = new LiveHub({ pollMs, log });
  const streams = new StreamTails({ engine: options.engine, pollMs, log });

  const app = new Hono<AppEnv>();
  // Mounted in another Hono app (its route()), these middlewares are the other app's too:
  // they leave its own routes, outside the base path, alone (no CSP, token or Host check
  // of this app on them).
  const owns = ownsRequest(basePath);
  app.use("*", async (c, next) => {
    c.set("mounted", mountedPartOf(c, new URL(c.req.url).pathname));
    if (!owns(c)) return next();
    const mount = mountPrefixOf(c);
    c.set("base", mount + basePath);
    // Taken in with route("/svc", ...), an app at the root answers its runs page at "/svc"
    // only (Hono joins "/svc" and "/" so), while its links say "/svc/", as they say "/".
    if (basePath === "" && mount !== "" && c.req.path === `${mount}/` && c.req.method === "GET") {
      return c.redirect(`${mount}${new URL(c.req.url).search}`, 308);
    }
    await next();
    // Taken in with route(), an API path that no route of the app has was answered by the
    // other app's notFound (Hono carries none over): its text, where API clients read a
    // JSON error. Only middlewares (method "ALL") matched: nothing of the app answered.
    const answered = c.res;
    if (
      answered.status === 404 &&
      isApi(c) &&
      !ownNotFound.has(answered) &&
      c.req.matchedRoutes.every((r) => r.method === "ALL")
    ) {
      c.res = await notFound(c);
    }
    securityHeaders(c);
  });
  app.use("*", (c, next) => (owns(c) ? security.middleware(c, next) : next()));
  mountApi(app, {
    basePath,
    log,
    deps: {
      engine: options.engine,
      live,
      streams,
      log,
      requireAct: security.requireAct,
    },
  });
  mountDashboard(app, { deps: uiDeps, security, assets });

  // The app's own 404 answers (served on its own, its notFound runs itself).
  const ownNotFound = new WeakSet<Response>();
  const notFound = async (c: Context<AppEnv>) => {
    const res = await notFoundAnswer(c);
    ownNotFound.add(res);
    return res;
  };
  const notFoundAnswer = (c: Context<AppEnv>) => {
    securityHeaders(c);
    const pathname = new URL(c.req.url).pathname;
    const own = pathBelowMount(c, pathname) ?? "";
    // A path the app has routes for, asked with another method: 405 naming the methods it
    // takes (a 404 said the path did not exist).
    const allow = allowedMethods(app, own);
    if (allow.length > 0) c.header("allow", allow.join(", "));
    if (isApi(c)) {
      const dots = dotSegmentRefusal(c.req.method, own.slice(`${basePath}/api`.length));
      if (dots) return apiError(c, dots, log);
      const what = `${c.req.method} ${quote(pathname, 120)}`;
      if (allow.length > 0) {
        const message = `${what} is not an API route; ${quote(pathname, 120)} takes ${allow.join(", ")}`;
        return apiError(c, new HttpError(405, "METHOD_NOT_ALLOWED", message), log);
      }
      const slashed = slashedRunId(app, own, `${basePath}/api/runs/`, c.req.method);
      const hint = slashed ? `; ${slashedHint(pathname, own, slashed, c.req.method)}` : "";
      return apiError(c, new HttpError(404, "NOT_FOUND", `No API route ${what}${hint}`), log);
    }
    if (allow.length > 0) {
      return messagePage(
        depsFor(uiDeps, c),
        c,
        405,
        "Method not allowed",
        `${quote(c.req.path, 120)} takes ${allow.join(", ")}, not ${quote(c.req.method, 20)}.`,
      );
    }
    return messagePage(
      depsFor(uiDeps, c),
      c,
      404,
      "Not found",
      `Nothing here: ${quote(c.req.path, 120)}.${pageHint(app, pathname, own, basePath, c.req.method)}`,
    );
  };
  app.notFound(notFound);
  app.onError((err, c) => {
    if (isApi(c)) return apiError(c, err, log);
    // A page fails as the API answers the same error: the engine closing or the store down
    // is a 503 saying so (its message names no payload); only what the API calls INTERNAL
    // is an unexpected error, logged, its message kept from the page.
    const { status, body } = errorAnswer(err, log);
    const internal = status >= 500 && status !== 503;
    return messagePage(
      depsFor(uiDeps, c),
      c,
      status,
      status === 503 ? "Unavailable" : "Something went wrong",
      internal ? "The server's log has the details." : body.error.message,
    );
  });

  const fetch = (request: Request, env?: unknown) => Promise.resolve(app.fetch(request, env));
  return {
    fetch,
    requestListener: getRequestListener(fetch),
    hono: app,
    close: () => {
      live.close();
      streams.close();
    },
  };
}

const METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"] as const;

/** The methods the app's own routes take at `path` (below any mount): none for a path it has
 *  no route for. HEAD goes with GET (Hono answers it from the GET route). Middlewares
 *  (method "ALL") are no route of a path. */
function allowedMethods(app: Hono<AppEnv>, path: string): string[] {
  if (path === "") return [];
  const takes = (method: string) => {
    const [matched] = app.router.match(method, path);
    return matched.some(([[, route]]) => route.method !== "ALL");
  };
  const get = takes("GET");
  return METHODS.filter((m) => (m === "HEAD" ? get : m === "GET" ? get : takes(m)));
}

/** A run id holding "/" (a child run's: "parent/key") sent as it is splits into path
 *  segments and matches no route. The path it was likely meant as: the shortest id of two
 *  or more segments that, as one segment ("/" as %2F), makes a route of `method`. */
function slashedRunId(
  app: Hono<AppEnv>,
  own: string,
  prefix: string,
  method: string,
): string | undefined {
  if (!own.startsWith(prefix)) return undefined;
  const segments = own.slice(prefix.length).split("/");
  for (let i = 2; i <= segments.length; i++) {
    const id = segments.slice(0, i);
    if (id.some((s) => s === "")) return undefined;
    const rest = segments.slice(i);
    const path = `${prefix}${id.join("%2F")}${rest.length > 0 ? `/${rest.join("/")}` : ""}`;
    if (allowedMethods(app, path).includes(method)) return path;
  }
  return undefined;
}

/** The words for slashedRunId's path, as the client reaches it (the mount included). */
function slashedHint(pathname: string, own: string, slashed: string, method: string): string {
  const mount = pathname.slice(0, pathname.length - own.length);
  return `a run id holding "/" (a child run's, "parent/key") is one path segment, its "/" written %2F (encodeURIComponent): ${method} ${quote(mount + slashed, 160)}`;
}

function pageHint(
  app: Hono<AppEnv>,
  pathname: string,
  own: string,
  basePath: string,
  method: string,
): string {
  const slashed = slashedRunId(app, own, `${basePath}/runs/`, method);
  if (!slashed) return "";
  const hint = slashedHint(pathname, own, slashed, method);
  return ` ${hint.charAt(0).toUpperCase()}${hint.slice(1)}.`;
}

function securityHeaders(c: Context): void {
  c.header("content-security-policy", CSP);
  c.header("x-content-type-options", "nosniff");
  c.header("referrer-policy", "no-referrer");
  c.header("x-frame-options", "DENY");
  c.header("cross-origin-opener-policy", "same-origin");
  c.header("cross-origin-resource-policy", "same-origin");
}

/** Whether a request is for this app: a path below its base path (every path when it is
 *  mounted at the root), relative to where a Hono app that took its routes with route()
 *  put them (the prefix of the middleware's own route, "/x/*" for route("/x", ...)). */
function ownsRequest(basePath: string): (c: Context) => boolean {
  return (c) => {
    if (basePath === "") return true;
    // The path as Hono routes it, below the prefix's segments (parameters included: the
    // owner's own routes beside the app's under "/t/:tenant" are the owner's). A prefix
    // whose extent is not known takes every request as this app's (checked).
    const mounted = mountedPartOf(c, c.req.path);
    if (mounted === undefined) return true;
    const own = c.req.path.slice(mounted.length);
    return own === basePath || own.startsWith(`${basePath}/`);
  };
}

/** Refused as createEngine's pollIntervalMs is: unchecked, NaN, 0, a negative value or one
 *  past setTimeout's 2^31-1 ms made every live stream poll the store each millisecond. */
function checkPollInterval(ms: unknown): number {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms <= 0 || ms > MAX_DURATION_MS) {
    throw new TypeError(
      `cairn http: pollIntervalMs must be a finite number of milliseconds > 0, at most 100,000 years (got ${typeof ms === "string" ? JSON.stringify(ms) : String(ms)})`,
    );
  }
  return ms;
}

function normalizeBase(base: string): string {
  if (base === "" || base === "/") return "";
  if (!/^(\/[A-Za-z0-9._~-]+)+$/.test(base)) {
    throw new TypeError(
      `cairn http: basePath ${JSON.stringify(base)} must start with "/" and not end with one, e.g. "/cairn"`,
    );
  }
  return base;
}

/** Where the app's problems go: the `log` option, else stderr. A `log` that throws must not
 *  fail a request, nor become an unhandled rejection where a live stream's poll reports a
 *  problem it has already handled. */
export function problemLog(log?: (message: string) => void): (message: string) => void {
  return neverThrows(log ?? ((message: string) => console.error(`cairn http: ${message}`)));
}
