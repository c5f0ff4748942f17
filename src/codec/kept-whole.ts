// Whether the encoder keeps all a value holds. devalue stores a built-in by its contents
// alone (an array's elements, a Map's entries, a Date's time) and a plain object by its own
// enumerable keys; what else the value held was dropped without a word, and the workflow
// was handed a copy without it on the first run and on every replay:
// - the properties of a Date, a Map, a Set, a RegExp (its `lastIndex` too) or a boxed
//   primitive (an array's are stored by array-parts.ts, a regex match's `index`, `input`
//   and `groups`; those of one of another prototype are not);
// - its class: a `class Tags extends Map`, an Array of another prototype, an object whose
//   prototype has no prototype (its methods and inherited values), came back as plain
//   built-ins or objects, where other class instances are refused.
// Such values are refused, naming the path (codec.ts says what to store instead). A view's
// own properties are not looked for: finding them lists every index of its bytes.

import { types } from "node:util";
import { hasSymbolKeys, isError } from "./error-parts.js";

const OBJECT_PROTOTYPE_NAMES = Object.getOwnPropertyNames(Object.prototype).sort().join("\0");
const typedArrayKind = Object.getOwnPropertyDescriptor(
  Object.getPrototypeOf(Uint8Array.prototype) as object,
  Symbol.toStringTag,
)?.get as (this: unknown) => string | undefined;
const nativeCode = /\{\s*\[native code\]\s*\}$/;

/** A built-in's prototype in this realm or another (node:vm): its constructor is native
 *  code of the built-in's name (a class of the user's is not). */
export function isBuiltInPrototype(proto: object | null, name: string): boolean {
  if (proto === null) return false;
  if (
    proto === (globalThis as Record<string, { prototype?: unknown } | undefined>)[name]?.prototype
  ) {
    return true;
  }
  const ctor = Object.getOwnPropertyDescriptor(proto, "constructor")?.value as unknown;
  return (
    typeof ctor === "function" &&
    ctor.name === name &&
    ctor.prototype === proto &&
    nativeCode.test(Function.prototype.toString.call(ctor))
  );
}

/** Object.prototype of this realm or another: what a plain object may inherit from. */
function isObjectPrototype(proto: object): boolean {
  return (
    proto === Object.prototype ||
    (Object.getPrototypeOf(proto) === null &&
      Object.getOwnPropertyNames(proto).sort().join("\0") === OBJECT_PROTOTYPE_NAMES)
  );
}

/** An object the encoder stores as plain data: its prototype is Object.prototype (of any
 *  realm) or none. devalue also took one whose prototype has none (Object.create(proto)
 *  of a null-prototype object) and dropped what it inherited. */
export function isPlainObject(value: object): boolean {
  if (Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value) as object | null;
  return proto === null || isObjectPrototype(proto);
}

/** An array's own enumerable keys other than its indices. Object.keys lists indices
 *  first, in order, so one is there exactly when the last key is not an index. */
export function hasNonIndexKey(array: unknown[]): boolean {
  const keys = Object.keys(array);
  const last = keys[keys.length - 1];
  return last !== undefined && !(String(Number(last) >>> 0) === last && last !== "4294967295");
}

/** Whether `value` has an own enumerable symbol key: refused on a built-in as on a plain
 *  object (devalue's "symbolic keys"). An array's, a Map's or a Date's was dropped without a
 *  word; non-enumerable ones are not stored, as a plain object's are not. */
export function hasSymbolKey(value: object): boolean {
  const symbols = Object.getOwnPropertySymbols(value);
  for (let i = 0; i < symbols.length; i++) {
    if (isEnumerable.call(value, symbols[i] as symbol)) return true;
  }
  return false;
}

const isEnumerable = Object.prototype.propertyIsEnumerable;

/** Whether a value with the internal slots of the built-in `tag` names is stored with all
 *  it holds: the built-in's own prototype (a Buffer's is Uint8Array's, as documented), no
 *  properties of its own beside its contents, and no symbol keys. */
export function keptWhole(value: object, tag: string): boolean {
  // The symbols first: one call, where naming the built-in asks up to twelve of its slots.
  return keptWholeByKeys(value, tag) && !(hasSymbolKey(value) && builtInName(value) !== undefined);
}

function keptWholeByKeys(value: object, tag: string): boolean {
  switch (tag) {
    case "Array":
      return (
        isBuiltInPrototype(Object.getPrototypeOf(value), tag) && !hasNonIndexKey(value as unknown[])
      );
    case "Date":
    case "Map":
    case "Set":
    case "ArrayBuffer":
    case "Number":
    case "Boolean":
    case "BigInt":
      return (
        isBuiltInPrototype(Object.getPrototypeOf(value), tag) && Object.keys(value).length === 0
      );
    case "String":
      return (
        isBuiltInPrototype(Object.getPrototypeOf(value), tag) &&
        Object.keys(value).length === (value as { length: number }).length
      );
    case "RegExp":
      return (
        isBuiltInPrototype(Object.getPrototypeOf(value), tag) &&
        Object.keys(value).length === 0 &&
        (value as RegExp).lastIndex === 0
      );
    case "DataView":
      return isBuiltInPrototype(Object.getPrototypeOf(value), tag);
  }
  if (ArrayBuffer.isView(value)) {
    return Buffer.isBuffer(value) || isBuiltInPrototype(Object.getPrototypeOf(value), tag);
  }
  return true;
}

/** Whether `value` holds a built-in's data in internal slots that Object.prototype.toString
 *  does not show (a Map's entries, a Set's values, a buffer's or a view's bytes, a weak
 *  collection, a Promise, a boxed BigInt or Symbol): with its prototype replaced by
 *  Object.prototype or none, it was stored as an object of its own keys (`{}`), without a
 *  word. The encoder refuses it. (A boxed number, string or boolean is shown by toString,
 *  and asked here in the same call.) */
export function hasHiddenSlots(value: object): boolean {
  return (
    types.isMap(value) ||
    types.isSet(value) ||
    types.isAnyArrayBuffer(value) ||
    ArrayBuffer.isView(value) ||
    types.isWeakMap(value) ||
    types.isWeakSet(value) ||
    types.isPromise(value) ||
    types.isBoxedPrimitive(value)
  );
}

/** Whether an object the encoder would take for plain data (kept-whole's prototypes) holds
 *  a built-in's slots, shown by toString (a Date's, a RegExp's) or not. */
export function hasBuiltInSlots(value: object): boolean {
  // slotName's built-ins, asked in fewer calls (each ~12 ns; shapeOf asks every plain
  // object).
  return (
    hasHiddenSlots(value) || Array.isArray(value) || types.isDate(value) || types.isRegExp(value)
  );
}

/** What a refused value is, when keptWhole refused it: the words of codec.ts's refusal. */
export function notKeptWhat(value: unknown): string | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  if (types.isProxy(value)) return undefined;
  const slots = slotName(value);
  const replaced = Object.getPrototypeOf(value) as object | null;
  // An Array so made is stored as an Array (told below); these as an object of their keys.
  if (
    slots !== undefined &&
    slots !== "Array" &&
    (replaced === null || isObjectPrototype(replaced))
  ) {
    const instead = UNSTORABLE.has(slots)
      ? "store a plain copy of its data"
      : `store a plain ${slots}, or its data in a plain object`;
    return `${article(slots)} ${slots} whose prototype was replaced (${replaced === null ? "null" : "Object.prototype"}): it would be stored as a plain object without its contents; ${instead}`;
  }
  const builtIn = builtInName(value);
  if (isError(value) && hasSymbolKeys(value)) {
    return "an Error with symbol keys (symbols cannot be stored: use string keys)";
  }
  if (builtIn === undefined) {
    // A prototype no class made (Object.create(proto)): named by the class of its
    // prototype, it was "an instance of class Object".
    const proto = Object.getPrototypeOf(value) as object | null;
    const ctor = proto && (Object.getOwnPropertyDescriptor(proto, "constructor")?.value as unknown);
    if (
      proto !== null &&
      !isObjectPrototype(proto) &&
      (ctor as { prototype?: unknown })?.prototype !== proto
    ) {
      return "an object that inherits from another object (what it inherits would be lost: store a plain copy)";
    }
    return undefined;
  }
  if (!isBuiltInPrototype(Object.getPrototypeOf(value), builtIn) && !Buffer.isBuffer(value)) {
    return `${article(builtIn)} ${builtIn} of another class or prototype (it would come back as a plain ${builtIn}: store its data as a plain ${builtIn} or object)`;
  }
  if (hasSymbolKey(value)) {
    return `${article(builtIn)} ${builtIn} with symbol keys (symbols cannot be stored: store what they hold beside it, in an object with string keys)`;
  }
  if (builtIn === "RegExp" && (value as RegExp).lastIndex !== 0) {
    return "a RegExp whose lastIndex is not 0 (it would come back 0: store its source, flags and lastIndex)";
  }
  if (builtIn === "Array") {
    // A regex match (`str.match`, `RegExp.exec`, each of `matchAll`) is the common one: its
    // `index`, `input` and `groups` are named, and how to store them.
    const extra = Object.keys(value).filter((k) => String(Number(k) >>> 0) !== k);
    return `an Array with properties of its own beside its elements (${keyNames(extra)}: they would be lost; store [...array] and them beside it, in an object)`;
  }
  return `${article(builtIn)} ${builtIn} with properties of its own beside its contents (they would be lost: store them beside it, in an object)`;
}

/** Keys as a message names them: names only (a key that is not one may be data), a few. */
function keyNames(keys: string[]): string {
  const names = keys.filter((k) => /^[A-Za-z_$][\w$]{0,40}$/.test(k)).slice(0, 4);
  const more = keys.length - names.length;
  if (names.length === 0) return `${keys.length} of them`;
  return more > 0 ? `${names.join(", ")} and ${more} more` : names.join(", ");
}

/** The built-in whose slots `value` has, among those keptWhole judges or hasHiddenSlots
 *  finds (an Error is stored by its slots, whatever its prototype: error-parts.ts). */
function slotName(value: object): string | undefined {
  const name = builtInName(value);
  if (name !== undefined) return name;
  if (types.isSharedArrayBuffer(value)) return "SharedArrayBuffer";
  if (types.isWeakMap(value)) return "WeakMap";
  if (types.isWeakSet(value)) return "WeakSet";
  if (types.isPromise(value)) return "Promise";
  if (types.isSymbolObject(value)) return "Symbol";
  return undefined;
}

/** The built-in whose slots `value` has, among those keptWhole judges. */
function builtInName(value: object): string | undefined {
  if (Array.isArray(value)) return "Array";
  if (types.isDate(value)) return "Date";
  if (types.isMap(value)) return "Map";
  if (types.isSet(value)) return "Set";
  if (types.isRegExp(value)) return "RegExp";
  if (types.isArrayBuffer(value)) return "ArrayBuffer";
  if (types.isDataView(value)) return "DataView";
  if (types.isNumberObject(value)) return "Number";
  if (types.isStringObject(value)) return "String";
  if (types.isBooleanObject(value)) return "Boolean";
  if (types.isBigIntObject(value)) return "BigInt";
  return typedArrayKind.call(value);
}

/** Built-ins the codec stores under no prototype. */
const UNSTORABLE = new Set(["WeakMap", "WeakSet", "Promise", "SharedArrayBuffer", "Symbol"]);

const article = (name: string) => (/^(?:[AEIO]|U(?!int))/.test(name) ? "an" : "a");
