// Values on which codec/plain-text.ts (plain data written without devalue) stored
// other text than devalue's own path, or text no replay could read back.

import * as devalue from "devalue";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { decode, encode } from "../src/codec/codec.js";
import { plainText } from "../src/codec/plain-text.js";

function nested(depth: number, asArray: boolean): unknown {
  let value: unknown = 1;
  for (let i = 0; i < depth; i++) value = asArray ? [value] : { a: value };
  return value;
}

describe("a value nested thousands of levels deep", () => {
  // plainText's frames are smaller than devalue's: it wrote values 2,000 to ~4,000 levels
  // deep that devalue.parse cannot read (Maximum call stack size exceeded). The step was
  // recorded as completed with a value no execution could decode: the run paused for good.
  it.each([false, true])("is refused, or stored as text that decodes (array: %s)", (asArray) => {
    for (let depth = 1000; depth <= 6000; depth += 250) {
      const value = nested(depth, asArray);
      let text: string;
      try {
        text = encode(value);
      } catch (err) {
        expect((err as Error).message).toMatch(/nested this deeply/);
        continue;
      }
      expect(() => decode(text), `depth ${depth}`).not.toThrow();
    }
  });
});

describe("an array with a hole and a property beside its elements", () => {
  afterEach(() => {
    delete (Array.prototype as unknown as Record<number, unknown>)[1];
  });

  // As many keys as elements (the hole's missing key made up by `x`): plainText took it for
  // dense, read the hole through the prototype, and dropped `x`.
  it("is stored with its hole and its property, as devalue's path stores it", () => {
    (Array.prototype as unknown as Record<number, unknown>)[1] = 9;
    const array: unknown[] = [1];
    array[2] = 3;
    Object.assign(array, { x: 1 });
    expect(plainText(array)).toBeUndefined();
    const text = encode(array);
    delete (Array.prototype as unknown as Record<number, unknown>)[1];
    const back = decode<unknown[] & { x?: number }>(text);
    expect(Object.hasOwn(back, 1)).toBe(false);
    expect(back.x).toBe(1);
  });
});

describe("a proxy", () => {
  it("is not asked for its prototype by plainText (the encoder's own path asks it)", () => {
    let traps = 0;
    const proxy = new Proxy(
      { a: 1 },
      {
        getPrototypeOf(target) {
          traps++;
          return Object.getPrototypeOf(target);
        },
      },
    );
    expect(plainText([proxy])).toBeUndefined();
    expect(traps).toBe(0);
  });
});

describe("an array whose element is a getter, before a part that is not plain data", () => {
  // plainText read the getter, met the Date, gave up, and the encoder's own path read the
  // getter again: its side effect ran twice and the second answer was stored. Before
  // plainText, devalue's cheap pass went on past a Date (one read). Telling an index's
  // getter before reading it cost ~30 ns an element, so the answers plainText read are
  // handed to the encoder's path instead. (Not mended, and as before plainText: devalue's
  // cheap pass, stopped by a typed array after the getter, reads it again in the encoder's
  // reads: codec.ts's hasOwnGetter does not look at an array's indices.)
  function counted(answer: (n: number) => unknown) {
    let reads = 0;
    const array: unknown[] = [0, 0];
    Object.defineProperty(array, 1, {
      get() {
        reads++;
        return answer(reads);
      },
      enumerable: true,
    });
    return { array, reads: () => reads };
  }

  it.each([
    ["a Date after it", (n: number) => n, new Date(0)],
    ["its answer holds a Map", (n: number) => [n, new Map([[n, n]])], null],
    ["its answer is a Date", (n: number) => new Date(n), null],
  ])("is read once: %s", (_, answer, after) => {
    const { array, reads } = counted(answer);
    const back = decode<{ a: unknown[] }>(encode({ a: array, after }));
    expect(reads()).toBe(1);
    const first = back.a[1];
    const n = first instanceof Date ? first.getTime() : Array.isArray(first) ? first[0] : first;
    expect(n).toBe(1);
  });
});

describe("generated values with hostile keys and strings", () => {
  // Keys devalue quotes or orders otherwise (numeric-like, "__proto__", empty, lone
  // surrogates), holes, boxed values, null prototypes, Maps and Dates among plain parts:
  // plainText writes devalue's text or leaves the value to it.
  const key = fc.oneof(
    fc.string({ unit: "binary" }),
    fc.constantFrom("__proto__", "constructor", "01", "1e3", "-0", "4294967295", "", "😀", "then"),
  );
  const value = fc.anything({
    key,
    maxDepth: 4,
    withBigInt: true,
    withDate: true,
    withMap: true,
    withSet: true,
    withNullPrototype: true,
    withSparseArray: true,
    withBoxedValues: true,
    values: [fc.string({ unit: "binary" }), fc.double(), fc.constantFrom(-0, -0n, Number.NaN)],
  });

  it("are written as devalue writes them, or left to it", () => {
    fc.assert(
      fc.property(value, (v) => {
        const text = plainText(v);
        if (text !== undefined) expect(text).toBe(devalue.stringify(v));
      }),
      { numRuns: 3000, seed: 12 },
    );
  });
});
