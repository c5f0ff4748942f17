// devalue's text of plain data, written without devalue. devalue.stringify sets up its
// operations (a merged object), a Map, its reducers and a closure on every call: in a run's
// path, a value like { i: 3 } took 8-15 us to encode that way (measured in place; 3 us in a
// tight loop), and every step's value, every run's input and output is encoded once. Plain
// data (primitives, objects whose prototype is Object.prototype, dense arrays, shared and
// cyclic references among them) is most of what steps return: it is written here in
// devalue's format, character for character (test/codec-plain-text-matches-devalue.test.ts compares the two
// on generated values). Anything else (a Date, a Map, an Error, a proxy, a getter, a symbol
// key, an array with holes or other keys, a class instance) answers undefined before any of
// it is read twice: the encoder's own path then stores the value (codec.ts).

import { types } from "node:util";
import { hasHiddenSlots, hasSymbolKey } from "./kept-whole.js";

// devalue's codes for values it writes as no entry (devalue/src/constants.js).
const UNDEFINED = -1;
const NAN = -3;
const POSITIVE_INFINITY = -4;
const NEGATIVE_INFINITY = -5;
const NEGATIVE_ZERO = -6;

/** Not plain data: the encoder's own path decides. */
const NOT_PLAIN = Symbol("not plain");

/** Deeper than this, the value is left to devalue, whose stack decides as it always did.
 *  This writer's frames are smaller than devalue's: it wrote values nested ~4,000 levels
 *  deep that devalue.parse (as deep a recursion) cannot read back, so the step was recorded
 *  with a value no replay could decode. devalue.stringify stops (a refusal naming the
 *  depth) before its parse would. */
const MAX_PLAIN_DEPTH = 1000;

const lookupGetter = (
  Object.prototype as unknown as { __lookupGetter__: (this: object, key: string) => unknown }
).__lookupGetter__;

/** devalue's text of `value` when it is plain data, else undefined. */
export function plainText(value: unknown): string | undefined {
  const text = plainTextOrReads(value);
  return typeof text === "string" ? text : undefined;
}

/** The elements read by a getter of each array that has one: the encoder's own path hands
 *  them over instead of reading them again (codec.ts). */
export type GetterReads = Map<unknown[], unknown[]>;

/** plainText's answer, or, for a value that is not plain data, the elements read by an
 *  array's getters before that was found (an array's indices are not looked at before they
 *  are read: one look each cost ~30 ns, against 1-2 to read a data element); undefined when
 *  none was. */
export function plainTextOrReads(value: unknown): string | GetterReads | undefined {
  const entries: string[] = [];
  const writer = new PlainWriter(entries);
  const index = writer.flatten(value);
  if (index === NOT_PLAIN) return writer.getterReads();
  // As devalue: a value written as a code alone (undefined, NaN...) is that code.
  if (index < 0) return `${index}`;
  return `[${entries.join(",")}]`;
}

/** What a negative code stands for. */
const CODED = new Map<number, unknown>([
  [UNDEFINED, undefined],
  [NAN, Number.NaN],
  [POSITIVE_INFINITY, Number.POSITIVE_INFINITY],
  [NEGATIVE_INFINITY, Number.NEGATIVE_INFINITY],
  [NEGATIVE_ZERO, -0],
]);

class PlainWriter {
  private readonly indexes = new Map<unknown, number>();
  private depth = 0;
  /** The element an array was reading when a part of it was found not plain. */
  private readLast: Map<unknown[], { element: unknown; count: number }> | undefined;

  constructor(private readonly entries: string[]) {}

  /** The entry index of `thing` (written), a negative code, or NOT_PLAIN. Entries are
   *  numbered as devalue numbers them: in the order first met, a part before what it holds. */
  flatten(thing: unknown): number | typeof NOT_PLAIN {
    if (thing === undefined) return UNDEFINED;
    if (typeof thing === "number") {
      if (Number.isNaN(thing)) return NAN;
      if (thing === Number.POSITIVE_INFINITY) return POSITIVE_INFINITY;
      if (thing === Number.NEGATIVE_INFINITY) return NEGATIVE_INFINITY;
      if (thing === 0 && 1 / thing < 0) return NEGATIVE_ZERO;
    }
    const known = this.indexes.get(thing);
    if (known !== undefined) return known;
    if (typeof thing !== "object" || thing === null) {
      const text = primitiveText(thing);
      if (text === undefined) return NOT_PLAIN;
      return this.write(thing, text);
    }
    if (this.depth >= MAX_PLAIN_DEPTH) return NOT_PLAIN;
    const index = this.reserve(thing);
    this.depth++;
    const text = Array.isArray(thing) ? this.arrayText(thing) : this.objectText(thing);
    this.depth--;
    if (text === undefined) return NOT_PLAIN;
    this.entries[index] = text;
    return index;
  }

  private write(thing: unknown, text: string): number {
    const index = this.reserve(thing);
    this.entries[index] = text;
    return index;
  }

  /** The next index, its entry held by a placeholder (an array with holes joins slowly). */
  private reserve(thing: unknown): number {
    const index = this.entries.length;
    this.entries.push("");
    this.indexes.set(thing, index);
    return index;
  }

  /** A dense array of Array.prototype with no other keys: `[i,j,...]`. */
  private arrayText(array: unknown[]): string | undefined {
    // An enumerable symbol key is refused by the encoder's own path (kept-whole.ts).
    if (!isPlainShell(array, Array.prototype) || hasSymbolKey(array)) return undefined;
    // As many keys as elements, the last one the last index: keys are listed indices first,
    // ascending, so they are the indices 0..length-1, no hole and no other key. The count
    // alone took [1, , 3] with an `x` for dense, and read its hole through the prototype.
    const length = array.length;
    const keys = Object.keys(array);
    if (keys.length !== length || (length > 0 && keys[length - 1] !== `${length - 1}`)) {
      return undefined;
    }
    if (typeof (array as { then?: unknown }).then === "function") return undefined;
    let text = "[";
    for (let i = 0; i < length; i++) {
      const element = array[i];
      const index = this.flatten(element);
      if (index === NOT_PLAIN) {
        // What was read, for getterReads: the entries of those before (in the entry's
        // placeholder), and this one.
        this.entries[this.indexes.get(array) as number] = text;
        this.readLast ??= new Map();
        this.readLast.set(array, { element, count: i + 1 });
        return undefined;
      }
      text += i === 0 ? `${index}` : `,${index}`;
    }
    return `${text}]`;
  }

  /** After NOT_PLAIN: the elements each array with a getter among those read handed over,
   *  from the entries written (an element is an entry index or a code); undefined when no
   *  getter was read. Only here, on values that are not plain data, are indices looked at. */
  getterReads(): GetterReads | undefined {
    let reads: GetterReads | undefined;
    let byIndex: Map<number, unknown> | undefined;
    for (const [thing, at] of this.indexes) {
      if (!Array.isArray(thing)) continue;
      const text = this.entries[at] as string;
      const last = this.readLast?.get(thing);
      // Read whole (its text is written), up to the part not plain, or not at all.
      const whole = text.endsWith("]");
      const read = whole ? thing.length : (last?.count ?? 0);
      let getter = false;
      for (let i = 0; i < read && !getter; i++) {
        getter = lookupGetter.call(thing, `${i}`) !== undefined;
      }
      if (!getter) continue;
      if (byIndex === undefined) {
        byIndex = new Map();
        for (const [v, i] of this.indexes) byIndex.set(i, v);
      }
      const inside = text.slice(1, whole ? -1 : undefined);
      const values = (inside === "" ? [] : inside.split(",")).map((p) => {
        const n = Number(p);
        return n < 0 ? CODED.get(n) : byIndex?.get(n);
      });
      if (last !== undefined) values.push(last.element);
      reads ??= new Map();
      reads.set(thing, values);
    }
    return reads;
  }

  /** An object of Object.prototype, string keys only, no accessor: `{"key":i,...}`. */
  private objectText(object: object): string | undefined {
    if (!isPlainShell(object, Object.prototype)) return undefined;
    if (Object.getOwnPropertySymbols(object).length > 0) return undefined;
    const keys = Object.keys(object);
    // Looked at before any property is read: a getter is never run here.
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i] as string;
      if (key === "__proto__" || lookupGetter.call(object, key) !== undefined) return undefined;
    }
    if (typeof (object as { then?: unknown }).then === "function") return undefined;
    // A part that is not plain data (a Date, a Map, a class instance) among these values is
    // found before the others are written: found after them, their writing was thrown away
    // (a step's { items, at: new Date() } took 8.2 us to encode, against 5.7 before plainText).
    for (let i = 0; i < keys.length; i++) {
      const part = (object as Record<string, unknown>)[keys[i] as string];
      if (typeof part === "object" && part !== null && !plainProto(part)) return undefined;
    }
    let text = "{";
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i] as string;
      const index = this.flatten((object as Record<string, unknown>)[key]);
      if (index === NOT_PLAIN) return undefined;
      text += `${i === 0 ? "" : ","}${quoted(key)}:${index}`;
    }
    return `${text}}`;
  }
}

/** Of `proto`, no proxy, and the built-in tag devalue reads (get_type) is the prototype's:
 *  no Symbol.toStringTag, no other built-in (a Date or an Error given another prototype).
 *  A proxy is told first: asking its prototype runs its trap, which the encoder's own path
 *  then runs again. `in` runs no getter on an object that is no proxy. */
function isPlainShell(value: object, proto: object): boolean {
  return (
    !types.isProxy(value) &&
    Object.getPrototypeOf(value) === proto &&
    !(Symbol.toStringTag in value) &&
    toTag.call(value) === (proto === Array.prototype ? "[object Array]" : "[object Object]") &&
    // A Map or a buffer given Object.prototype: its toString tag is "Object", and `{}` was
    // written without its entries or bytes (kept-whole.ts).
    (proto === Array.prototype || !hasHiddenSlots(value))
  );
}

const toTag = Object.prototype.toString;

/** Whether `part` may be plain data, told by its prototype alone (a proxy's is not asked). */
function plainProto(part: object): boolean {
  if (types.isProxy(part)) return false;
  const proto = Object.getPrototypeOf(part);
  return proto === Object.prototype || proto === Array.prototype;
}

/** devalue's text of a primitive (stringify_primitive), or undefined for a symbol or function. */
function primitiveText(thing: unknown): string | undefined {
  switch (typeof thing) {
    case "string":
      return quoted(thing);
    case "number":
    case "boolean":
      return String(thing);
    case "bigint":
      return `["BigInt","${thing}"]`;
    case "object":
      return thing === null ? "null" : undefined;
    default:
      return undefined;
  }
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are escaped.
const ESCAPED = /["<\\\u0000-\u001f\u2028\u2029]/g;

/** devalue's stringify_string: JSON's quoting, with `<`, U+2028 and U+2029 escaped too. */
function quoted(text: string): string {
  ESCAPED.lastIndex = 0;
  if (!ESCAPED.test(text)) return `"${text}"`;
  ESCAPED.lastIndex = 0;
  return `"${text.replace(ESCAPED, escapedChar)}"`;
}

function escapedChar(char: string): string {
  switch (char) {
    case '"':
      return '\\"';
    case "<":
      return "\\u003C";
    case "\\":
      return "\\\\";
    case "\n":
      return "\\n";
    case "\r":
      return "\\r";
    case "\t":
      return "\\t";
    case "\b":
      return "\\b";
    case "\f":
      return "\\f";
    case "\u2028":
      return "\\u2028";
    case "\u2029":
      return "\\u2029";
    default:
      return `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`;
  }
}
