// The codec's leftovers: a regex match array kept with its own properties
// (ArrayWithProps), an Error whose parts lead back to it stored and read back as one object
// (ErrorWithCycles), and refusals inside a Map's entry named by the property. Each test
// failed before its mend.

import { execFileSync } from "node:child_process";
import * as devalue from "devalue";
import { describe, expect, it } from "vitest";
import { decode, encode, encodeIdentity } from "../src/codec/codec.js";
import { errorRevivers } from "../src/codec/error-parts.js";
import { sameStoredValue } from "../src/codec/same-stored-value.js";
import { workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { faithfulCopy, sameValue } from "./helpers/value-equality.js";

const roundTrip = <T>(v: T): T => decode<T>(encode(v));

/** What a cairn before these tags decodes with (codec.ts's revivers then). */
const olderRevivers = errorRevivers;

describe("a regex match array is stored with its index, input and groups", () => {
  it("exec with named groups and indices, match, matchAll, an unmatched group's hole", () => {
    const m = /a(?<g>b)(x)?/d.exec("zab") as RegExpExecArray;
    const back = roundTrip({ m }).m;
    expect(faithfulCopy(m, back)).toBeUndefined();
    expect([back.index, back.input, back.groups?.g]).toEqual([1, "zab", "b"]);
    expect(Object.getPrototypeOf(back.groups)).toBe(null);
    expect(back.indices?.groups?.g).toEqual([2, 3]);
    expect(Object.keys(back)).toEqual(Object.keys(m));
    expect(back).toHaveLength(3);
    const all = [..."k=v;k2=v2".matchAll(/(\w+)=(\w+)/g)];
    expect(faithfulCopy(all, roundTrip(all))).toBeUndefined();
    const matched = "a=b".match(/=/);
    expect(faithfulCopy(matched, roundTrip(matched))).toBeUndefined();
  });

  it("holes, a tagged result list, and an array that holds itself", () => {
    const holey: unknown[] = [1];
    holey[2] = 3;
    const list = Object.assign(holey, { total: 3, next: null }) as unknown[] & { self?: unknown };
    list.self = list;
    list.push(list);
    const back = roundTrip({ list, again: list });
    expect(back.again).toBe(back.list);
    expect(back.list.self).toBe(back.list);
    expect(back.list[3]).toBe(back.list);
    expect(1 in back.list).toBe(false);
    expect(sameValue(roundTrip({ list, again: list }), back)).toBeUndefined();
    expect(faithfulCopy({ list, again: list }, back)).toBeUndefined();
  });

  it("its text decodes as written (the stored form of ArrayWithProps, fixed)", () => {
    // encode(/b/.exec("ab")) as this commit writes it.
    const text = '[["ArrayWithProps",1],[2,4],[3],"b",{"index":5,"input":6,"groups":-1},1,"ab"]';
    expect(encode(/b/.exec("ab"))).toBe(text);
    const back = decode<RegExpExecArray>(text);
    expect([...back, back.index, back.input, back.groups]).toEqual(["b", 1, "ab", undefined]);
  });

  it("a cairn that does not know the tag cannot decode it (it pauses the run as undecodable)", () => {
    const text = encode({ m: "a=b".match(/=/) });
    expect(() => devalue.parse(text, olderRevivers)).toThrow(/Unknown type ArrayWithProps/);
  });

  it("two texts of one match with Errors of other stacks are the same stored value", () => {
    const m = /=/.exec("a=b");
    const a = encode({ m, e: new Error("x") });
    const b = encode({ m, e: new Error("x") });
    expect(a).not.toBe(b);
    expect(sameStoredValue(a, b)).toBe(true);
    expect(sameStoredValue(a, encode({ m: /=/.exec("c=d"), e: new Error("x") }))).toBe(false);
  });

  it("a child's input digest reads it as before (the array's elements)", () => {
    const m = /=/.exec("a=b") as RegExpExecArray;
    expect(encodeIdentity({ m })).toBe(encodeIdentity({ m: [...m] }));
  });
});

describe("an Error whose parts lead back to it is stored as one object", () => {
  it("execFileSync's error for a missing binary (err.error === err)", () => {
    let thrown: unknown;
    try {
      execFileSync("/nonexistent/cairn-missing-binary");
    } catch (err) {
      thrown = err;
    }
    const err = thrown as Error & { error?: unknown; code?: unknown };
    expect(err.error).toBe(err);
    const back = roundTrip({ err }).err as typeof err;
    expect(back.error).toBe(back);
    expect(back.code).toBe("ENOENT");
    expect(faithfulCopy(err, back)).toBeUndefined();
  });

  it("a cause that holds it, a cause that is it, two Errors that hold each other", () => {
    const e = new Error("loop");
    e.cause = { inner: e };
    const back = roundTrip(e);
    expect((back.cause as { inner: unknown }).inner).toBe(back);
    const f = new Error("self", { cause: undefined });
    Object.defineProperty(f, "cause", { value: f });
    const g = roundTrip(f);
    expect(g.cause).toBe(g);
    expect(Object.getOwnPropertyDescriptor(g, "cause")?.enumerable).toBe(false);
    const a = Object.assign(new Error("a"), { other: undefined as unknown });
    const b = Object.assign(new Error("b"), { other: a });
    a.other = b;
    const [x, y] = roundTrip([a, b]);
    expect([x?.other, y?.other]).toEqual([y, x]);
    expect(x?.other).toBe(y);
    expect(faithfulCopy([a, b], [x, y])).toBeUndefined();
  });

  it("an Error whose code holds it comes back as one Error (a second one without its code was handed over)", () => {
    const e = new Error("coded") as Error & { code?: unknown };
    e.code = { self: e };
    const back = roundTrip(e) as typeof e;
    expect((back.code as { self: unknown }).self).toBe(back);
    expect([back.message, back.stack, Object.keys(back.code as object)]).toEqual([
      "coded",
      e.stack,
      ["self"],
    ]);
  });

  it("an Error without such a loop is stored under its older tag, as before", () => {
    const e = Object.assign(new Error("m", { cause: new Error("c") }), { status: 502 });
    expect(JSON.parse(encode(e))[0]).toEqual(["ErrorWithProps", 1]);
    const coded = Object.assign(new Error("m"), { code: { kind: "x" } });
    expect(JSON.parse(encode(coded))[0]).toEqual(["Error", 1]);
  });

  it("its text decodes as written (the stored form of ErrorWithCycles, fixed), and an older cairn cannot decode it", () => {
    const text =
      '[["ErrorWithCycles",1],[2,3,4,-1,5,7,8],"Error","self","Error: self\\n    at here",{"error":0},{},{},{}]';
    const back = decode<Error & { error?: unknown }>(text);
    expect(back.error).toBe(back);
    expect([back.name, back.message, back.stack]).toEqual([
      "Error",
      "self",
      "Error: self\n    at here",
    ]);
    expect(Object.keys(back)).toEqual(["name", "error"]);
    expect(() => devalue.parse(text, olderRevivers)).toThrow(/Unknown type ErrorWithCycles/);
  });
});

describe("a refusal inside a Map's entry names the Error's property", () => {
  const bad = () => Object.assign(new Error("y"), { fn: () => 1 });

  it("by a primitive key, an object key, and inside a key", () => {
    expect(() => encode({ byKey: new Map([["k", bad()]]) })).toThrow(
      'cannot store a function at .byKey.get("k").fn (a property of the Error at .byKey.get("k"):',
    );
    expect(() => encode(new Map([["a)b", { e: bad() }]]))).toThrow(
      'at .get("a)b").e.fn (a property of the Error at .get("a)b").e:',
    );
    expect(() => encode(new Map([[{ id: 1 }, { e: bad() }]]))).toThrow(
      "at .get(...).e.fn (a property of the Error at .get(...).e:",
    );
    expect(() => encode(new Map([[{ e: bad() }, 1]]))).toThrow("at .get(...).e.fn (");
    expect(() => encode(new Map([[7n, bad()]]))).toThrow('at .get(["BigInt","7"]).fn (');
  });

  it("inside an array with properties, by its element or its property", () => {
    expect(() => encode({ m: Object.assign([() => 1], { note: 1 }) })).toThrow(
      "cannot store a function at .m[0]",
    );
    expect(() => encode({ m: Object.assign([1], { e: bad() }) })).toThrow(
      "cannot store a function at .m.e.fn (a property of the Error at .m.e:",
    );
  });
});

describe.each(BACKENDS)(
  "a step's regex match and looped Error, first run and replay (%s)",
  (backend) => {
    const harness = useHarness(backend);

    it("are handed over whole, the same both times", async () => {
      const h = harness();
      const seen: unknown[] = [];
      const wf = workflow({ name: "codec-match", version: "1" }, async (ctx) => {
        const found = await ctx.step("find", () => {
          const err = new Error("spawn failed") as Error & { error?: unknown };
          err.error = err;
          return { m: "key=value".match(/=(?<v>.*)/), err };
        });
        seen.push(found);
        await ctx.sleep("nap", 1000);
        return found.m?.groups?.v;
      });
      const e = h.engine([wf]);
      const run = await e.start(wf, undefined, { id: "m" });
      await until(async () => (await e.getRun("m"))?.status === "waiting", "the run waits");
      expect(await advanceUntil(h.clock, run.result(), 1000, 100)).toBe("value");
      expect(seen).toHaveLength(2);
      const [first] = seen as Array<{ m: RegExpMatchArray; err: Error & { error?: unknown } }>;
      expect(first?.m.index).toBe(3);
      expect(first?.err.error).toBe(first?.err);
      expect(sameValue(seen[0], seen[1])).toBeUndefined();
    });
  },
);
