// The API: every route, in one list. A feature that adds routes (a module of its own, like
// actions.ts) adds them here; the app, the access checks and the OpenAPI document follow.

import { readFileSync } from "node:fs";
import type { Context, Hono } from "hono";
import { errorAnswer } from "../errors.js";
import type { AppEnv } from "../security.js";
import { actionRoutes } from "./actions.js";
import { approvalRoutes } from "./approvals.js";
import { liveRoutes } from "./live.js";
import { modelStreamRoutes } from "./model-stream.js";
import { openapiDocument } from "./openapi.js";
import { type ApiDeps, json, type Route, readInput, route } from "./route.js";
import { runRoutes } from "./runs.js";
import { systemRoutes } from "./system.js";
import { workspaceRoutes } from "./workspaces.js";

const openapiRoute = route({
  method: "get",
  path: "/openapi.json",
  operationId: "openapi",
  summary: "This document",
  tag: "system",
  access: "read",
  responses: { 200: { description: "The OpenAPI 3.1 document." } },
  handle({ c }) {
    const doc = c.get("openapi") as { servers: Array<{ url: string }> };
    // Taken into another Hono app under a prefix (public-base.ts), the API is reached there.
    const url = c.get("base") || "/";
    return json(c, 200, doc.servers[0]?.url === url ? doc : { ...doc, servers: [{ url }] });
  },
});

export const API_ROUTES: readonly Route[] = [
  ...runRoutes,
  ...actionRoutes,
  ...approvalRoutes,
  ...workspaceRoutes,
  ...systemRoutes,
  ...liveRoutes,
  ...modelStreamRoutes,
  openapiRoute,
];

function packageVersion(): string {
  try {
    // src/http/api and dist/http/api both sit three levels below package.json.
    const pkg = JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8"));
    return String(pkg.version);
  } catch {
    return "0.0.0";
  }
}

/** Hono's path syntax for an OpenAPI path template. */
export function honoPath(path: string): string {
  return path.replace(/\{(\w+)\}/g, ":$1");
}

export function apiError(c: Context, err: unknown, log: (message: string) => void): Response {
  const { status, body } = errorAnswer(err, log);
  return json(c, status, body);
}

export function mountApi(
  app: Hono<AppEnv>,
  o: { basePath: string; deps: ApiDeps; log: (message: string) => void },
): void {
  const document = openapiDocument([...API_ROUTES], {
    version: packageVersion(),
    basePath: o.basePath,
  });
  for (const r of API_ROUTES) {
    app.on(r.method.toUpperCase(), `${o.basePath}/api${honoPath(r.path)}`, async (c) => {
      try {
        if (r.access === "act") o.deps.requireAct(c);
        c.set("openapi", document);
        const input = await readInput(r, c);
        return await r.handle({ c, ...input, deps: o.deps });
      } catch (err) {
        return apiError(c, err, o.log);
      }
    });
  }
}
