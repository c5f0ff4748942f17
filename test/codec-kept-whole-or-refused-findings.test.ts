// Found by the generated fidelity test (replay-value-fidelity.test.ts): values a step returned
// whose copy, handed to the workflow on the first run and on every replay, silently lacked
// part of them. Each test failed before its mend.

import { describe, expect, it } from "vitest";
import { decode, encode, encodeIdentity } from "../src/codec/codec.js";
import { workflow } from "../src/index.js";
import { advanceUntil, BACKENDS, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";
import { sameValue } from "./helpers/value-equality.js";

const roundTrip = <T>(v: T): T => decode<T>(encode(v));

describe("codec: an Error keeps its cause and its other own properties", () => {
  it("a cause given as an option, a status assigned, an AggregateError's errors", () => {
    const cause = new Error("socket hang up");
    const e = Object.assign(new Error("fetch failed", { cause }), { status: 503 });
    const back = roundTrip(e) as Error & { status?: number };
    expect(back.cause).toBeInstanceOf(Error);
    expect((back.cause as Error).message).toBe("socket hang up");
    expect(back.status).toBe(503);
    // As the option made it: own, not enumerable; what was assigned stays enumerable.
    expect(Object.getOwnPropertyDescriptor(back, "cause")?.enumerable).toBe(false);
    expect(Object.keys(back)).toEqual(["name", "status"]);
    const agg = roundTrip(new AggregateError([new Error("a"), 1], "both failed")) as AggregateError;
    expect(agg.errors).toHaveLength(2);
    expect(Object.keys(agg)).toEqual(["name"]);
  });

  it("an Error with an enumerable symbol key is refused as any object with one is, naming the path", () => {
    const e = Object.assign(new Error("tagged"), { [Symbol("trace")]: 1 });
    expect(() => encode({ e })).toThrow(
      "cannot store an Error with symbol keys (symbols cannot be stored: use string keys) at .e",
    );
  });

  it("a cause that is undefined is still a cause", () => {
    const back = roundTrip(new Error("m", { cause: undefined }));
    expect(Object.hasOwn(back, "cause")).toBe(true);
  });

  it("an Error with nothing more is stored as before (text written so decodes as it did)", () => {
    const e = new Error("plain");
    const flat = JSON.parse(encode(e)) as unknown[];
    expect(flat.slice(0, 4)).toEqual([["Error", 1], [2, 3, 4, -1], "Error", "plain"]);
    expect(flat).toHaveLength(5);
  });

  it("an Error whose cause leads back to itself is stored, never recorded undecodable (h6: it was refused)", () => {
    const e = new Error("loop");
    e.cause = { inner: e };
    const back = roundTrip(e);
    expect((back.cause as { inner: unknown }).inner).toBe(back);
    const f = new Error("self", { cause: undefined });
    Object.defineProperty(f, "cause", { value: f });
    const g = roundTrip(f);
    expect(g.cause).toBe(g);
  });
});

describe("codec: a value a copy would lose part of is refused, naming the path", () => {
  it("an array with properties beside its elements (a regex match) is kept with them (h6: it was refused)", () => {
    const match = "a-b".match(/-/);
    expect(roundTrip({ m: match }).m?.index).toBe(1);
    const tagged = Object.assign([1, 2], { total: 2 });
    expect(roundTrip([tagged])[0]?.total).toBe(2);
    // Holes and plain arrays are kept as they were.
    const holey = roundTrip(Object.assign([], { length: 3, 0: 1, 2: 3 }));
    expect([holey.length, 1 in holey, holey[2]]).toEqual([3, false, 3]);
  });

  it("a Date, Map, Set, RegExp or boxed primitive with properties of its own; a RegExp's lastIndex", () => {
    expect(() => encode({ d: Object.assign(new Date(0), { tz: "UTC" }) })).toThrow(
      /a Date with properties of its own .* at \.d/,
    );
    expect(() => encode(Object.assign(new Map(), { note: 1 }))).toThrow(/a Map with properties/);
    expect(() => encode(Object.assign(new Set(), { note: 1 }))).toThrow(/a Set with properties/);
    expect(() => encode(Object.assign(Object("s"), { note: 1 }))).toThrow(
      /a String with properties/,
    );
    const re = /x/g;
    re.exec("xx");
    expect(() => encode(re)).toThrow(/a RegExp whose lastIndex is not 0/);
    expect(roundTrip(/x/g).lastIndex).toBe(0);
  });

  it("a subclass of a built-in, or a built-in given another prototype", () => {
    class Tags extends Map<string, number> {}
    class Stamp extends Date {}
    class List extends Array<number> {}
    expect(() => encode({ t: new Tags() })).toThrow(
      "cannot store a Map of another class or prototype (it would come back as a plain Map: store its data as a plain Map or object) at .t",
    );
    expect(() => encode(new Stamp(0))).toThrow(/a Date of another class/);
    expect(() => encode(List.from([1]))).toThrow(/an Array of another class/);
    expect(() => encode(Object.setPrototypeOf([1], null))).toThrow(/an Array of another class/);
    // A Buffer is a Uint8Array subclass, documented to come back as a Uint8Array.
    expect(roundTrip(Buffer.from("hi"))).toEqual(new Uint8Array([104, 105]));
  });

  it("an object whose prototype is an object without a prototype", () => {
    const proto = Object.assign(Object.create(null), { kind: "inherited" });
    expect(() => encode({ o: Object.assign(Object.create(proto), { own: 1 }) })).toThrow(
      "cannot store an object that inherits from another object (what it inherits would be lost: store a plain copy) at .o",
    );
    // One inheriting from a plain object was refused too, as "an instance of class Object".
    expect(() => encode(Object.create({ a: 1 }))).toThrow(
      /an object that inherits from another object/,
    );
    // Objects without a prototype, and plain objects, are kept as they were.
    const bare = roundTrip(Object.assign(Object.create(null), { a: 1 }));
    expect(Object.getPrototypeOf(bare)).toBe(null);
  });
});

describe("a child's input digest, for a value now refused", () => {
  // A run recorded before such values were refused holds a child call whose input digest
  // was taken of the value as stored then; its replay must match it, not fail the run with
  // a NonDeterminismError saying the code hands another input.
  it("is the digest taken before (the value as it was stored then)", () => {
    expect(encodeIdentity({ m: Object.assign([1, 2], { x: 1 }) })).toBe(
      encodeIdentity({ m: [1, 2] }),
    );
    class Tags extends Map<string, number> {}
    expect(encodeIdentity(new Tags([["a", 1]]))).toBe(encodeIdentity(new Map([["a", 1]])));
  });
});

describe("codec: a getter is read once", () => {
  it("a getter before a part the cheap pass hands over runs once, and its one answer is stored", () => {
    let reads = 0;
    const value = {
      get next() {
        reads++;
        return reads;
      },
      // A typed array: the cheap pass stops here, and the encoder reads the value again.
      bytes: new Uint8Array([1]),
    };
    expect(roundTrip(value).next).toBe(1);
    expect(reads).toBe(1);
  });
});

describe.each(BACKENDS)("a step's value, first run and replay (%s)", (backend) => {
  const harness = useHarness(backend);

  it("an Error with a cause and a status is handed over whole, the same both times", async () => {
    const h = harness();
    const seen: unknown[] = [];
    const wf = workflow({ name: "err-props", version: "1" }, async (ctx) => {
      const e = await ctx.step("call", () =>
        Object.assign(new Error("upstream failed", { cause: new Error("ECONNRESET") }), {
          status: 502,
        }),
      );
      seen.push(e);
      await ctx.sleep("nap", 1000);
      return (e as Error & { status: number }).status;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: "r" });
    await until(async () => (await e.getRun("r"))?.status === "waiting", "the run waits");
    expect(await advanceUntil(h.clock, run.result(), 1000, 100)).toBe(502);
    expect(seen).toHaveLength(2);
    expect(((seen[0] as Error).cause as Error).message).toBe("ECONNRESET");
    expect(sameValue(seen[0], seen[1])).toBeUndefined();
  });

  it("a regex match is handed over whole, the same both times (h6: it was refused)", async () => {
    const h = harness();
    const seen: unknown[] = [];
    const wf = workflow({ name: "match", version: "1" }, async (ctx) => {
      const { found } = await ctx.step("find", () => ({ found: "key=value".match(/=(.*)/) }));
      seen.push(found);
      await ctx.sleep("nap", 1000);
      return found?.index;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: "m" });
    await until(async () => (await e.getRun("m"))?.status === "waiting", "the run waits");
    expect(await advanceUntil(h.clock, run.result(), 1000, 100)).toBe(3);
    expect(sameValue(seen[0], seen[1])).toBeUndefined();
  });
});
