// The dashboard's routes: the pages, their assets (served from this folder, no CDN, no
// build step for users), and signing in and out when the server has tokens.

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import type { Context, Hono } from "hono";
import { checkPathEncoding, checkText } from "../api/route.js";
import { APPROVAL_LINK_PAGE } from "../approval-link-paths.js";
import { HttpError } from "../errors.js";
import { requestBase } from "../public-base.js";
import { runIdFromSegment } from "../run-id-segment.js";
import { type AppEnv, type Security, tooManyAttempts } from "../security.js";
import { approvalLinkPage } from "./approval-page.js";
import { depsFor, type UiDeps } from "./layout.js";
import { loginPage, messagePage, notFoundPage, safeNext, workersPage } from "./pages.js";
import { runPage } from "./run-page.js";
import { runsPage } from "./runs-page.js";

const ASSETS: Record<string, string> = {
  "style.css": "text/css; charset=utf-8",
  "app.js": "text/javascript; charset=utf-8",
  "icon.svg": "image/svg+xml",
};

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
}

/** Reads the assets once; their hash versions the URLs pages link them by. */
export function loadAssets(): { assets: Map<string, Asset>; version: string } {
  const assets = new Map<string, Asset>();
  const all = createHash("sha256");
  for (const [name, type] of Object.entries(ASSETS)) {
    const body = readFileSync(new URL(`./assets/${name}`, import.meta.url));
    const hash = createHash("sha256").update(body).digest("base64url").slice(0, 16);
    all.update(hash);
    assets.set(name, { body, type, etag: `"${hash}"` });
  }
  return { assets, version: all.digest("base64url").slice(0, 10) };
}

export function mountDashboard(
  app: Hono<AppEnv>,
  o: { deps: UiDeps; security: Security; assets: Map<string, Asset> },
): void {
  const { deps, security } = o;
  const b = deps.basePath;

  app.get(`${b}/assets/:name`, (c) => {
    const asset = o.assets.get(c.req.param("name"));
    if (!asset) return c.body("Not found", 404);
    if (c.req.header("if-none-match") === asset.etag) return c.body(null, 304);
    return c.body(new Uint8Array(asset.body), 200, {
      "content-type": asset.type,
      etag: asset.etag,
      "cache-control": c.req.query("v") ? "public, max-age=86400" : "no-cache",
    });
  });

  app.get(b === "" ? "/" : b, (c) => runsPage(depsFor(deps, c), c));
  if (b !== "") app.get(`${b}/`, (c) => runsPage(depsFor(deps, c), c));

  app.get(`${b}/runs/:id`, (c) => {
    const id = runIdFromSegment(c.req.param("id"));
    try {
      // As GET /api/runs/{id}: escapes that are not UTF-8 name no run (Hono hands them over
      // as their literal text, the id of another run).
      checkPathEncoding(c, ["id"]);
      checkText(id, "The run id", 256);
    } catch (err) {
      if (err instanceof HttpError) return notFoundPage(depsFor(deps, c), c, err.message);
      throw err;
    }
    return runPage(depsFor(deps, c), c, id);
  });

  app.get(`${b}/workers`, (c) => workersPage(depsFor(deps, c), c));

  // An approval link's page: open without sign-in (its token is the credential).
  app.get(`${b}${APPROVAL_LINK_PAGE}/:token`, (c) => {
    const token = c.req.param("token");
    if (token.length > 2_000)
      return notFoundPage(depsFor(deps, c), c, "This is not an approval link.");
    return approvalLinkPage(depsFor(deps, c), c, token);
  });

  app.get(`${b}/login`, (c) => {
    const at = requestBase(c, b);
    if (!security.authRequired) return c.redirect(`${at}/`, 303);
    return loginPage(depsFor(deps, c), c, { status: 200, next: c.req.query("next") ?? `${at}/` });
  });

  app.post(`${b}/login`, async (c) => {
    const at = requestBase(c, b);
    if (!security.authRequired) return c.redirect(`${at}/`, 303);
    const form = await c.req.parseBody().catch(() => ({}) as Record<string, unknown>);
    const token = typeof form.token === "string" ? form.token : "";
    const next = safeNext(typeof form.next === "string" ? form.next : `${at}/`, at);
    const signedIn = security.signIn(c, token);
    if (!signedIn.ok) {
      const message =
        signedIn.reason === "limited"
          ? `${tooManyAttempts(c, signedIn.retryAfterS).message}.`
          : "That token is not valid.";
      const status = signedIn.reason === "limited" ? 429 : 401;
      return loginPage(depsFor(deps, c), c, { status, message, next });
    }
    return c.redirect(next, 303);
  });

  // Ends the session on the server, not only in this browser: a copy of the cookie is
  // worthless from now on.
  app.post(`${b}/logout`, (c) => {
    security.signOut(c);
    const at = requestBase(c, b);
    return c.redirect(security.authRequired ? `${at}/login` : `${at}/`, 303);
  });
}

/** A refused or failed page request, as a page. */
export function refusePage(
  deps: UiDeps,
  c: Context<AppEnv>,
  err: HttpError,
): Response | Promise<Response> {
  if (err.status === 401) {
    return loginPage(deps, c, { status: 401, next: new URL(c.req.url).pathname });
  }
  const title =
    err.status === 403
      ? "Not allowed"
      : err.status === 413
        ? "Too large"
        : err.status === 429
          ? "Too many attempts"
          : "Something went wrong";
  return messagePage(deps, c, err.status, title, err.message);
}
