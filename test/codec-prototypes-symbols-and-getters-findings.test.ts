// Codec leftovers carried from earlier reviews: each value either round-trips exactly or
// is refused naming where it is, never stored as something else.
// 1. an array's getter read by the cheap pass was read again by encode's own pass when a
//    typed array after it stopped the cheap one: the getter ran twice, its second answer stored;
// 2. an array's (a Map's, a Date's) enumerable symbol keys were dropped without a word, where
//    a plain object's are refused;
// 3. a Map, Set, buffer or view given Object.prototype (or none) was stored as `{}`, its
//    contents lost; a Date so made was refused as "reading it threw ... (a getter or a proxy)";
// 4. an array with an own "__proto__" key was refused "at [1]", a place it does not have;
// 5. ctx.uuid's "give each call its own name" advice offered a label cairn refuses.

import { describe, expect, it } from "vitest";
import { decode, EncodeError, encode, encodeIdentities } from "../src/codec/codec.js";
import { NonDeterminismError, workflow } from "../src/index.js";
import { useHarness } from "./helpers/engines.js";

function refusal(value: unknown): EncodeError {
  try {
    encode(value);
  } catch (err) {
    if (err instanceof EncodeError) return err;
    throw err;
  }
  throw new Error("stored, not refused");
}

/** An array whose element 0 is a getter counting its reads, then a typed array. */
function countingList(): { list: unknown[]; reads: () => number } {
  let reads = 0;
  const list: unknown[] = [0, new Uint8Array([7, 8])];
  Object.defineProperty(list, 0, { enumerable: true, get: () => ++reads });
  return { list, reads: () => reads };
}

describe("an array's getter before a typed array, in a value plainText gives up on", () => {
  it("is read once, and its first answer is stored", () => {
    const { list, reads } = countingList();
    const back = decode<{ list: unknown[] }>(encode({ at: new Date(0), list }));
    expect(reads()).toBe(1);
    expect(back.list[0]).toBe(1);
    expect(back.list[1]).toEqual(new Uint8Array([7, 8]));
  });

  it("in a Map's value, is read once", () => {
    const { list, reads } = countingList();
    const back = decode<Map<string, unknown[]>>(encode(new Map([["k", list]])));
    expect(reads()).toBe(1);
    expect(back.get("k")?.[0]).toBe(1);
  });

  it("a long array's elements are looked at by their keys, a sparse one's length never walked", () => {
    const { list, reads } = countingList();
    const sparse: unknown[] = [];
    sparse[4_000_000_000] = list;
    const back = decode<{ s: unknown[] }>(encode({ at: new Date(0), s: sparse }));
    expect(reads()).toBe(1);
    expect((back.s[4_000_000_000] as unknown[])[0]).toBe(1);
  });
});

describe("a child's input digest (encodeIdentities)", () => {
  // An input holding an Error was read twice, once for each digest (by parts, by name),
  // each pass running every getter again: a getter with an effect ran twice, and the two
  // digests could count two different answers. The second pass is now handed the first's
  // reads (codec.ts encodeIdentities); test/child-input-digest-reads-findings.test.ts has more.
  it("reads a getter once", () => {
    let reads = 0;
    encodeIdentities({
      err: new Error("x"),
      get n() {
        return ++reads;
      },
    });
    expect(reads).toBe(1);
  });
});

describe("symbol keys", () => {
  const sym = Symbol("meta");
  const withSymbol = <T extends object>(value: T): T =>
    Object.assign(value, { [sym]: "lost" }) as T;

  it("on an array, are refused as on a plain object, naming the path", () => {
    const err = refusal({ rows: withSymbol([1, 2]) });
    expect(err.path).toBe(".rows");
    expect(err.message).toMatch(/an Array with symbol keys/);
    expect(refusal(withSymbol({ a: 1 })).message).toMatch(/symbol keys/);
  });

  it("on an array with properties beside its elements, are refused too", () => {
    const match = withSymbol(/b/.exec("abc") as RegExpExecArray);
    expect(refusal([match]).path).toBe("[0]");
  });

  it("on a Map, a Set, a Date or a Uint8Array, are refused", () => {
    for (const value of [new Map([[1, 2]]), new Set([1]), new Date(0), new Uint8Array([1])]) {
      const err = refusal({ v: withSymbol(value) });
      expect(err.path).toBe(".v");
      expect(err.message).toMatch(/with symbol keys/);
    }
  });

  it("non-enumerable ones are not stored, on an array as on an object", () => {
    const hide = <T extends object>(v: T): T =>
      Object.defineProperty(v, sym, { value: 1, enumerable: false });
    expect(decode(encode({ list: hide([1, 2]), o: hide({ a: 1 }) }))).toEqual({
      list: [1, 2],
      o: { a: 1 },
    });
  });
});

describe("a built-in whose prototype was replaced", () => {
  const replaced = <T extends object>(value: T, proto: object | null = Object.prototype): T =>
    Object.setPrototypeOf(value, proto) as T;

  it("is refused naming its kind and path, never stored as an object of its keys", () => {
    const cases: [string, object][] = [
      ["Map", replaced(new Map([["a", 1]]))],
      ["Set", replaced(new Set([1]))],
      ["Uint8Array", replaced(new Uint8Array([1, 2]))],
      ["ArrayBuffer", replaced(new ArrayBuffer(2))],
      ["DataView", replaced(new DataView(new ArrayBuffer(2)))],
      ["Map", replaced(new Map([["a", 1]]), null)],
      ["Set", replaced(new Set([1]), null)],
    ];
    for (const [kind, value] of cases) {
      // Alone (plainText's path), and beside a Date (the devalue passes').
      for (const holder of [{ v: value }, { at: new Date(0), v: value }]) {
        const err = refusal(holder);
        expect(err.path).toBe(".v");
        expect(err.message).toContain(`${kind} whose prototype was replaced`);
      }
    }
  });

  it("a Date or a RegExp so made is refused as what it is, not as a throwing getter", () => {
    for (const [kind, value] of [
      ["Date", replaced(new Date(0))],
      ["RegExp", replaced(/a/)],
    ] as const) {
      const err = refusal({ list: [value] });
      expect(err.path).toBe(".list[0]");
      expect(err.message).toContain(`${kind} whose prototype was replaced`);
    }
  });

  it("plain objects of Object.prototype or none are stored as before", () => {
    const bare = Object.assign(Object.create(null), { a: 1 });
    expect(encode({ bare, o: { b: 2 } })).toBe('[{"bare":1,"o":3},["null","a",2],1,{"b":4},2]');
  });
});

describe('an own "__proto__" key', () => {
  const arrayWithProto = () =>
    Object.defineProperty([1, 2], "__proto__", {
      value: 5,
      enumerable: true,
      writable: true,
      configurable: true,
    });

  it("on an array, is refused at the array's path (it was [1], the array's second element)", () => {
    expect(refusal(arrayWithProto()).path).toBe("(root)");
    const err = refusal({ list: [0, arrayWithProto()] });
    expect(err.path).toBe(".list[1]");
    expect(err.message).toContain('"__proto__" key');
  });

  it("on an Error, is refused at the Error's path (it was .e[4], a part index it does not have)", () => {
    const e = Object.defineProperty(new Error("x"), "__proto__", { value: 1, enumerable: true });
    expect(refusal({ e }).path).toBe(".e");
    expect(refusal(e).path).toBe("(root)");
  });

  it("on an object JSON.parse made, is refused at the object's path, saying what to do", () => {
    const err = refusal({ a: [JSON.parse('{"__proto__": 1}')] });
    expect(err.path).toBe(".a[0]");
    expect(err.message).toMatch(/"__proto__" key \(JSON\.parse/);
  });
});

describe("ctx.uuid's advice to give each call its own name", () => {
  const harness = useHarness("sqlite");
  const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

  /** The label the refusal's advice offers, with `${item.id}` filled in. */
  function advisedLabel(message: string, id: string): string {
    const code = /e\.g\. (.*?), or make/.exec(message)?.[1] ?? "";
    const inCall = /^ctx\.uuid\(`(.*)`\)$/.exec(code)?.[1];
    const label = inCall ?? /^`(.*)`$/.exec(code)?.[1] ?? code;
    return label.replace(/\$\{item\.id\}/, id);
  }

  for (const label of ["x", undefined]) {
    it(`offers a label ctx.uuid takes (label ${label})`, async () => {
      const h = harness();
      // Two branches draw after a timer each: which draws first only timing decides.
      const twice = workflow({ name: "uuid-twice", version: "1" }, async (ctx) =>
        Promise.all(
          ["1", "2"].map(async () => {
            await delay(1);
            return ctx.uuid(label);
          }),
        ),
      );
      const e = h.engine([twice]);
      const err = await (await e.start(twice, undefined)).result().catch((x: unknown) => x);
      expect(err).toBeInstanceOf(NonDeterminismError);
      const advised = advisedLabel((err as Error).message, "1");
      expect(advised).not.toBe("");

      // The advice followed: each branch draws under its own label.
      const followed = workflow({ name: "uuid-own-labels", version: "1" }, async (ctx) =>
        Promise.all(
          ["1", "2"].map(async (id) => {
            await delay(1);
            return ctx.uuid(advisedLabel((err as Error).message, id));
          }),
        ),
      );
      const e2 = h.engine([followed]);
      const ids = (await (await e2.start(followed, undefined)).result()) as string[];
      expect(ids).toHaveLength(2);
      expect(ids[0]).not.toBe(ids[1]);
    });
  }
});
