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

/** The part of `path` the prefix matched, for comparisons only (never for output): as many
 *  segments as the prefix's pattern has, whatever they say, since a parameter (":tenant")
 *  is one segment. The checks compare the path below it with the app's own paths: compared
 *  with the base instead, a parameter's value could make a path look like one anyone may
 *  open ("/assets/api/runs" under route("/:tenant", ...)). Undefined when the pattern has a
 *  part that may match any number of segments (a wildcard, a regular expression, an
 *  optional parameter): then no path of the app is known, and none is open. */
export function mountedPartOf(c: Context, path: string): string | undefined {
  const parts = mountPatternOf(c).split("/").slice(1);
  if (parts.some((part) => /[*?{}]/.test(part))) return undefined;
  const segments = path.split("/");
  if (segments.length <= parts.length) return undefined;
  return segments.slice(0, parts.length + 1).join("/");
}

/** `path` below the prefix another Hono app put the routes under (mountedPartOf, as the
 *  app's first middleware read it), or undefined when that is not known. */
export function pathBelowMount(c: Context<AppEnv>, path: string): string | undefined {
  const at = c.get("mounted");
  return at !== undefined && path.startsWith(at) ? path.slice(at.length) : undefined;
}

/** The request's base (set by the app's first middleware), else the configured basePath. */
export function requestBase(c: Context<AppEnv>, basePath: string): string {
  return c.get("base") ?? basePath;
}
