// How an Error is stored. Its name, message, stack and code, as cairn always stored them
// ("Error": text written so decodes as it always did). An Error with a `cause` or other own
// enumerable properties (an HTTP client's `status` and `response`, a system error's
// `errno` and `path`) was stored the same way, and the workflow was handed an Error without
// them, on the first run and on every replay alike: code that read `err.cause` or
// `err.status` took another branch than it would have on the value the step returned. Such
// an Error is stored under its own tag ("ErrorWithProps"): a cairn that does not know it
// pauses the run as undecodable rather than hand over an Error without them.
//
// Its other non-enumerable properties are not stored, as an object's are not: a library
// hides its internals so (a ZodError's `_zod`, which holds functions), and storing them
// refused the Error. Only `cause` and an AggregateError's `errors`, which the language
// itself makes non-enumerable, are kept.
//
// A symbol key registered with Symbol.for is the same symbol wherever its key is revived:
// every AI SDK error carries such markers (`Symbol.for("vercel.ai.error")`, which its
// `isInstance` checks), and such an Error is stored with them under "ErrorWithSymbols". Any
// other enumerable symbol key cannot be stored, and the Error is refused (as any object with
// one is), naming the path.

import { types } from "node:util";

/** An Error of this realm or another (node:vm, a sandbox): instanceof knows only this
 *  realm's, and another's was refused as a class instance, where its Date and Map are kept. */
export function isError(v: unknown): v is Error {
  return typeof v === "object" && v !== null && (v instanceof Error || types.isNativeError(v));
}

type Coded = Error & { code?: unknown };

/** Kept by name, message, stack and code; revived as own properties, as they always were. */
const BASE_KEYS = new Set(["name", "message", "stack", "code"]);

/** The non-enumerable own properties the language itself gives an Error. */
const LANGUAGE_HIDDEN_KEYS = new Set(["cause", "errors"]);

/** The own properties stored beside the base parts: enumerable ones (assigned: `status`, a
 *  cause assigned) and the language's non-enumerable ones (`new Error(m, { cause })`'s
 *  cause, an AggregateError's `errors`), each revived as it was. */
function extraKeys(e: Error): { shown: string[]; hidden: string[] } {
  const shown: string[] = [];
  const hidden: string[] = [];
  for (const k of Object.getOwnPropertyNames(e)) {
    if (BASE_KEYS.has(k)) continue;
    if (Object.prototype.propertyIsEnumerable.call(e, k)) shown.push(k);
    else if (LANGUAGE_HIDDEN_KEYS.has(k)) hidden.push(k);
  }
  return { shown, hidden };
}

/** An Error's enumerable symbol keys, by their Symbol.for key; undefined when one of them
 *  is not registered (it cannot be stored). */
function registeredSymbolKeys(e: Error): string[] | undefined {
  const keys: string[] = [];
  for (const s of Object.getOwnPropertySymbols(e)) {
    if (!Object.prototype.propertyIsEnumerable.call(e, s)) continue;
    const key = Symbol.keyFor(s);
    if (key === undefined) return undefined;
    keys.push(key);
  }
  return keys;
}

/** An enumerable symbol key that is not registered cannot be stored (as on any object):
 *  such an Error is left to the encoder, which refuses it naming the path (codec.ts says
 *  why). */
export function hasSymbolKeys(e: Error): boolean {
  return registeredSymbolKeys(e) === undefined;
}

const baseParts = (e: Coded) => [e.name, e.message, e.stack ?? "", e.code];

/** The parts of an Error with nothing beyond its base parts, or false. */
export function plainErrorParts(v: unknown): unknown[] | false {
  if (!isError(v) || registeredSymbolKeys(v)?.length !== 0) return false;
  const { shown, hidden } = extraKeys(v);
  return shown.length === 0 && hidden.length === 0 && baseParts(v);
}

/** plainErrorParts', for the cheap pass (codec.ts), or false also when an own property is
 *  an accessor (it is not run): one look at each own property, as few as an Error has. */
export function plainErrorPartsWithoutGetters(e: Error): unknown[] | false {
  for (const s of Object.getOwnPropertySymbols(e)) {
    if (Object.prototype.propertyIsEnumerable.call(e, s)) return false;
  }
  for (const k of Object.getOwnPropertyNames(e)) {
    const d = Object.getOwnPropertyDescriptor(e, k);
    if (d === undefined || d.get !== undefined) return false;
    if (!BASE_KEYS.has(k) && (d.enumerable || LANGUAGE_HIDDEN_KEYS.has(k))) return false;
  }
  return baseParts(e);
}

/** Each key's value in `e`, as a plain object (defined: a key "__proto__" is a key). */
function read(e: Error, keys: string[], keyOf: (k: string) => PropertyKey = (k) => k) {
  const props: Record<string, unknown> = {};
  for (const k of keys) {
    const value = (e as unknown as Record<PropertyKey, unknown>)[keyOf(k)];
    Object.defineProperty(props, k, {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return props;
}

/** The parts of an Error with a cause or other own properties and no symbol keys, or
 *  false: the base parts, then its enumerable and its hidden properties, each as a plain
 *  object. */
export function fullErrorParts(v: unknown): unknown[] | false {
  if (!isError(v) || registeredSymbolKeys(v)?.length !== 0) return false;
  const { shown, hidden } = extraKeys(v);
  if (shown.length === 0 && hidden.length === 0) return false;
  return [...baseParts(v), read(v, shown), read(v, hidden)];
}

/** The parts of an Error with registered symbol keys, or false: fullErrorParts', then its
 *  symbol-keyed properties by their Symbol.for keys. */
export function symbolErrorParts(v: unknown): unknown[] | false {
  if (!isError(v)) return false;
  const symbols = registeredSymbolKeys(v);
  if (symbols === undefined || symbols.length === 0) return false;
  const { shown, hidden } = extraKeys(v);
  return [...baseParts(v), read(v, shown), read(v, hidden), read(v, symbols, Symbol.for)];
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

type Props = Record<string, unknown>;

function revivedWithProps([name, message, stack, code, shown, hidden]: [
  ...BaseParts,
  Props,
  Props,
]): Error {
  const e = revivedError([name, message, stack, code]);
  defineAll(e, hidden, false);
  defineAll(e, shown, true);
  return e;
}

export const errorRevivers = {
  Error: (parts: BaseParts) => revivedError(parts),
  ErrorWithProps: revivedWithProps,
  ErrorWithSymbols: ([name, message, stack, code, shown, hidden, symbols]: [
    ...BaseParts,
    Props,
    Props,
    Props,
  ]) => {
    const e = revivedWithProps([name, message, stack, code, shown, hidden]);
    for (const [k, value] of Object.entries(symbols)) {
      Object.defineProperty(e, Symbol.for(k), {
        value,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return e;
  },
};

/** True when `text` may hold an Error stored with its properties. */
export function mayHoldFullError(text: string): boolean {
  // One scan of the text for both tags ("ErrorWithProps", "ErrorWithSymbols").
  return text.includes('"ErrorWith');
}
