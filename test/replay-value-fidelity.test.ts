// Replay value fidelity for hostile values, generated: a step returns a value (nested
// objects, arrays with holes and extra properties, Map/Set, Dates valid or not, BigInt, -0,
// NaN, Infinity, typed arrays/DataView/ArrayBuffer, Errors with a cause and properties,
// class instances, objects without a prototype, symbol keys, getters, lone surrogates, NUL,
// cut emoji, long strings, deep nesting, repeated and circular references, values of a
// node:vm realm, proxies, a getter that counts its reads and one that recurses). The workflow
// must be handed the same value by its first execution and by the replay after a sleep
// (the journal read back from the store), and that value must hold the data the step
// returned, each getter read once; or the first execution must fail with a
// SerializationError naming the step.
// Runs 120 cases on SQLite and 25 on Postgres; CAIRN_SOAK=1 runs 2,000 and 300.

import vm from "node:vm";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { SerializationError, workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { faithfulCopy, sameValue } from "./helpers/value-equality.js";

const SOAK = process.env.CAIRN_SOAK === "1";

// ---- generators ----

const CUT_EMOJI = "👍".slice(0, 1);
const hostileString = fc.oneof(
  fc.string({ unit: "binary", maxLength: 20 }),
  fc.string({ unit: "grapheme", maxLength: 10 }),
  fc.constantFrom(
    "",
    "\u0000",
    `a\u0000b`,
    CUT_EMOJI,
    "👍".slice(1),
    `x${CUT_EMOJI}`,
    "\uD800\uDC00",
    "\uDFFF\uD800",
    "\u2028\u2029",
    "\uFFFE\uFFFF",
    "cairn:enc:1:k:AAAA",
    "cairn:enc:0:cairn:enc:x",
    '"],[-1',
    "__proto__",
  ),
  fc.integer({ min: 1, max: 4 }).map((n) => `${CUT_EMOJI}\u0000`.repeat(n * 20_000)),
);

const numberLike = fc.oneof(
  fc.double(),
  fc.constantFrom(-0, 0, Number.NaN, Infinity, -Infinity, Number.MAX_VALUE, Number.MIN_VALUE),
  fc.integer(),
  fc.bigInt(),
);

const dateLike = fc.oneof(
  fc.date({ noInvalidDate: false }),
  fc.constantFrom(new Date(8.64e15), new Date(-8.64e15), new Date(Number.NaN), new Date(-1)),
);

const TYPED = [
  Int8Array,
  Uint8Array,
  Uint8ClampedArray,
  Int16Array,
  Uint16Array,
  Int32Array,
  Uint32Array,
  Float32Array,
  Float64Array,
  BigInt64Array,
  BigUint64Array,
] as const;

const bytes = fc.uint8Array({ maxLength: 64 });
const binary = fc.oneof(
  bytes.map((b) => b.slice().buffer),
  bytes.map((b) => Buffer.from(b)),
  bytes.map((b) => new DataView(b.slice().buffer)),
  fc
    .tuple(
      fc.constantFrom(...TYPED),
      fc.integer({ min: 0, max: 8 }),
      fc.integer({ min: 0, max: 4 }),
      fc.integer({ min: 0, max: 2 }),
    )
    .map(([T, n, from, cut]) => {
      const whole = new T(n + from + cut);
      for (let i = 0; i < whole.length; i++) {
        (whole as unknown as number[])[i] = (
          T === BigInt64Array || T === BigUint64Array ? BigInt(i * 7) : i * 7.5
        ) as number;
      }
      return whole.subarray(from, from + n);
    }),
  bytes.map((b) => new DataView(b.slice().buffer, Math.min(1, b.length))),
);

const leaf = fc.oneof(
  hostileString,
  numberLike,
  fc.boolean(),
  fc.constantFrom(null, undefined),
  dateLike,
  binary,
  fc.constantFrom(/a+b/giu, /x/y, new URL("https://example.com/a?b=c#d")),
  fc.constantFrom(Object("boxed"), Object(1), Object(false), Object(10n)),
);

class Point {
  constructor(
    public x = 1,
    public y = 2,
  ) {}
}
class TaggedMap extends Map<unknown, unknown> {}
class Stamp extends Date {}
class List extends Array<unknown> {}

/** How often each counting getter was read (fast-check hands a value to more than one case
 *  while it shrinks: each case starts them at 0). */
const getterReads = new Set<{ n: number }>();

/** A getter that answers a new object holding the same getter, for ever. */
function recursing(): unknown {
  return {
    get next() {
      return recursing();
    },
  };
}

/** Values whose shape a plain copy changes: each is stored faithfully or refused. */
function oddities(inner: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> {
  return fc.oneof(
    // Arrays with holes and extra (non-index) properties.
    fc
      .tuple(fc.array(inner, { maxLength: 4 }), fc.integer({ min: 0, max: 6 }), inner)
      .map(([a, hole, extra]) => {
        const arr = [...a];
        arr.length = a.length + hole;
        if (hole % 2 === 1) (arr as unknown as Record<string, unknown>).extra = extra;
        return arr;
      }),
    // Errors: with a cause (option or assigned), own properties, subclass names.
    fc
      .tuple(
        hostileString,
        fc.option(inner),
        fc.option(inner),
        fc.constantFrom(Error, TypeError, RangeError),
        fc.boolean(),
      )
      .map(([message, cause, status, E, assigned]) => {
        const e = cause === null || assigned ? new E(message) : new E(message, { cause });
        if (cause !== null && assigned) (e as { cause?: unknown }).cause = cause;
        if (status !== null) (e as unknown as Record<string, unknown>).status = status;
        if (assigned && status !== null) (e as unknown as Record<symbol, unknown>)[Symbol("s")] = 1;
        return e;
      }),
    fc.constant(Object.assign(new Error("with code"), { code: "E_X" })),
    // Objects without a prototype, objects whose prototype has none, class instances.
    fc
      .dictionary(fc.string({ maxLength: 5 }), inner, { maxKeys: 3 })
      .map((d) => Object.assign(Object.create(null), d)),
    inner.map((v) =>
      Object.assign(Object.create(Object.assign(Object.create(null), { inherited: 1 })), { v }),
    ),
    fc.constant(new Point()),
    fc.constant(new TaggedMap([[1, 2]])),
    fc.constant(new Stamp(0)),
    fc.constant(List.from([1, 2])),
    // Regex matches (their index, input, groups and indices), one with extra properties.
    fc
      .tuple(hostileString, fc.constantFrom(/b/, /(?<g>b)(x)?/d, /(.)/g, /$/))
      .map(([text, re]) => re.exec(`ab${text}`) ?? [...`ab${text}`.matchAll(/./g)]),
    fc
      .tuple(fc.array(inner, { maxLength: 3 }), inner)
      .map(([items, note]) => Object.assign([...items], { note })),
    // Values whose parts lead back to them: an Error (execFileSync's err.error = err, a
    // cause holding it, a code holding it) and an array with properties.
    fc
      .tuple(hostileString, inner, fc.constantFrom("error", "cause", "code", "deep"))
      .map(([message, v, where]) => {
        const e = new Error(message) as Error & Record<string, unknown>;
        if (where === "deep") e.response = { v, request: { error: e } };
        else e[where] = where === "error" ? e : { v, self: e };
        return e;
      }),
    inner.map((v) => {
      const a = Object.assign([v], { self: undefined as unknown });
      a.self = a;
      return a;
    }),
    // Symbol keys, enumerable or not; non-enumerable string keys.
    inner.map((v) => ({ v, [Symbol("s")]: 1 })),
    inner.map((v) =>
      Object.defineProperty({ v }, Symbol("hidden"), { value: 1, enumerable: false }),
    ),
    // Getters (stable), and one deep down.
    inner.map((v) => ({
      get g() {
        return v;
      },
    })),
    // Date, Map with extra properties.
    inner.map((v) => Object.assign(new Date(0), { note: v })),
    inner.map((v) => Object.assign(new Map([[v, v]]), { note: 1 })),
    fc.constant(Object.assign(new Set([1]), { note: 1 })),
    fc.constant(Object.assign(/re/g, { note: 1 })),
    // Values of another realm (node:vm), proxies of plain data.
    fc
      .constantFrom(
        "({ m: new Map([[1, [2]]]), d: new Date(5), a: [1, , 3], o: Object.create(null) })",
        "new TypeError('vm', { cause: new RangeError('inner') })",
        "Object.assign([1], { extra: 1 })",
        "new (class V extends Set {})([1])",
      )
      .map((code) => vm.runInNewContext(code) as unknown),
    inner.map((v) => new Proxy({ v }, {})),
    inner.map((v) => new Proxy([v, v], {})),
    // A getter that counts its reads (the encoder reads it once), and one that recurses.
    inner.map((v) => {
      const reads = { n: 0 };
      getterReads.add(reads);
      return {
        get counted() {
          reads.n++;
          return v;
        },
        after: new Uint8Array([1]),
      };
    }),
    fc.constant(recursing()),
  );
}

const { value: hostile } = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    leaf,
    fc.array(tie("value"), { maxLength: 4 }),
    fc.dictionary(hostileString, tie("value"), { maxKeys: 4 }),
    fc.array(fc.tuple(tie("value"), tie("value")), { maxLength: 3 }).map((es) => new Map(es)),
    fc.array(tie("value"), { maxLength: 3 }).map((vs) => new Set(vs)),
    oddities(tie("value")),
  ),
}));

/** The value, and sometimes it again beside itself, inside itself, or nested deep. */
const stepValue = fc.oneof(
  { weight: 4, arbitrary: hostile },
  hostile.map((v) => ({ a: v, b: v, list: [v, v] })),
  hostile.map((v) => {
    const o: Record<string, unknown> = { v };
    o.self = o;
    o.map = new Map([[o, [o]]]);
    return o;
  }),
  fc.tuple(hostile, fc.constantFrom(50, 5000)).map(([v, depth]) => {
    let deep: unknown = v;
    for (let i = 0; i < depth; i++) deep = { d: deep };
    return deep;
  }),
);

// ---- the property ----

describe.each(BACKENDS)("a step's hostile value, first run and replay (%s)", (backend) => {
  const harness = useHarness(backend);
  const runs = backend === "sqlite" ? (SOAK ? 2000 : 120) : SOAK ? 300 : 25;

  it(
    "is handed over the same both times and holds what the step returned, or is refused naming the step",
    async () => {
      const h = harness();
      const values = new Map<string, unknown>();
      const seen = new Map<string, Array<{ value?: unknown; error?: unknown }>>();
      const wf = workflow({ name: "fidelity", version: "1" }, async (ctx, id: string) => {
        let handed: { value?: unknown; error?: unknown };
        try {
          handed = { value: await ctx.step("s", () => values.get(id)) };
        } catch (error) {
          handed = { error };
        }
        seen.get(id)?.push(handed);
        await ctx.sleep("nap", 1000);
        return "done";
      });
      const e = h.engine([wf]);
      let n = 0;
      await fc.assert(
        fc.asyncProperty(stepValue, async (value) => {
          const id = `case-${n++}`;
          values.set(id, value);
          for (const reads of getterReads) reads.n = 0;
          seen.set(id, []);
          const run = await e.start(wf, id, { id });
          await until(async () => (await e.getRun(id))?.status === "waiting", `run ${id} waits`);
          expect(await advanceUntil(h.clock, run.result(), 1000, 200)).toBe("done");
          const [first, replay] = seen.get(id) ?? [];
          expect(seen.get(id)).toHaveLength(2);
          if (first?.error !== undefined) {
            // Refused: loudly, at the first run, naming the step; the replay says the same.
            expect(first.error).toBeInstanceOf(SerializationError);
            expect((first.error as Error).message).toContain(`Step "s" of run "${id}"`);
            expect((replay?.error as Error | undefined)?.message).toBe(
              (first.error as Error).message,
            );
            return;
          }
          expect(replay?.error).toBeUndefined();
          expect(Math.max(0, ...[...getterReads].map((r) => r.n))).toBeLessThanOrEqual(1);
          expect(sameValue(first?.value, replay?.value)).toBeUndefined();
          expect(faithfulCopy(value, first?.value)).toBeUndefined();
        }),
        {
          numRuns: runs,
          ...(process.env.CAIRN_SEED ? { seed: Number(process.env.CAIRN_SEED) } : {}),
        },
      );
    },
    SOAK ? 3_600_000 : 240_000,
  );
});
