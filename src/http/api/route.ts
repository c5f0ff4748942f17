// One API route as data: method, path, who may call it, its parameters and body as
// schemas, its documented responses, and its handler. The app registers routes from this
// and the OpenAPI document is built from the same list, so the two cannot drift apart.
// Parameters and bodies are validated here, before a handler sees them.

import type { Context } from "hono";
import type { Engine } from "../../index.js";
import { leadingText } from "../../lib/text.js";
import { HttpError, quote } from "../errors.js";
import { jsonNumberProblem } from "../json-numbers.js";
import type { LiveHub } from "../live/hub.js";
import type { StreamTails } from "../live/stream-tail.js";
import { type Issue, type JsonSchema, type Schema, validate } from "../schema.js";
import type { AppEnv } from "../security.js";
import { resolveComponent } from "./models.js";

export interface ParamSpec {
  schema: Schema<unknown>;
  description: string;
  required?: boolean;
  /** A path parameter's value from its decoded segment, before it is checked (a run id's
   *  escape: run-id-segment.ts). */
  fromSegment?(segment: string): string;
}

export interface ResponseSpec {
  description: string;
  /** application/json body, or the SSE stream for "text/event-stream". */
  schema?: Schema<unknown>;
  contentType?: "application/json" | "text/event-stream";
}

/** What handlers use: the engine, live feeds, and the app's settings. */
export interface ApiDeps {
  engine: Engine;
  live: LiveHub;
  /** Runs' model streams, followed once per run for all clients. */
  streams: StreamTails;
  /** Receives problems (never payloads). */
  log: (message: string) => void;
  /** Requires the "act" role (403 otherwise). */
  requireAct(c: Context<AppEnv>): void;
}

export interface RouteInput<B> {
  c: Context<AppEnv>;
  params: Record<string, string>;
  query: Record<string, unknown>;
  body: B | undefined;
  deps: ApiDeps;
}

export interface Route<B = unknown> {
  method: "get" | "post";
  /** OpenAPI path template below /api, e.g. "/runs/{id}". */
  path: string;
  operationId: string;
  summary: string;
  description?: string;
  tag: string;
  /** "act" routes change something: the read-only token gets 403. "link" routes need no
   *  token: the credential is in the path (an approval link's signed token). */
  access: "read" | "act" | "link";
  params?: Record<string, ParamSpec>;
  query?: Record<string, ParamSpec>;
  headers?: Record<string, ParamSpec>;
  body?: { schema: Schema<B>; required: boolean; description: string };
  /** Success responses by status; error responses are added from `errors`. */
  responses: Record<number, ResponseSpec>;
  /** Error statuses this route answers besides the common ones. */
  errors?: number[];
  handle(input: RouteInput<B>): Response | Promise<Response>;
}

/** Declares a route; the body's type comes from its schema. */
export function route<B = unknown>(r: Route<B>): Route {
  return r as unknown as Route;
}

// ---- inputs ----

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Identifiers and filter text: no NUL (PostgreSQL cannot store it), no lone surrogate
 *  (not valid Unicode, so not what any stored id holds). */
export function checkText(value: string, where: string, max: number): void {
  if (value.length > max) {
    throw new HttpError(400, "VALIDATION", `${where} is longer than ${max} characters`);
  }
  if (value.includes("\u0000") || LONE_SURROGATE.test(value)) {
    throw new HttpError(
      400,
      "VALIDATION",
      `${where} contains a NUL character or invalid Unicode (a lone surrogate)`,
    );
  }
}

/** Refuses a header value that is not printable ASCII. A header travels as bytes whose
 *  text encoding the server cannot know: Node reads them as Latin-1, so "clé" sent as UTF-8
 *  would be stored as "clÃ©", a key no other door (the engine, the CLI) would match. */
function checkHeaderText(name: string, value: string): void {
  if (/^[\x20-\x7e]*$/.test(value)) return;
  throw new HttpError(
    400,
    "VALIDATION",
    `header ${quote(name)} holds characters outside printable ASCII: a header's bytes do not say their text encoding, so the value could be read as another one than sent; use ASCII (a UUID, a hex digest). Nothing was done`,
  );
}

/** Runs one of the engine's own checks of what a request asks for (a run id, a budget, a
 *  version) before the engine is called: what it refuses, with a TypeError naming the
 *  problem, is the client's error (400 VALIDATION), not an internal one. */
export function engineCheck(check: () => void): void {
  try {
    check();
  } catch (err) {
    if (err instanceof TypeError) throw new HttpError(400, "VALIDATION", err.message);
    throw err;
  }
}

function refuseIssues(what: string, issues: Issue[], pathText = (path: string) => path): never {
  const first = issues[0];
  // Cut between whole characters: half an emoji is a lone surrogate in the JSON.
  const where = first ? `${what}${leadingText(pathText(first.path), 100)}` : what;
  throw new HttpError(
    400,
    "VALIDATION",
    `${where} ${first?.message ?? "is invalid"}`,
    issues.map((i) => ({ path: leadingText(i.path, 200), message: i.message })),
  );
}

/** Checks every string inside a parsed body that the schema names a string. */
function checkStrings(schema: JsonSchema, value: unknown, where: string): void {
  if (typeof value === "string" && schema.type === "string") {
    checkText(value, where, typeof schema.maxLength === "number" ? schema.maxLength : 10_000);
    return;
  }
  if (value && typeof value === "object" && !Array.isArray(value) && schema.type === "object") {
    const props = (schema.properties ?? {}) as Record<string, JsonSchema>;
    for (const [k, v] of Object.entries(value)) {
      const sub = Object.hasOwn(props, k) ? props[k] : undefined;
      if (sub) checkStrings(sub, v, `${where}.${k}`);
      else if (typeof schema.additionalProperties === "object") checkText(k, `${where} key`, 200);
    }
  }
}

/** The first run of percent-escapes in `raw` that is not UTF-8 (a cut emoji "%F0%9F", a
 *  Latin-1 "%E9", a lone surrogate "%ED%A0%80"): Hono hands such a run over undecoded,
 *  as its literal text, which would be stored as a name nobody sent. */
function undecodable(raw: string): string | undefined {
  for (const run of raw.match(/(?:%[0-9A-Fa-f]{2})+/g) ?? []) {
    try {
      decodeURIComponent(run);
    } catch {
      return run;
    }
  }
  return undefined;
}

function notUtf8(where: string, run: string): HttpError {
  return new HttpError(
    400,
    "VALIDATION",
    `${where} holds percent-encoded bytes that are not UTF-8 (${quote(run, 40)}): invalid Unicode; percent-encode the text's UTF-8 bytes. Nothing was done`,
  );
}

/** Refuses a path whose percent-encoding does not decode, naming the parameter it is in
 *  (the dashboard's pages check theirs with it too). */
export function checkPathEncoding(c: Context, names: string[]): void {
  const run = undecodable(new URL(c.req.url).pathname);
  if (run === undefined) return;
  const name = names.find((n) => c.req.param(n)?.includes(run));
  throw notUtf8(name === undefined ? "The URL path" : `path parameter ${quote(name)}`, run);
}

/** Refuses a value of one of the query parameters `names` whose percent-encoding does not
 *  decode (c.req.query would hand it over undecoded). */
function checkQueryEncoding(c: Context, names: string[]): void {
  const search = new URL(c.req.url).search.slice(1);
  for (const pair of search.split("&")) {
    const eq = pair.indexOf("=");
    const run = eq < 0 ? undefined : undecodable(pair.slice(eq + 1));
    if (run === undefined) continue;
    let name = pair.slice(0, eq).replace(/\+/g, " ");
    try {
      name = decodeURIComponent(name);
    } catch {
      // a name that does not decode names no parameter of ours
    }
    if (names.includes(name)) throw notUtf8(`query parameter ${quote(name)}`, run);
  }
}

/** Refuses a query parameter given more than once (`?status=waiting&status=failed`): one
 *  value was read and the others dropped without a word. A list is one value, its items
 *  separated by commas (OpenAPI's `explode: false`). Empty values count as none. */
function checkRepeats(c: Context, specs: Record<string, ParamSpec>): void {
  for (const [name, spec] of Object.entries(specs)) {
    const values = (c.req.queries(name) ?? []).filter((v) => v !== "");
    if (values.length < 2) continue;
    const list = spec.schema.json.type === "array";
    throw new HttpError(
      400,
      "VALIDATION",
      `query parameter ${quote(name)} is given ${values.length} times; give it once${list ? `, its values separated by commas: ${quote(`${name}=${values.join(",")}`, 80)}` : ""}. Nothing was done`,
    );
  }
}

/** A query parameter's value: its one value that is not empty (checkRepeats refused more),
 *  so `?workflow=&workflow=x` reads "x", not the empty first. */
function queryValue(c: Context, name: string): string | undefined {
  const values = c.req.queries(name);
  return values?.find((v) => v !== "") ?? values?.[0];
}

function parseParam(name: string, raw: string, spec: ParamSpec, where: string): unknown {
  const schema = spec.schema.json;
  checkText(raw, `${where} ${quote(name)}`, (schema.maxLength as number | undefined) ?? 1_000);
  let value: unknown = raw;
  if (schema.type === "integer") {
    value = /^-?\d{1,15}$/.test(raw) ? Number(raw) : Number.NaN;
    if (Number.isNaN(value)) {
      throw new HttpError(400, "VALIDATION", `${where} ${quote(name)} must be a whole number`);
    }
  } else if (schema.type === "boolean") {
    if (raw !== "true" && raw !== "false") {
      throw new HttpError(400, "VALIDATION", `${where} ${quote(name)} must be true or false`);
    }
    value = raw === "true";
  } else if (schema.type === "array") {
    value = raw === "" ? [] : raw.split(",");
  }
  const issues = validate(schema, value, resolveComponent);
  if (issues.length > 0) refuseIssues(`${where} ${quote(name)}`, issues, itemText);
  return value;
}

/** Where in a parameter's value an issue is, in words: a list's item by its place
 *  (`query parameter "status" (its 2nd value) must be one of: ...`), not as the JSON
 *  Pointer "/1" a body's issues use. */
function itemText(path: string): string {
  const item = /^\/(\d+)$/.exec(path);
  if (!item) return path;
  const n = Number(item[1]) + 1;
  const tens = n % 100;
  const suffix = tens >= 11 && tens <= 13 ? "th" : (["th", "st", "nd", "rd"][n % 10] ?? "th");
  return ` (its ${n}${suffix} value)`;
}

/** Parses the query parameters `specs` describes (the dashboard's pages use the API's). */
export function readQuery(c: Context, specs: Record<string, ParamSpec>): Record<string, unknown> {
  checkQueryEncoding(c, Object.keys(specs));
  checkRepeats(c, specs);
  const query: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(specs)) {
    const raw = queryValue(c, name);
    if (raw !== undefined && raw !== "")
      query[name] = parseParam(name, raw, spec, "query parameter");
  }
  return query;
}

export async function readInput(
  r: Route,
  c: Context<AppEnv>,
): Promise<Omit<RouteInput<unknown>, "deps" | "c">> {
  checkPathEncoding(c, Object.keys(r.params ?? {}));
  checkQueryEncoding(c, Object.keys(r.query ?? {}));
  checkRepeats(c, r.query ?? {});
  const params: Record<string, string> = {};
  for (const [name, spec] of Object.entries(r.params ?? {})) {
    const segment = c.req.param(name) ?? "";
    const raw = spec.fromSegment ? spec.fromSegment(segment) : segment;
    params[name] = parseParam(name, raw, spec, "path parameter") as string;
  }
  const query: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(r.query ?? {})) {
    const raw = queryValue(c, name);
    // An empty value (a form's empty field: ?workflow=&q=) is no value, as the dashboard's
    // pages read it (readQuery): one URL lists the same runs on the page, in the API and
    // in its live stream.
    if (raw === undefined || raw === "") {
      if (spec.required) {
        throw new HttpError(400, "VALIDATION", `query parameter ${quote(name)} is required`);
      }
      continue;
    }
    query[name] = parseParam(name, raw, spec, "query parameter");
  }
  for (const [name, spec] of Object.entries(r.headers ?? {})) {
    const raw = c.req.header(name);
    if (raw === undefined) continue;
    checkHeaderText(name, raw);
    query[name] = parseParam(name, raw, spec, "header");
  }
  let body: unknown;
  if (r.body) {
    const text = bodyText(new Uint8Array(await c.req.arrayBuffer()));
    if (text.trim() === "") {
      if (r.body.required) {
        throw new HttpError(400, "VALIDATION", "A JSON request body is required");
      }
    } else {
      const type = c.req.header("content-type") ?? "";
      if (!/^application\/([\w.+-]+\+)?json\s*(;|$)/i.test(type)) {
        throw new HttpError(
          415,
          "UNSUPPORTED_MEDIA_TYPE",
          "The request body must be JSON (Content-Type: application/json)",
        );
      }
      try {
        body = JSON.parse(text);
      } catch {
        throw new HttpError(400, "VALIDATION", "The request body is not valid JSON");
      }
      checkJsonNumbers(text);
      const issues = validate(r.body.schema.json, body, resolveComponent);
      if (issues.length > 0) refuseIssues("body", issues);
      checkStrings(r.body.schema.json, body, "body");
    }
  }
  return { params, query, body };
}

/** A body's bytes as text: JSON is UTF-8 (a byte order mark is dropped). Bytes that are not
 *  UTF-8 are refused: decoded leniently, each would be stored as U+FFFD, not as sent. */
function bodyText(bytes: Uint8Array): string {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new HttpError(
      400,
      "VALIDATION",
      "The request body is not valid UTF-8; send JSON encoded as UTF-8. Nothing was done",
    );
  }
}

/** Refuses a number in JSON text that JSON.parse would turn into another one (see
 *  jsonNumberProblem). `text` is valid JSON. */
function checkJsonNumbers(text: string): void {
  const problem = jsonNumberProblem(text);
  if (problem) {
    throw new HttpError(
      400,
      "VALIDATION",
      `The request body holds ${problem}; send it as a string. Nothing was done`,
    );
  }
}

export function json(c: Context, status: number, body: unknown): Response {
  return c.body(JSON.stringify(body), status as 200, {
    "content-type": "application/json; charset=utf-8",
  });
}
