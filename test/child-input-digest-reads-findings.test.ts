// A child's input digest is taken in two passes when the input holds an Error (by its
// parts, and by name, message and code as older records counted it). The second pass read
// the input again: a getter ran twice, and its second answer went into the second digest.
// It is now handed what the first pass read (codec.ts encodeIdentities).

import { describe, expect, it } from "vitest";
import { encodeIdentities, encodeIdentity } from "../src/codec/codec.js";
import { childInputDigests } from "../src/workflow/child-identity.js";

/** An object whose `n` counts its reads. */
function counting(): { value: { n: number }; reads: () => number } {
  let reads = 0;
  const value = {} as { n: number };
  Object.defineProperty(value, "n", { enumerable: true, get: () => ++reads });
  return { value, reads: () => reads };
}

describe("a child's input digest of an input holding an Error", () => {
  it("reads a getter beside the Error once, and both digests count its one answer", () => {
    const { value, reads } = counting();
    const texts = encodeIdentities({ err: new Error("x"), o: value });
    expect(reads()).toBe(1);
    // The answer both passes counted is the first (1), as a plain input's would be.
    expect(texts.text).toBe(encodeIdentity({ err: new Error("x"), o: { n: 1 } }));
    expect(texts.byName).toBe(encodeIdentity({ err: new Error("x"), o: { n: 1 } }, "byName"));
  });

  it("reads an Error's own getters once (its code, and a property of its own)", () => {
    let codeReads = 0;
    let statusReads = 0;
    const err = new Error("boom");
    Object.defineProperty(err, "code", { get: () => `E${++codeReads}` });
    Object.defineProperty(err, "status", { enumerable: true, get: () => 500 + ++statusReads });
    const texts = encodeIdentities({ err });
    expect(codeReads).toBe(1);
    expect(statusReads).toBe(1);
    const plain = Object.assign(new Error("boom"), { status: 501 });
    Object.defineProperty(plain, "code", { value: "E1" });
    expect(texts.byName).toBe(encodeIdentity({ err: plain }, "byName"));
    expect(texts.text).toBe(encodeIdentity({ err: plain }));
  });

  it("a getter that answers a new object each read is counted as its first answer", () => {
    let reads = 0;
    const input = {
      err: new Error("x"),
      get rows() {
        reads++;
        return [reads];
      },
    };
    const d = childInputDigests(input);
    expect(reads).toBe(1);
    expect(d).toEqual(childInputDigests({ err: new Error("x"), rows: [1] }));
  });

  it("an input without an Error is read once, as before", () => {
    const { value, reads } = counting();
    expect(encodeIdentities({ o: value }).byName).toBeUndefined();
    expect(reads()).toBe(1);
  });
});
