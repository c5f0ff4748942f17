// the cheap pass looks for an accessor among an array's elements before reading it
// (codec.ts hasIndexGetter), so that a getter it read is not read again by encode's own pass
// when a later part (a typed array) stops it. A long array (over 65,536 elements) was looked
// at by listing its own keys, a string each: a dense array of 3 million numbers beside a
// Date took 48% more CPU to encode than before the look (and ~90 MB more memory). It is
// walked now while it has no hole, and listed from its first hole (its length may be a
// sparse array's billions). These hold the getter read once whichever way it is found.

import { describe, expect, it } from "vitest";
import { decode, encode } from "../src/codec/codec.js";

const LONG = 70_000;

/** `array` with a counting getter at `index`, answering the read's number. */
function withGetter(array: unknown[], index: number): () => number {
  let reads = 0;
  Object.defineProperty(array, index, { enumerable: true, get: () => ++reads });
  return () => reads;
}

/** A value the cheap pass starts on (a Date), then gives up on (a typed array after the
 *  long array). */
const stopped = (list: unknown[]) => ({ at: new Date(0), list, bytes: new Uint8Array([1]) });

describe("a long array's getter, beside a Date and before a typed array, is read once", () => {
  it("a dense array: its last element", () => {
    const list = Array.from({ length: LONG }, (_, i) => i);
    const reads = withGetter(list, LONG - 1);
    const back = decode<{ list: number[] }>(encode(stopped(list), Number.POSITIVE_INFINITY));
    expect([reads(), back.list[LONG - 1], back.list.length]).toEqual([1, 1, LONG]);
  });

  it("an array with a hole before its getter", () => {
    const list = Array.from({ length: LONG }, (_, i) => i);
    delete list[10];
    const reads = withGetter(list, LONG - 1);
    const back = decode<{ list: number[] }>(encode(stopped(list), Number.POSITIVE_INFINITY));
    expect([reads(), back.list[LONG - 1], 10 in back.list]).toEqual([1, 1, false]);
  });

  it("a sparse array of a large length", () => {
    const list: unknown[] = [];
    list[1] = "one";
    list.length = 50_000_000;
    const reads = withGetter(list, 40_000_000);
    const back = decode<{ list: unknown[] }>(encode(stopped(list), Number.POSITIVE_INFINITY));
    expect([reads(), back.list[40_000_000], back.list[1], back.list.length]).toEqual([
      1,
      1,
      "one",
      50_000_000,
    ]);
  });
});
