// JSON Schema for the HTTP API, written once and used twice: request bodies and query
// parameters are validated against it, and the OpenAPI document publishes it. A small
// builder (with TypeScript types inferred from it) and a validator for the subset it
// builds, so the schemas a client reads are exactly the ones the server enforces.

/** A JSON Schema object (the 2020-12 dialect OpenAPI 3.1 uses). */
export type JsonSchema = { readonly [keyword: string]: unknown };

export interface Schema<T> {
  readonly json: JsonSchema;
  /** Carries the TypeScript type; never set at run time. */
  readonly type?: T;
}

export type Infer<S> = S extends Schema<infer T> ? T : never;

type Props = Record<string, Schema<unknown>>;
type ObjectOf<P extends Props, R extends keyof P> = { [K in R]: Infer<P[K]> } & {
  [K in Exclude<keyof P, R>]?: Infer<P[K]>;
};
type Flat<T> = { [K in keyof T]: T[K] } & {};

interface Annotations {
  description?: string;
  examples?: unknown[];
}

function make<T>(json: JsonSchema): Schema<T> {
  return { json };
}

export const s = {
  string(o: Annotations & { minLength?: number; maxLength?: number; format?: string } = {}) {
    return make<string>({ type: "string", ...o });
  },
  number(o: Annotations & { minimum?: number } = {}) {
    return make<number>({ type: "number", ...o });
  },
  integer(o: Annotations & { minimum?: number; maximum?: number } = {}) {
    return make<number>({ type: "integer", ...o });
  },
  boolean(o: Annotations = {}) {
    return make<boolean>({ type: "boolean", ...o });
  },
  enum<const V extends readonly string[]>(values: V, o: Annotations = {}) {
    return make<V[number]>({ type: "string", enum: [...values], ...o });
  },
  /** Any JSON value. */
  any(o: Annotations = {}) {
    return make<unknown>({ ...o });
  },
  array<T>(items: Schema<T>, o: Annotations & { maxItems?: number } = {}) {
    return make<T[]>({ type: "array", items: items.json, ...o });
  },
  /** A closed object: properties not listed are refused. */
  object<P extends Props, R extends keyof P & string = never>(
    properties: P,
    required: readonly R[] = [],
    o: Annotations = {},
  ) {
    const props: Record<string, JsonSchema> = {};
    for (const [k, v] of Object.entries(properties)) props[k] = v.json;
    return make<Flat<ObjectOf<P, R>>>({
      type: "object",
      properties: props,
      ...(required.length > 0 ? { required: [...required] } : {}),
      additionalProperties: false,
      ...o,
    });
  },
  /** An object with any keys, each value of one schema. */
  record<T>(values: Schema<T>, o: Annotations & { maxProperties?: number } = {}) {
    return make<Record<string, T>>({ type: "object", additionalProperties: values.json, ...o });
  },
  /** A named schema in #/components/schemas. */
  ref<T>(name: string, _of?: Schema<T>) {
    return make<T>({ $ref: `#/components/schemas/${name}` });
  },
};

// ---- validation ----

export interface Issue {
  /** Where, as a JSON Pointer-like path ("" for the value itself, "/budget/usd"). */
  path: string;
  message: string;
}

/** Resolves a "$ref" to its schema (the document's components). */
export type Resolve = (ref: string) => JsonSchema | undefined;

/** Checks `value` against `schema`; the problems found, at most `max`. */
export function validate(
  schema: JsonSchema,
  value: unknown,
  resolve: Resolve = () => undefined,
  max = 20,
): Issue[] {
  const issues: Issue[] = [];
  check(schema, value, "", issues, resolve, max);
  return issues.slice(0, max);
}

function typeOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;
}

/** A JSON type as a message says it: "a string", "an integer", "an array", "null". */
function withArticle(type: unknown): string {
  const name = String(type);
  if (name === "null") return name;
  return `${/^[aeiou]/.test(name) ? "an" : "a"} ${name}`;
}

/** "1 character", "200 characters". */
function counted(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

function matchesType(expected: unknown, actual: string): boolean {
  const list = Array.isArray(expected) ? expected : [expected];
  return list.some((t) => t === actual || (t === "number" && actual === "integer"));
}

function check(
  schema: JsonSchema,
  value: unknown,
  path: string,
  issues: Issue[],
  resolve: Resolve,
  max: number,
): void {
  if (issues.length >= max) return;
  const add = (message: string) => issues.push({ path, message });
  if (typeof schema.$ref === "string") {
    const target = resolve(schema.$ref);
    if (!target) add(`unknown schema ${schema.$ref}`);
    else check(target, value, path, issues, resolve, max);
    return;
  }
  if (Array.isArray(schema.anyOf)) {
    const ok = (schema.anyOf as JsonSchema[]).some(
      (alt) => validate(alt, value, resolve, 1).length === 0,
    );
    if (!ok) add("matches none of the allowed forms");
    return;
  }
  const actual = typeOf(value);
  if (schema.type !== undefined && !matchesType(schema.type, actual)) {
    add(
      `must be ${[schema.type].flat().map(withArticle).join(" or ")} (got ${withArticle(actual)})`,
    );
    return;
  }
  if (Array.isArray(schema.enum) && !schema.enum.includes(value)) {
    add(`must be one of: ${schema.enum.join(", ")}`);
    return;
  }
  if (typeof value === "string") {
    if (typeof schema.minLength === "number" && value.length < schema.minLength) {
      add(`must have at least ${counted(schema.minLength, "character")}`);
    }
    if (typeof schema.maxLength === "number" && value.length > schema.maxLength) {
      add(`must have at most ${counted(schema.maxLength, "character")}`);
    }
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) add("must be a finite number");
    if (typeof schema.minimum === "number" && value < schema.minimum) {
      add(`must be >= ${schema.minimum}`);
    }
    if (typeof schema.maximum === "number" && value > schema.maximum) {
      add(`must be <= ${schema.maximum}`);
    }
  }
  if (Array.isArray(value)) {
    if (typeof schema.maxItems === "number" && value.length > schema.maxItems) {
      add(`must have at most ${counted(schema.maxItems, "item")}`);
    }
    const items = schema.items as JsonSchema | undefined;
    if (items) {
      for (const [i, v] of value.entries()) check(items, v, `${path}/${i}`, issues, resolve, max);
    }
  }
  if (actual === "object") {
    const obj = value as Record<string, unknown>;
    const props = (schema.properties ?? {}) as Record<string, JsonSchema>;
    for (const key of (schema.required ?? []) as string[]) {
      if (!Object.hasOwn(obj, key)) issues.push({ path: `${path}/${key}`, message: "is required" });
    }
    const keys = Object.keys(obj);
    if (typeof schema.maxProperties === "number" && keys.length > schema.maxProperties) {
      add(`must have at most ${counted(schema.maxProperties, "property", "properties")}`);
    }
    for (const key of keys) {
      const sub = Object.hasOwn(props, key) ? props[key] : undefined;
      const where = `${path}/${key}`;
      if (sub) check(sub, obj[key], where, issues, resolve, max);
      else if (schema.additionalProperties === false) {
        issues.push({ path: where, message: "is not an allowed property" });
      } else if (typeof schema.additionalProperties === "object") {
        check(schema.additionalProperties as JsonSchema, obj[key], where, issues, resolve, max);
      }
    }
  }
}
