// Where the app's paths begin as the browser sees them. Served on its own or taken into
// another Hono app with route("/", app.hono), that is the basePath option; taken in with
// route("/svc", app.hono), Hono answers the app's routes at "/svc" + basePath, a prefix the
// app cannot know when it is made. Links, redirects, the sign-in form, the session
// cookie's path and the API's own paths are built from the request's base instead.

import type { Context } from "hono";
import type { AppEnv } from "./security.js";

/** The prefix a Hono app that took this app's routes put them under ("" for none), read in
 *  a middleware the app registered for every path ("*"), whose route is then "<prefix>/*". */
export function mountPrefixOf(c: Context): string {
  return c.req.routePath.replace(/\/?\*$/, "");
}

/** The request's base (set by the app's first middleware), else the configured basePath. */
export function requestBase(c: Context<AppEnv>, basePath: string): string {
  return c.get("base") ?? basePath;
}
