// The codec keeps what agents return (dates, maps, sets, bigints, bytes, errors, undefined,
// shared and circular references) and refuses what cannot be stored, naming where it is.

import { describe, expect, it } from "vitest";
import { isWellFormed } from "../lib/text.js";
import { decode, EncodeError, encode } from "./codec.js";

describe("codec", () => {
  it("round-trips Date, Map, Set, BigInt, undefined, Uint8Array, Error and cycles", () => {
    const err = new TypeError("bad thing");
    (err as { code?: string }).code = "E_BAD";
    const shared = { n: 1 };
    const value: Record<string, unknown> = {
      when: new Date(1_700_000_000_123),
      map: new Map<string, unknown>([
        ["a", 1],
        ["b", new Set([1, 2])],
      ]),
      big: 12345678901234567890n,
      missing: undefined,
      bytes: new Uint8Array([0, 1, 254, 255]),
      err,
      nested: [shared, shared],
      nan: Number.NaN,
      negZero: -0,
    };
    value.self = value;
    const back = decode<Record<string, unknown>>(encode(value));
    expect(back.when).toEqual(value.when);
    expect(back.map).toEqual(value.map);
    expect(back.big).toBe(value.big);
    expect("missing" in back && back.missing === undefined).toBe(true);
    expect(back.bytes).toBeInstanceOf(Uint8Array);
    expect([...(back.bytes as Uint8Array)]).toEqual([0, 1, 254, 255]);
    expect(back.err).toBeInstanceOf(Error);
    expect((back.err as Error).name).toBe("TypeError");
    expect((back.err as Error).message).toBe("bad thing");
    expect((back.err as { code?: string }).code).toBe("E_BAD");
    const nested = back.nested as unknown[];
    expect(nested[0]).toBe(nested[1]);
    expect(back.self).toBe(back);
    expect(Number.isNaN(back.nan)).toBe(true);
    expect(Object.is(back.negZero, -0)).toBe(true);
  });

  it("refuses functions, symbols and class instances, naming the path", () => {
    const cases: Array<[unknown, RegExp]> = [
      [{ plan: { run: () => 1 } }, /plan.*run|function/i],
      [{ tag: Symbol("x") }, /symbol|tag/i],
      [{ client: new (class Client {})() }, /client|non-POJO|POJO/i],
    ];
    for (const [v, re] of cases) {
      let thrown: unknown;
      try {
        encode(v);
      } catch (e) {
        thrown = e;
      }
      expect(thrown).toBeInstanceOf(EncodeError);
      expect(`${(thrown as EncodeError).message} ${(thrown as EncodeError).path}`).toMatch(re);
    }
  });

  it("refuses a value over the limit with its size", () => {
    let thrown: unknown;
    try {
      encode("x".repeat(2000), 1000);
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toBeInstanceOf(EncodeError);
    expect((thrown as EncodeError).bytes).toBeGreaterThan(1000);
    expect((thrown as Error).message).toMatch(
      /\d+ bytes encoded, over the payload limit of 1000 bytes/,
    );
  });

  it("encodes lone surrogates and NUL as well-formed, NUL-free text that decodes exactly", () => {
    const cut = "👍 great".slice(1); // a reply cut mid-emoji: a lone low surrogate
    const values = [
      cut,
      "👍".slice(0, 1), // a lone high surrogate
      "\udc00\ud800 reversed pair, \\\ud83d after a backslash",
      "nul \u0000 inside",
      { [cut]: [cut, new Map([[cut, new Set([cut])]])] },
    ];
    for (const value of values) {
      const text = encode(value);
      expect(isWellFormed(text)).toBe(true);
      expect(text.includes("\u0000")).toBe(false);
      expect(decode(text)).toEqual(value);
    }
    const err = decode<{ err: Error }>(encode({ err: new Error(`bad \u0000 ${cut}`) })).err;
    expect(err.message).toBe(`bad \u0000 ${cut}`);
  });
});
