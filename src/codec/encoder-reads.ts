// How the encoder (devalue) reads built-in values. devalue picks how to store an object by
// the tag Object.prototype.toString gives, which any object can set for itself with
// Symbol.toStringTag: a Temporal polyfill's values say "Temporal.PlainDate", and were stored
// as Temporal values, which only a global Temporal decodes. The step was recorded as
// completed with a result that no execution could read back, and the run paused for good.
// So a tag counts only when the value has the built-in's internal slots; other values are
// judged as objects (plain data is stored, a class instance refused, naming its class).
//
// A typed array or DataView showing part of its buffer is stored as the bytes it shows, in
// a buffer of their own (decoded: byteOffset 0, a buffer its own length). The whole buffer
// was stored, and the rest of it may be anything: a view of a small Buffer's bytes shows
// part of Node's shared 8 KiB pool, which holds whatever the process made lately (another
// request's token). Two such views of one buffer decode as two buffers. Text written the
// old way (the whole buffer and an offset) decodes as it always did.

import { types } from "node:util";
import type { StringifyOptions } from "devalue";
import {
  hasBuiltInSlots,
  hasHiddenSlots,
  hasNonIndexKey,
  hasSymbolKey,
  isPlainObject,
  keptWhole,
} from "./kept-whole.js";

type View = ArrayBufferView & { length?: number };

/** The built-in getters, which read a view's internal slots: never an own property that
 *  says otherwise (a forged `byteLength` stored other bytes than the view holds). */
const typedArrayProto = Object.getPrototypeOf(Uint8Array.prototype) as object;
const getter = (proto: object, key: PropertyKey) =>
  Object.getOwnPropertyDescriptor(proto, key)?.get as (this: unknown) => unknown;
const typedArrayKind = getter(typedArrayProto, Symbol.toStringTag) as (
  this: unknown,
) => string | undefined;
const typedArray = {
  buffer: getter(typedArrayProto, "buffer"),
  byteOffset: getter(typedArrayProto, "byteOffset"),
  byteLength: getter(typedArrayProto, "byteLength"),
  length: getter(typedArrayProto, "length"),
};
const dataView = {
  buffer: getter(DataView.prototype, "buffer"),
  byteOffset: getter(DataView.prototype, "byteOffset"),
  byteLength: getter(DataView.prototype, "byteLength"),
};

function viewInfo(view: View) {
  const isDataView = types.isDataView(view);
  const slots = isDataView ? dataView : typedArray;
  const buffer = slots.buffer.call(view) as ArrayBufferLike;
  const byteOffset = slots.byteOffset.call(view) as number;
  const byteLength = slots.byteLength.call(view) as number;
  const length = isDataView ? byteLength : (typedArray.length.call(view) as number);
  // A Buffer's bytes are copied whatever it views, as devalue's own reads copy them (and as
  // encode stored them before these reads): its whole buffer kept (shared with another
  // Buffer or an ArrayBuffer beside it) was other text for a value stored before, and a
  // Buffer over a SharedArrayBuffer was refused. Any other view of a SharedArrayBuffer is
  // refused as the buffer is (flattened whole).
  const copied =
    Buffer.isBuffer(view) ||
    (byteLength !== buffer.byteLength && !types.isSharedArrayBuffer(buffer));
  return {
    buffer: copied ? shownBytes(buffer, byteOffset, byteLength) : buffer,
    byteOffset: copied ? 0 : byteOffset,
    byteLength,
    length,
    bufferByteLength: copied ? byteLength : buffer.byteLength,
  };
}

/** A copy of the bytes a view shows, in a buffer of their own. Copied by built-ins of this
 *  realm: the buffer's own slice (or its constructor's species, which slice makes the copy
 *  with) would choose what is stored. */
function shownBytes(buffer: ArrayBufferLike, byteOffset: number, byteLength: number): ArrayBuffer {
  const copy = new Uint8Array(byteLength);
  copy.set(new Uint8Array(buffer, byteOffset, byteLength));
  return copy.buffer;
}

/** The bytes a typed array or DataView shows when they are part of its buffer (read from
 *  its internal slots, never from own properties); undefined for anything else. */
export function partViewBytes(value: unknown): { kind: string; bytes: Uint8Array } | undefined {
  if (!ArrayBuffer.isView(value)) return undefined;
  const isDataView = types.isDataView(value);
  const slots = isDataView ? dataView : typedArray;
  const buffer = slots.buffer.call(value) as ArrayBufferLike;
  const byteLength = slots.byteLength.call(value) as number;
  if (byteLength === buffer.byteLength) return undefined;
  const byteOffset = slots.byteOffset.call(value) as number;
  const kind = isDataView ? "DataView" : (typedArrayKind.call(value) as string);
  return { kind, bytes: new Uint8Array(buffer, byteOffset, byteLength) };
}

/** Whether `value` has the internal slots of the built-in devalue stores under `tag`. Tags
 *  devalue does not store specially are its own to judge (plain data, or refused). */
function isBuiltIn(value: object, tag: string): boolean {
  switch (tag) {
    case "Number":
      return types.isNumberObject(value);
    case "String":
      return types.isStringObject(value);
    case "Boolean":
      return types.isBooleanObject(value);
    case "BigInt":
      return types.isBigIntObject(value);
    case "Date":
      return types.isDate(value);
    case "RegExp":
      return types.isRegExp(value);
    case "Array":
      return Array.isArray(value);
    case "Set":
      return types.isSet(value);
    case "Map":
      return types.isMap(value);
    case "ArrayBuffer":
      return types.isArrayBuffer(value);
    case "DataView":
      return types.isDataView(value);
    // Stored as their text, and decoded from it: a URL of another implementation whose
    // text is a URL is stored as one (as before), what merely says "URL" is not.
    case "URL":
      return value instanceof URL || URL.canParse(String(value));
    case "URLSearchParams":
      return value instanceof URLSearchParams;
  }
  if (tag.startsWith("Temporal.")) {
    // Decoded by the global Temporal: stored only where there is one, and it made the value.
    const Temporal = (globalThis as { Temporal?: Record<string, unknown> }).Temporal;
    const made = Temporal?.[tag.slice("Temporal.".length)];
    return typeof made === "function" && value instanceof made;
  }
  if (typedArrayKind.call(value) !== undefined || tag.endsWith("Array")) {
    return typedArrayKind.call(value) === tag;
  }
  return true;
}

/** The tag devalue stores `value` under: a built-in's only when it is one, and one kept
 *  whole (kept-whole.ts); anything else is judged as an object (and refused by shapeOf). */
function tagOf(value: object): string {
  const tag = Object.prototype.toString.call(value).slice(8, -1);
  return tag === "Object" || (isBuiltIn(value, tag) && keptWhole(value, tag)) ? tag : "Object";
}

const NOT_PLAIN = { kind: "not-plain" } as const;
const SYMBOL_KEYS = { kind: "symbol-keys" } as const;

/** devalue's own shapeOf, but plain only as isPlainObject says (an array tagOf did not
 *  take as one is refused, never stored as an object of its indices). */
function shapeOf(value: object) {
  // A Map or a Date whose prototype was replaced is not plain data: its contents are in its
  // slots, and an object of its own keys was stored (kept-whole.ts hasHiddenSlots).
  if (!isPlainObject(value) || hasBuiltInSlots(value)) return NOT_PLAIN;
  const symbols = Object.getOwnPropertySymbols(value);
  if (symbols.some((s) => Object.prototype.propertyIsEnumerable.call(value, s))) return SYMBOL_KEYS;
  const kind = Object.getPrototypeOf(value) === null ? ("null-proto" as const) : ("plain" as const);
  return { kind, keys: Object.keys(value) };
}

/** The operations encode hands devalue (codec.ts). */
export const encoderReads: StringifyOptions = { operations: { viewInfo, tagOf, shapeOf } };

/** A built-in's tag as encoderReads read it before kept-whole.ts: by its slots alone. */
function slotTagOf(value: object): string {
  const tag = Object.prototype.toString.call(value).slice(8, -1);
  return tag === "Object" || isBuiltIn(value, tag) ? tag : "Object";
}

/** The reads of a child's input digest (codec.ts encodeIdentity): as they were before
 *  kept-whole.ts, so a digest recorded then (of a regex match, a Map subclass) is matched
 *  by the same call on its replay now, not taken for another input. Such an input is
 *  refused when its call is made anew (encode). */
export const identityReads: StringifyOptions = { operations: { viewInfo, tagOf: slotTagOf } };

/** Whether devalue's own reads of `value` store it otherwise than encoderReads do: a typed
 *  array or DataView (its view), or a value whose tag is not the built-in's. Everything
 *  else, plain data above all, is stored alike by both (codec.ts takes the cheaper). */
export function needsEncoderReads(value: unknown): boolean {
  if (typeof value !== "object" || value === null) return false;
  // A proxy answers each read as it likes: it is read once, as encoderReads read it.
  if (ArrayBuffer.isView(value) || types.isProxy(value)) return true;
  // Plain data, told cheaply: a tag comes from a slot devalue and encoderReads both judge
  // by (an array's), or from Symbol.toStringTag (`in` runs no getter).
  const proto = Object.getPrototypeOf(value);
  const plain = proto === Object.prototype || proto === Array.prototype || proto === null;
  if (plain && !(Symbol.toStringTag in value)) {
    // An object holding a built-in's slots (a Map or a Date given Object.prototype) is
    // refused by shapeOf: devalue's own reads took it for plain data (`{}`), or read it as
    // a Date through the prototype it no longer has.
    if (!Array.isArray(value)) {
      return hasHiddenSlots(value) || toTag.call(value) !== "[object Object]";
    }
    // An array with properties beside its elements or symbol keys, or without a prototype:
    // refused by encoderReads' tagOf (keptWhole's look for another realm's Array.prototype
    // is not needed here: it cost more than the encoding of a small array).
    return proto !== Array.prototype || hasNonIndexKey(value) || hasSymbolKey(value);
  }
  // A tag a getter answers may answer otherwise on devalue's read than on the reads here
  // (a class instance stored as the array it said it was later): read once, by tagOf.
  if (tagIsGetter(value)) return true;
  const tag = Object.prototype.toString.call(value).slice(8, -1);
  // An object of another prototype: a class instance (refused either way), an object of
  // another realm, or one whose prototype has none (devalue took it for plain data).
  if (tag === "Object") return !plain;
  return tagOf(value) !== tag;
}

const toTag = Object.prototype.toString;

/** Whether the Symbol.toStringTag `value` answers comes from a getter (a typed array's own
 *  is one, but views are read by encoderReads anyway). */
function tagIsGetter(value: object): boolean {
  for (let o: object | null = value; o !== null; o = Object.getPrototypeOf(o)) {
    const own = Object.getOwnPropertyDescriptor(o, Symbol.toStringTag);
    if (own) return own.get !== undefined;
  }
  return false;
}
