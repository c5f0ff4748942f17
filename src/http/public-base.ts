// Where the app's paths begin as the browser sees them. Served on its own or taken into
// another Hono app with route("/", app.hono), that is the basePath option; taken in with
// route("/svc", app.hono), Hono answers the app's routes at "/svc" + basePath, a prefix the
// app cannot know when it is made. Links, redirects, the sign-in form, the session
// cookie's path and the API's own paths are built from the request's base instead.

import type { Context } from "hono";
import type { AppEnv } from "./security.js";

/** The prefix a Hono app that took this app's routes put them under ("" for none), read in
 *  a middleware the app registered for every path ("*"), whose route is then "<prefix>/*".
 *  Only a plain prefix, as a basePath may be: one with parameters ("/t/:tenant") would have
 *  to be filled from the request's own path, text that would then reach links and the
 *  cookie's Path; under such a prefix the app keeps its basePath (mount it with
 *  route("/", app.hono) and a basePath instead). */
export function mountPrefixOf(c: Context): string {
  const mount = mountPatternOf(c);
  return PLAIN_PREFIX.test(mount) ? mount : "";
}

/** The route pattern of that prefix, parameters and all ("/t/:tenant"). */
export function mountPatternOf(c: Context): string {
  return c.req.routePath.replace(/\/?\*$/, "");
}

const PLAIN_PREFIX = /^(\/[A-Za-z0-9._~-]+)*$/;

/** The request's base (set by the app's first middleware), else the configured basePath. */
export function requestBase(c: Context<AppEnv>, basePath: string): string {
  return c.get("base") ?? basePath;
}
