// The OpenAPI 3.1 document, built from the route list itself (route.ts): every route the
// app serves is in it with the schemas its inputs are validated against.

import type { JsonSchema } from "../schema.js";
import { COMPONENTS } from "./models.js";
import type { ParamSpec, Route } from "./route.js";

const ERROR_TEXT: Record<number, string> = {
  400: "Invalid input (VALIDATION, INPUT_VALIDATION, SERIALIZATION).",
  401: "No valid token (UNAUTHORIZED).",
  403: "Refused: a read-only token acting (FORBIDDEN), a foreign Host (FORBIDDEN_HOST), a cross-site request (FORBIDDEN_ORIGIN), or an approval link whose token is forged, malformed or expired (APPROVAL_TOKEN).",
  404: "No such run (RUN_NOT_FOUND), workflow (UNKNOWN_WORKFLOW), approval (APPROVAL_NOT_FOUND), or checkpoint or file of the run (WORKSPACE_NOT_FOUND).",
  410: "A workspace checkpoint's objects are no longer stored intact (WORKSPACE).",
  409: "The run's state does not allow it, or the id is taken (RUN_CONFLICT), or a limit is reached (LIMIT).",
  413: "The request body is too large (PAYLOAD_TOO_LARGE).",
  415: "The request body is not JSON (UNSUPPORTED_MEDIA_TYPE).",
  500: "An unexpected error (INTERNAL); the server's log has the details.",
  503: "The store cannot be used (STORE).",
};

function parameters(r: Route): JsonSchema[] {
  const out: JsonSchema[] = [];
  const add = (where: string, specs: Record<string, ParamSpec> | undefined) => {
    for (const [name, spec] of Object.entries(specs ?? {})) {
      const p: Record<string, unknown> = {
        name,
        in: where,
        required: where === "path" ? true : (spec.required ?? false),
        description: spec.description,
        schema: spec.schema.json,
      };
      if (spec.schema.json.type === "array") {
        p.style = "form";
        p.explode = false;
      }
      out.push(p);
    }
  };
  add("path", r.params);
  add("query", r.query);
  add("header", r.headers);
  return out;
}

/** Every status a route may answer, success and error. */
export function statusesOf(r: Route): number[] {
  const errors = new Set([401, 403, 500, 503, ...(r.errors ?? [])]);
  if (r.params || r.query || r.headers || r.body) errors.add(400);
  if (r.body) {
    errors.add(413);
    errors.add(415);
  }
  return [...Object.keys(r.responses).map(Number), ...errors].sort((a, b) => a - b);
}

function operation(r: Route): JsonSchema {
  const responses: Record<string, unknown> = {};
  for (const status of statusesOf(r)) {
    const ok = r.responses[status];
    if (ok) {
      const type = ok.contentType ?? "application/json";
      responses[String(status)] = {
        description: ok.description,
        content: { [type]: ok.schema ? { schema: ok.schema.json } : {} },
      };
    } else {
      responses[String(status)] = {
        description: ERROR_TEXT[status] ?? "An error.",
        content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } },
      };
    }
  }
  const op: Record<string, unknown> = {
    operationId: r.operationId,
    summary: r.summary,
    tags: [r.tag],
    parameters: parameters(r),
    responses,
  };
  if (r.description) op.description = r.description;
  if (r.body) {
    op.requestBody = {
      required: r.body.required,
      description: r.body.description,
      content: { "application/json": { schema: r.body.schema.json } },
    };
  }
  if (r.access === "act") op["x-cairn-access"] = "act";
  if (r.access === "link") {
    // The path carries its own credential (a signed approval link): no bearer token.
    op["x-cairn-access"] = "link";
    op.security = [];
  }
  return op;
}

export function openapiDocument(
  routes: Route[],
  o: { version: string; basePath: string },
): JsonSchema {
  const paths: Record<string, Record<string, JsonSchema>> = {};
  for (const r of routes) {
    const path = `/api${r.path}`;
    paths[path] ??= {};
    paths[path][r.method] = operation(r);
  }
  const schemas: Record<string, JsonSchema> = {};
  for (const [name, schema] of Object.entries(COMPONENTS)) schemas[name] = schema.json;
  return {
    openapi: "3.1.0",
    info: {
      title: "cairn",
      version: o.version,
      description:
        "See and steer cairn runs. Errors are JSON {error: {code, message, issues?}}. When " +
        "the server has tokens, send one as `Authorization: Bearer <token>`; the read-only " +
        'token may call operations without x-cairn-access "act" only.',
    },
    servers: [{ url: o.basePath === "" ? "/" : o.basePath }],
    security: [{}, { bearer: [] }],
    paths,
    components: {
      schemas,
      securitySchemes: { bearer: { type: "http", scheme: "bearer" } },
    },
  };
}
