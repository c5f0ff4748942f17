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
//
// An Error whose parts lead back to it (`execFileSync` of a missing binary sets
// `err.error = err`; a response that holds the error) cannot be revived by those tags:
// devalue revives an Error from its parts, so the parts cannot hold the Error yet. Such a
// value was refused; its Errors are now stored under "ErrorWithCycles" (the parts of
// "ErrorWithSymbols"), revived in place (revive-in-place.ts), which a cairn that does not
// know the tag pauses as undecodable. The other tags are kept for every value without such
// a loop: text written so decodes as it always did.

import { types } from "node:util";
import { partsWhole, revivedInPlace } from "./revive-in-place.js";

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

/** An Error as a value's identity counts it (codec.ts encodeIdentity, same-stored-value.ts):
 *  every part encode stores but its stack, which names the frames of the code that made it,
 *  not what it holds. False for what is not an Error, or an Error encode refuses (a symbol
 *  key that is not registered). */
export function errorPartsWithoutStack(v: unknown): unknown[] | false {
  if (!isError(v)) return false;
  const symbols = registeredSymbolKeys(v);
  if (symbols === undefined) return false;
  const { shown, hidden } = extraKeys(v);
  return [
    v.name,
    v.message,
    (v as Coded).code,
    read(v, shown),
    read(v, hidden),
    read(v, symbols, Symbol.for),
  ];
}

/** Whether an Error has parts beyond its name, message, stack and code. */
export function hasExtraErrorParts(e: Error): boolean {
  const { shown, hidden } = extraKeys(e);
  return shown.length > 0 || hidden.length > 0 || registeredSymbolKeys(e)?.length !== 0;
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

/** The parts of an Error in a value with a loop through an Error (codec.ts): all it has
 *  (symbolErrorParts'), or false for one with nothing beyond its base parts and a code that
 *  is not an object (nothing of it can lead back to it). */
export function cycleErrorParts(v: unknown): unknown[] | false {
  if (!isError(v)) return false;
  const symbols = registeredSymbolKeys(v);
  if (symbols === undefined) return false;
  const { shown, hidden } = extraKeys(v);
  const code = (v as Coded).code;
  if (shown.length + hidden.length + symbols.length === 0) {
    if (typeof code !== "object" || code === null) return false;
  }
  return [...baseParts(v), read(v, shown), read(v, hidden), read(v, symbols, Symbol.for)];
}

/** Errors made bare, before their base parts were revived (an Error whose code holds it). */
const bare = new WeakSet<Error>();

/** An Error made before its parts are whole: as revivedError makes it when its base parts
 *  are (the loop is in its properties), else bare (filledError gives it its base parts). */
function madeError(parts: unknown[]): Error {
  if (partsWhole(parts, 4)) return revivedError(parts as BaseParts);
  const e = new Error();
  bare.add(e);
  return e;
}

/** The rest of an Error's parts, once whole (those of any Error tag: an older one has
 *  fewer). */
function filledError(e: Error, parts: unknown[]): void {
  const [name, message, stack, code, shown = {}, hidden = {}, symbols = {}] = parts as [
    ...BaseParts,
    Props?,
    Props?,
    Props?,
  ];
  if (bare.has(e)) {
    // Its base parts, as revivedError gives them (new Error(message) defines the message).
    if (message !== undefined) {
      Object.defineProperty(e, "message", {
        value: String(message),
        enumerable: false,
        writable: true,
        configurable: true,
      });
    }
    e.name = name;
    e.stack = stack;
    if (code !== undefined) (e as Coded).code = code;
  }
  defineAll(e, hidden, false);
  defineAll(e, shown, true);
  for (const [k, value] of Object.entries(symbols)) {
    Object.defineProperty(e, Symbol.for(k), {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
}

const inPlace = (size: number) => (parts: unknown[]) =>
  revivedInPlace(parts, size, madeError, filledError);

export const cycleErrorRevivers = { ErrorWithCycles: inPlace(7) };

/** Every Error tag revived in place: for text written with the older tags whose Errors lead
 *  back to themselves, which encode then writes again under ErrorWithCycles (codec.ts).
 *  Never used to decode what is stored: such text decodes as it always did. */
export const inPlaceErrorRevivers = {
  Error: inPlace(4),
  ErrorWithProps: inPlace(6),
  ErrorWithSymbols: inPlace(7),
  ErrorWithCycles: inPlace(7),
};

/** The revivers of the older tags, refusing (NOT_WHOLE) where they would be handed parts
 *  not whole: the Error leads back to itself, and they would throw, or (an Error whose
 *  code holds it) make a second Error without its code. */
export const NOT_WHOLE = new Error("an Error leads back to itself");
const sizes = { Error: 4, ErrorWithProps: 6, ErrorWithSymbols: 7 } as const;
export const wholeErrorRevivers = Object.fromEntries(
  Object.entries(errorRevivers).map(([tag, revive]) => [
    tag,
    (parts: never) => {
      if (!partsWhole(parts, sizes[tag as keyof typeof sizes])) throw NOT_WHOLE;
      return revive(parts);
    },
  ]),
);

/** True when `text` may hold an Error stored with its properties. */
export function mayHoldFullError(text: string): boolean {
  // One scan of the text for both tags ("ErrorWithProps", "ErrorWithSymbols").
  return text.includes('"ErrorWith');
}
