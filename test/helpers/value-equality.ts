// Comparisons for the codec's fidelity tests (replay-value-fidelity.test.ts).
// - sameValue: two values a workflow was handed are the same to any code that reads them:
//   the same prototypes, own property descriptors (symbols too), Object.is on primitives,
//   internal slots (a Date's time, a Map's entries in order, a view's kind, bytes, offset),
//   and the same sharing of objects (a bijection: a repeated or circular reference in one is
//   the same one in the other).
// - faithfulCopy: a value a step returned and the copy the workflow was handed hold the same
//   data, as docs/API.md says the codec keeps it: own enumerable string keys in order with
//   their values (a getter's value as a data property), Errors by name, message, stack,
//   code, cause and other own enumerable properties, a Buffer as a Uint8Array, a view showing
//   part of its buffer as its bytes over a buffer of their own.
// Each returns the path of the first difference, or undefined.

import { types } from "node:util";

type Diff = string | undefined;

const typedArrayProto = Object.getPrototypeOf(Uint8Array.prototype) as object;
const typedArrayKind = Object.getOwnPropertyDescriptor(typedArrayProto, Symbol.toStringTag)
  ?.get as (this: unknown) => string | undefined;

function viewBytes(v: ArrayBufferView): Uint8Array {
  return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** Internal slots both values must share: undefined when they do, else a difference. */
function slotDiff(
  a: object,
  b: object,
  path: string,
  inner: (x: unknown, y: unknown, p: string) => Diff,
): Diff {
  if (types.isDate(a) !== types.isDate(b)) return `${path}: Date or not`;
  if (types.isDate(a) && !Object.is((a as Date).getTime(), (b as Date).getTime())) {
    return `${path}: Date time`;
  }
  if (types.isRegExp(a) !== types.isRegExp(b)) return `${path}: RegExp or not`;
  if (types.isRegExp(a)) {
    const [x, y] = [a as RegExp, b as RegExp];
    if (x.source !== y.source || x.flags !== y.flags) return `${path}: RegExp source or flags`;
  }
  if (types.isBoxedPrimitive(a) !== types.isBoxedPrimitive(b)) return `${path}: boxed or not`;
  if (types.isBoxedPrimitive(a) && !Object.is(a.valueOf(), b.valueOf()))
    return `${path}: boxed value`;
  if (a instanceof URL !== b instanceof URL) return `${path}: URL or not`;
  if (a instanceof URL && a.href !== (b as URL).href) return `${path}: URL href`;
  if (types.isArrayBuffer(a) !== types.isArrayBuffer(b)) return `${path}: ArrayBuffer or not`;
  if (types.isArrayBuffer(a)) {
    if (!sameBytes(new Uint8Array(a as ArrayBuffer), new Uint8Array(b as ArrayBuffer))) {
      return `${path}: ArrayBuffer bytes`;
    }
  }
  if (ArrayBuffer.isView(a) !== ArrayBuffer.isView(b)) return `${path}: view or not`;
  if (ArrayBuffer.isView(a)) {
    const [x, y] = [a as ArrayBufferView, b as ArrayBufferView];
    const kind = (v: unknown) => (types.isDataView(v) ? "DataView" : typedArrayKind.call(v));
    if (kind(x) !== kind(y)) return `${path}: view kind`;
    if (!sameBytes(viewBytes(x), viewBytes(y))) return `${path}: view bytes`;
    return (
      inner(x.byteOffset, y.byteOffset, `${path}.byteOffset`) ??
      inner(x.buffer, y.buffer, `${path}.buffer`)
    );
  }
  if (types.isMap(a) !== types.isMap(b)) return `${path}: Map or not`;
  if (types.isMap(a)) {
    const [x, y] = [[...(a as Map<unknown, unknown>)], [...(b as Map<unknown, unknown>)]];
    if (x.length !== y.length) return `${path}: Map size`;
    for (let i = 0; i < x.length; i++) {
      const d =
        inner(x[i]?.[0], y[i]?.[0], `${path}.keys[${i}]`) ??
        inner(x[i]?.[1], y[i]?.[1], `${path}.values[${i}]`);
      if (d) return d;
    }
  }
  if (types.isSet(a) !== types.isSet(b)) return `${path}: Set or not`;
  if (types.isSet(a)) {
    const [x, y] = [[...(a as Set<unknown>)], [...(b as Set<unknown>)]];
    if (x.length !== y.length) return `${path}: Set size`;
    for (let i = 0; i < x.length; i++) {
      const d = inner(x[i], y[i], `${path}.values[${i}]`);
      if (d) return d;
    }
  }
  if (Array.isArray(a) !== Array.isArray(b)) return `${path}: array or not`;
  return undefined;
}

/** Two values handed to a workflow are the same to any code that reads them. */
export function sameValue(a: unknown, b: unknown): Diff {
  const pairs = new Map<object, object>();
  const back = new Map<object, object>();
  const walk = (x: unknown, y: unknown, path: string): Diff => {
    if (typeof x !== typeof y) return `${path}: typeof ${typeof x} / ${typeof y}`;
    if (typeof x !== "object" || x === null || y === null) {
      return Object.is(x, y) ? undefined : `${path}: ${String(x)} / ${String(y)}`;
    }
    const o = x as object;
    const p = y as object;
    const known = pairs.get(o);
    if (known !== undefined || back.has(p)) {
      return known === p ? undefined : `${path}: shared differently`;
    }
    pairs.set(o, p);
    back.set(p, o);
    if (Object.getPrototypeOf(o) !== Object.getPrototypeOf(p)) return `${path}: prototype`;
    const slots = slotDiff(o, p, path, walk);
    if (slots) return slots;
    const keysA = Reflect.ownKeys(o);
    const keysB = Reflect.ownKeys(p);
    if (keysA.map(String).join("\0") !== keysB.map(String).join("\0")) {
      return `${path}: own keys ${keysA.map(String).join(",").slice(0, 200)} / ${keysB.map(String).join(",").slice(0, 200)}`;
    }
    for (let i = 0; i < keysA.length; i++) {
      const k = keysA[i] as PropertyKey;
      if (k !== keysB[i]) return `${path}: key ${String(k)}`;
      const da = Object.getOwnPropertyDescriptor(o, k) as PropertyDescriptor;
      const db = Object.getOwnPropertyDescriptor(p, k) as PropertyDescriptor;
      const at = `${path}[${String(k)}]`;
      for (const f of ["enumerable", "writable", "configurable"] as const) {
        if (da[f] !== db[f]) return `${at}: ${f}`;
      }
      if ("get" in da !== "get" in db) return `${at}: accessor or data`;
      // A typed array's indices are its bytes (compared above); an accessor's functions
      // are the workflow's code, not stored data.
      if ("value" in da) {
        const d = walk(da.value, db.value, at);
        if (d) return d;
      }
    }
    return undefined;
  };
  return walk(a, b, "");
}

/** The prototype a faithful copy of `v` has (the codec's documented normalizations). */
function copiedPrototype(v: object): unknown {
  if (Buffer.isBuffer(v)) return Uint8Array.prototype;
  if (types.isNativeError(v) || v instanceof Error) return Error.prototype;
  const proto = Object.getPrototypeOf(v) as { constructor?: unknown } | null;
  // A built-in of another realm (node:vm) comes back as this realm's.
  const ctor = proto?.constructor;
  if (
    typeof ctor === "function" &&
    /\[native code\]/.test(Function.prototype.toString.call(ctor))
  ) {
    const ours = (globalThis as Record<string, { prototype?: unknown } | undefined>)[ctor.name];
    if (ours?.prototype) return ours.prototype;
  }
  return proto;
}

/** The own keys whose values a faithful copy keeps. */
function keptKeys(v: object): string[] {
  if (ArrayBuffer.isView(v)) return [];
  if (types.isNativeError(v) || v instanceof Error) {
    return Object.keys(v).filter((k) => k !== "name" && k !== "code");
  }
  if (typeof v === "object" && types.isStringObject(v)) {
    return Object.keys(v).filter((k) => !/^\d+$/.test(k) || Number(k) >= v.valueOf().length);
  }
  return Object.keys(v);
}

/** `copy` holds the data `original` held, as docs/API.md says the codec keeps it. */
export function faithfulCopy(original: unknown, copy: unknown): Diff {
  const pairs = new Map<object, object>();
  const walk = (x: unknown, y: unknown, path: string): Diff => {
    if (typeof x !== typeof y) return `${path}: typeof ${typeof x} / ${typeof y}`;
    if (typeof x !== "object" || x === null || y === null) {
      return Object.is(x, y)
        ? undefined
        : `${path}: ${String(x).slice(0, 50)} / ${String(y).slice(0, 50)}`;
    }
    const o = x as object;
    const p = y as object;
    // Views showing part of a buffer come back over buffers of their own: their buffers
    // are not compared for identity, only their bytes (slotDiff).
    const isBuffer = types.isArrayBuffer(o);
    const known = pairs.get(o);
    if (known !== undefined && !isBuffer)
      return known === p ? undefined : `${path}: shared differently`;
    pairs.set(o, p);
    if (copiedPrototype(o) !== Object.getPrototypeOf(p)) return `${path}: prototype`;
    if (types.isNativeError(o) || o instanceof Error) {
      const [e, f] = [o as Error & { code?: unknown }, p as Error & { code?: unknown }];
      for (const k of ["name", "message", "stack"] as const) {
        if (!Object.is(e[k], f[k])) return `${path}.${k}`;
      }
      // A code may be an object (one that holds the Error too): compared as data.
      const code = walk(e.code, f.code, `${path}.code`);
      if (code) return code;
      if (Object.hasOwn(e, "cause") !== Object.hasOwn(f, "cause"))
        return `${path}.cause: kept or not`;
      if (Object.hasOwn(e, "cause")) {
        const d = walk(e.cause, f.cause, `${path}.cause`);
        if (d) return d;
      }
    }
    const slots = slotDiff(o, p, path, (a, b, at) =>
      ArrayBuffer.isView(o) ? undefined : walk(a, b, at),
    );
    if (slots) return slots;
    if (Array.isArray(o)) {
      const [a, b] = [o as unknown[], p as unknown[]];
      if (a.length !== b.length) return `${path}.length`;
    }
    const ka = keptKeys(o);
    const kb = keptKeys(p);
    if (ka.join("\0") !== kb.join("\0")) {
      return `${path}: keys ${ka.join(",").slice(0, 200)} / ${kb.join(",").slice(0, 200)}`;
    }
    for (const k of ka) {
      const d = walk(
        (o as Record<string, unknown>)[k],
        (p as Record<string, unknown>)[k],
        `${path}[${JSON.stringify(k)}]`,
      );
      if (d) return d;
    }
    return undefined;
  };
  return walk(original, copy, "");
}
