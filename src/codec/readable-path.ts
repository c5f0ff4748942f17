// The path of a refused part, as the user's value holds it. The encoder names a path by the
// parts it stored: inside an Error, those are the parts error-parts.ts made of it, so a
// function in an axios error's `config` was "at [4].config.adapter" (4: the parts' index of
// its enumerable properties), which names nothing the user's value has. Here the path is
// walked through the value, and each Error's part index becomes the property it stands for;
// so does an array's with properties beside its elements (array-parts.ts: [0] its
// elements, [1] its properties). A Map's entry (`.get("k")`, `.get(...)` for a key that is
// an object) is walked into as well: into the value of the entry with that key, or, for an
// object key, into whichever key or value of such an entry the rest of the path is in.

import { arrayWithPropsParts } from "./array-parts.js";
import { isError } from "./error-parts.js";

/** The Error parts (error-parts.ts) a path may go through: the base parts by index, then
 *  the enumerable, the hidden and the symbol-keyed properties, each an object of them. */
const BASE_PART_NAMES = [".name", ".message", ".stack", ".code"];
const PROPS_PARTS = new Set([4, 5]);
const SYMBOLS_PART = 6;

const SEGMENT = /^(?:\.([A-Za-z_$][\w$]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\])/;
/** A Map's entry, by its key's text: looked for first (SEGMENT takes `.get` for a property). */
const ENTRY = /^\.get\(("(?:[^"\\]|\\.)*"|[^)]*)\)/;

type Walked = { path: string; error?: string; exact: boolean };

/** `path` (the encoder's) with each Error part index replaced by what it stands for, and
 *  the path of the first Error it goes into, if one. */
export function readablePath(root: unknown, path: string): { path: string; error?: string } {
  const { path: readable, error } = walk(root, path, "", undefined);
  return { path: readable, error };
}

/** The rest of a path walked from `value`, `out` the readable path so far; exact when each
 *  segment named a part the value has. */
function walk(value: unknown, rest: string, out: string, error: string | undefined): Walked {
  let exact = true;
  while (rest !== "") {
    const entry = ENTRY.exec(rest);
    if (entry) {
      rest = rest.slice(entry[0].length);
      return walkEntry(value, entry[1] as string, rest, out + entry[0], error);
    }
    const m = SEGMENT.exec(rest);
    // A segment not read here: the rest is kept as the encoder said it.
    if (!m) return { path: out + rest, error, exact: false };
    rest = rest.slice(m[0].length);
    const index = m[2] === undefined ? undefined : Number(m[2]);
    if (index !== undefined && isError(value)) {
      error ??= out || "(root)";
      const base = BASE_PART_NAMES[index];
      if (base !== undefined) {
        out += base;
        value = index === 3 ? read(value, "code") : undefined;
        continue;
      }
      // The part itself refused (its properties holding an own "__proto__" key): the Error
      // is the place, "[4]" named nothing it has.
      if (rest === "" && (PROPS_PARTS.has(index) || index === SYMBOLS_PART)) {
        return { path: out, error, exact };
      }
      const key = SEGMENT.exec(rest);
      const name = key?.[1] ?? (key?.[3] === undefined ? undefined : JSON.parse(key[3]));
      if (key && typeof name === "string" && (PROPS_PARTS.has(index) || index === SYMBOLS_PART)) {
        rest = rest.slice(key[0].length);
        const symbol = index === SYMBOLS_PART;
        out += symbol ? `[Symbol.for(${JSON.stringify(name)})]` : key[0];
        value = read(value, symbol ? Symbol.for(name) : name);
        continue;
      }
      return { path: out + m[0] + rest, error, exact: false };
    }
    if (index !== undefined && arrayWithPropsParts(value) !== false) {
      // The parts themselves refused (its properties holding an own "__proto__" key): the
      // array is the place, "[1]" named an element it may not have.
      if (rest === "" && (index === 0 || index === 1)) return { path: out, error, exact };
      // [0][i]: its element i; [1].key: its property.
      const key = SEGMENT.exec(rest);
      const inner =
        key?.[1] ??
        key?.[2] ??
        (key?.[3] === undefined ? undefined : (JSON.parse(key[3]) as string));
      if (key && inner !== undefined && (index === 0 || index === 1)) {
        rest = rest.slice(key[0].length);
        out += key[0];
        value = read(value, inner);
        continue;
      }
      return { path: out + m[0] + rest, error, exact: false };
    }
    out += m[0];
    const name = m[1] ?? m[2] ?? (m[3] === undefined ? undefined : JSON.parse(m[3]));
    if (!hasOwn(value, name)) exact = false;
    value = typeof name === "string" ? read(value, name) : undefined;
  }
  return { path: out, error, exact };
}

/** The rest of a path walked into a Map's entry, `key` the encoder's text of its key. */
function walkEntry(
  value: unknown,
  key: string,
  rest: string,
  out: string,
  error: string | undefined,
): Walked {
  const tries: Walked[] = [];
  for (const inside of entryParts(value, key)) {
    const walked = walk(inside, rest, out, error);
    if (walked.exact) return walked;
    tries.push(walked);
  }
  return tries[0] ?? { path: out + rest, error, exact: false };
}

/** What a path into the entry named `key` may go into: the value of the entry with that
 *  primitive key, or each object key and its value. */
function entryParts(map: unknown, key: string): unknown[] {
  if (!(map instanceof Map)) return [];
  const parts: unknown[] = [];
  try {
    for (const [k, v] of map) {
      const object = (typeof k === "object" && k !== null) || typeof k === "function";
      if (key === "..." ? object : !object && namesKey(key, k)) parts.push(k, v);
    }
  } catch {
    // a Map of another realm, or a proxy: not walked
  }
  // A primitive key holds nothing a path goes on into: its value does.
  return key === "..." ? parts : parts.filter((_, i) => i % 2 === 1);
}

/** Whether the encoder names primitive key `k` by `text` (devalue's stringify_primitive:
 *  a string as JSON text, some characters escaped as \uXXXX; undefined as -1). */
function namesKey(text: string, k: unknown): boolean {
  switch (typeof k) {
    case "string":
      try {
        return text.startsWith('"') && JSON.parse(text) === k;
      } catch {
        return false;
      }
    case "bigint":
      return text === `["BigInt","${k}"]`;
    case "undefined":
      return text === "-1";
    default:
      return text === String(k);
  }
}

/** Whether `value` has an own property `key` (looked at without running a getter). */
function hasOwn(value: unknown, key: unknown): boolean {
  if (typeof value !== "object" || value === null || typeof key !== "string") return false;
  try {
    return Object.hasOwn(value, key);
  } catch {
    return false;
  }
}

/** An own property's value, read as the encoder read it; undefined where there is none. */
function read(value: unknown, key: PropertyKey): unknown {
  if (typeof value !== "object" || value === null) return undefined;
  try {
    return (value as Record<PropertyKey, unknown>)[key];
  } catch {
    return undefined;
  }
}
