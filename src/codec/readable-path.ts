// The path of a refused part, as the user's value holds it. The encoder names a path by the
// parts it stored: inside an Error, those are the parts error-parts.ts made of it, so a
// function in an axios error's `config` was "at [4].config.adapter" (4: the parts' index of
// its enumerable properties), which names nothing the user's value has. Here the path is
// walked through the value, and each Error's part index becomes the property it stands for.

import { isError } from "./error-parts.js";

/** The Error parts (error-parts.ts) a path may go through: the base parts by index, then
 *  the enumerable, the hidden and the symbol-keyed properties, each an object of them. */
const BASE_PART_NAMES = [".name", ".message", ".stack", ".code"];
const PROPS_PARTS = new Set([4, 5]);
const SYMBOLS_PART = 6;

const SEGMENT = /^(?:\.([A-Za-z_$][\w$]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]|\.get\([^)]*\))/;

/** `path` (the encoder's) with each Error part index replaced by what it stands for, and
 *  the path of the first Error it goes into, if one. */
export function readablePath(root: unknown, path: string): { path: string; error?: string } {
  let value: unknown = root;
  let rest = path;
  let out = "";
  let error: string | undefined;
  while (rest !== "") {
    const m = SEGMENT.exec(rest);
    // A segment not read here (a Map's key): the rest is kept as the encoder said it.
    if (!m) return { path: out + rest, error };
    rest = rest.slice(m[0].length);
    const index = m[2] === undefined ? undefined : Number(m[2]);
    if (isError(value) && index !== undefined) {
      error ??= out || "(root)";
      const base = BASE_PART_NAMES[index];
      if (base !== undefined) {
        out += base;
        value = undefined;
        continue;
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
      return { path: out + m[0] + rest, error };
    }
    out += m[0];
    const name = m[1] ?? m[2] ?? (m[3] === undefined ? undefined : JSON.parse(m[3]));
    value = typeof name === "string" ? read(value, name) : undefined;
  }
  return { path: out, error };
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
