// Where two outputs of a crash sweep differ, said so a person can find it: the path to the
// first part that differs (`.items[2].price`, `.byId.get("a")`) and that part on each side,
// shown as Node shows values. Shown whole, by JSON, a Map, a Set or a BigInt inside an output
// read as `{}` or `[object Object]` on both sides, and a long output that differs past its
// first hundred characters read the same on both sides.

import { inspect, isDeepStrictEqual } from "node:util";

export interface Difference {
  /** From the output's top, e.g. `.items[2]`; "" when the outputs differ as a whole. */
  path: string;
  got: unknown;
  base: unknown;
}

const SHOWN_CHARS = 120;

/** The first part where `got` differs from `base`; undefined when they are equal. */
export function firstDifference(got: unknown, base: unknown, path = ""): Difference | undefined {
  if (isDeepStrictEqual(got, base)) return undefined;
  if (Array.isArray(got) && Array.isArray(base)) {
    for (let i = 0; i < Math.min(got.length, base.length); i++) {
      const d = firstDifference(got[i], base[i], `${path}[${i}]`);
      if (d) return d;
    }
    return { path: `${path}.length`, got: got.length, base: base.length };
  }
  if (got instanceof Map && base instanceof Map) {
    for (const [k, v] of base) {
      const at = `${path}.get(${show(k)})`;
      if (!got.has(k)) return { path: at, got: undefined, base: v };
      const d = firstDifference(got.get(k), v, at);
      if (d) return d;
    }
    for (const [k, v] of got) {
      if (!base.has(k)) return { path: `${path}.get(${show(k)})`, got: v, base: undefined };
    }
  }
  if (isPlainObject(got) && isPlainObject(base)) {
    const keys = [...new Set([...Object.keys(base), ...Object.keys(got)])];
    for (const k of keys) {
      const at = `${path}${/^[A-Za-z_$][\w$]*$/.test(k) ? `.${k}` : `[${JSON.stringify(k)}]`}`;
      const d = firstDifference(got[k], base[k], at);
      if (d) return d;
    }
  }
  if (typeof got === "string" && typeof base === "string" && path.length + got.length > 60) {
    let i = 0;
    while (i < got.length && got[i] === base[i]) i++;
    if (i > 20) {
      return { path: `${path}.slice(${i})`, got: got.slice(i), base: base.slice(i) };
    }
  }
  return { path, got, base };
}

/** A value as Node shows it, on one line, cut to SHOWN_CHARS. */
export function show(v: unknown): string {
  const s = inspect(v, { depth: 3, breakLength: Number.POSITIVE_INFINITY, maxArrayLength: 10 });
  return s.length > SHOWN_CHARS ? `${s.slice(0, SHOWN_CHARS - 3)}...` : s;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== "object" || v === null) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}
