// How an array with properties beside its elements is stored: a regex match (`exec`,
// `match`, each of `matchAll`) has its `index`, `input` and `groups`, and `indices` under
// the `d` flag; some libraries tag a result list with a `total`. devalue stores an array by
// its elements alone, so such an array was refused (kept-whole.ts). It is stored under a
// tag of its own ("ArrayWithProps": its elements, holes kept, then its own enumerable
// string-keyed properties) which a cairn that does not know it cannot decode: it pauses
// the run as undecodable rather than hand over the array without them.
//
// Revived in place (revive-in-place.ts): its elements or properties may hold the array.
// Its other non-enumerable properties are not stored (as an object's are not); one with an
// enumerable symbol key is refused (as a plain array or object is).

import { hasSymbolKey, isBuiltInPrototype } from "./kept-whole.js";
import { revivedInPlace } from "./revive-in-place.js";

const isIndex = (k: string) => String(Number(k) >>> 0) === k && k !== "4294967295";

/** The parts of an array of the built-in Array prototype (of any realm) with own enumerable
 *  properties beside its elements, or false: its elements as a plain array (holes kept),
 *  then those properties as a plain object. Each is read once. */
export function arrayWithPropsParts(v: unknown): [unknown[], Record<string, unknown>] | false {
  if (!Array.isArray(v) || !isBuiltInPrototype(Object.getPrototypeOf(v), "Array")) return false;
  const keys = Object.keys(v);
  const last = keys[keys.length - 1];
  // Its enumerable symbol keys cannot be stored: refused (kept-whole.ts), never dropped.
  if (last === undefined || isIndex(last) || hasSymbolKey(v)) return false;
  // Every own index devalue would store (it asks hasOwn, not enumerability), read once.
  const elements: unknown[] = new Array((v as unknown[]).length);
  for (const k of Object.getOwnPropertyNames(v)) {
    if (isIndex(k)) elements[Number(k)] = (v as unknown[])[Number(k)];
  }
  const props: Record<string, unknown> = {};
  for (const k of keys) {
    if (isIndex(k)) continue;
    // Defined: a key "__proto__" is a key.
    Object.defineProperty(props, k, {
      value: (v as unknown as Record<string, unknown>)[k],
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return [elements, props];
}

function filled(array: unknown[], [elements, props]: unknown[]): void {
  const items = elements as unknown[];
  array.length = items.length;
  for (const k of Object.keys(items)) array[Number(k)] = items[Number(k)];
  for (const [k, value] of Object.entries(props as Record<string, unknown>)) {
    Object.defineProperty(array, k, {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
}

export const arrayRevivers = {
  ArrayWithProps: (parts: unknown[]) => revivedInPlace(parts, 2, () => [] as unknown[], filled),
};

/** True when `text` may hold an array stored with its properties. */
export function mayHoldArrayWithProps(text: string): boolean {
  return text.includes('"ArrayWithProps"');
}
