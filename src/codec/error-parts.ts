// How an Error is stored. Its name, message, stack and code, as cairn always stored them
// ("Error": text written so decodes as it always did). An Error with a `cause` or other own
// enumerable properties (an HTTP client's `status` and `response`, a system error's
// `errno` and `path`) was stored the same way, and the workflow was handed an Error without
// them, on the first run and on every replay alike: code that read `err.cause` or
// `err.status` took another branch than it would have on the value the step returned. Such
// an Error is stored under its own tag ("ErrorWithProps"): a cairn that does not know it
// pauses the run as undecodable rather than hand over an Error without them.

import { types } from "node:util";

/** An Error of this realm or another (node:vm, a sandbox): instanceof knows only this
 *  realm's, and another's was refused as a class instance, where its Date and Map are kept. */
export function isError(v: unknown): v is Error {
  return typeof v === "object" && v !== null && (v instanceof Error || types.isNativeError(v));
}

type Coded = Error & { code?: unknown };

/** Kept by name, message, stack and code; revived as own properties, as they always were. */
const BASE_KEYS = new Set(["name", "message", "stack", "code"]);

/** The own properties stored beside the base parts: enumerable ones (assigned: `status`, a
 *  cause assigned) and the others (`new Error(m, { cause })`'s cause, an AggregateError's
 *  `errors`), each revived as it was. */
function extraKeys(e: Error): { shown: string[]; hidden: string[] } {
  const shown: string[] = [];
  const hidden: string[] = [];
  for (const k of Object.getOwnPropertyNames(e)) {
    if (BASE_KEYS.has(k)) continue;
    if (Object.prototype.propertyIsEnumerable.call(e, k)) shown.push(k);
    else hidden.push(k);
  }
  return { shown, hidden };
}

/** An enumerable symbol key cannot be stored (as on any object): such an Error is left to
 *  the encoder, which refuses it naming the path (codec.ts says why). */
export function hasSymbolKeys(e: Error): boolean {
  return Object.getOwnPropertySymbols(e).some((s) =>
    Object.prototype.propertyIsEnumerable.call(e, s),
  );
}

const baseParts = (e: Coded) => [e.name, e.message, e.stack ?? "", e.code];

/** The parts of an Error with nothing beyond its base parts, or false. */
export function plainErrorParts(v: unknown): unknown[] | false {
  if (!isError(v) || hasSymbolKeys(v)) return false;
  const { shown, hidden } = extraKeys(v);
  return shown.length === 0 && hidden.length === 0 && baseParts(v);
}

/** The parts of an Error with a cause or other own properties, or false: the base parts,
 *  then its enumerable and its other own properties, each as a plain object. */
export function fullErrorParts(v: unknown): unknown[] | false {
  if (!isError(v) || hasSymbolKeys(v)) return false;
  const { shown, hidden } = extraKeys(v);
  if (shown.length === 0 && hidden.length === 0) return false;
  const read = (keys: string[]) => {
    const props: Record<string, unknown> = {};
    for (const k of keys) props[k] = (v as unknown as Record<string, unknown>)[k];
    return props;
  };
  return [...baseParts(v), read(shown), read(hidden)];
}

type BaseParts = [string, string, string, unknown];

function revivedError([name, message, stack, code]: BaseParts): Error {
  const e = new Error(message);
  e.name = name;
  e.stack = stack;
  if (code !== undefined) (e as Coded).code = code;
  return e;
}

/** Defined, not assigned: a key such as "toString" must not go through a setter. */
function defineAll(e: Error, props: Record<string, unknown>, enumerable: boolean): void {
  for (const [k, value] of Object.entries(props)) {
    Object.defineProperty(e, k, { value, enumerable, writable: true, configurable: true });
  }
}

export const errorRevivers = {
  Error: (parts: BaseParts) => revivedError(parts),
  ErrorWithProps: ([name, message, stack, code, shown, hidden]: [
    ...BaseParts,
    Record<string, unknown>,
    Record<string, unknown>,
  ]) => {
    const e = revivedError([name, message, stack, code]);
    defineAll(e, hidden, false);
    defineAll(e, shown, true);
    return e;
  },
};

/** True when `text` may hold an Error stored with its properties. */
export function mayHoldFullError(text: string): boolean {
  return text.includes('"ErrorWithProps"');
}
