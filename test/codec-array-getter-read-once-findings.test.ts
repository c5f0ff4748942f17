// Plain data is written without devalue (codec/plain-text.ts); a value it gives up on is
// encoded again by the encoder's own path. An array whose element is an accessor must still
// have the getter run once by one encode (a getter with an effect, a lazy value or a counter,
// did its work twice, and what was stored came from the second read): found again by the
// soak's adversary after the plain path's own mend (codec-plain-text-depth-holes-getters), and
// held; kept as a guard on the behaviour, whichever way the plain path keeps it.

import { describe, expect, it } from "vitest";
import { decode, encode } from "../src/codec/codec.js";

function arrayWithGetter(make: (reads: number) => unknown): {
  array: unknown[];
  reads: () => number;
} {
  const array: unknown[] = ["first", "second"];
  let reads = 0;
  Object.defineProperty(array, 1, {
    enumerable: true,
    get: () => make(++reads),
  });
  return { array, reads: () => reads };
}

describe("plain text: an array element that is a getter", () => {
  it("is read once by one encode, whatever it answers", () => {
    const plain = arrayWithGetter((n) => `read ${n}`);
    expect(decode(encode(plain.array, Number.POSITIVE_INFINITY))).toEqual(["first", "read 1"]);
    expect(plain.reads()).toBe(1);
    const date = arrayWithGetter((n) => new Date(n));
    expect(decode(encode(date.array, Number.POSITIVE_INFINITY))).toEqual(["first", new Date(1)]);
    expect(date.reads()).toBe(1);
  });

  it("nested in plain data, is read once by one encode", () => {
    const { array, reads } = arrayWithGetter((n) => new Date(n));
    expect(decode(encode({ list: array }, Number.POSITIVE_INFINITY))).toEqual({
      list: ["first", new Date(1)],
    });
    expect(reads()).toBe(1);
  });
});
