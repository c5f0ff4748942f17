// Found by an adversarial review of how stored values are encoded and compared (encode's
// fast and full paths, sameStoredValue, the child input digest, child adoption after a
// crash), against the text the code before df89ca8 stored: each test is a bug it found, and
// failed before its mend.

import { describe, expect, it } from "vitest";
import { encode, encodeIdentity } from "../src/codec/codec.js";
import { sameStoredValue } from "../src/codec/same-stored-value.js";

describe("encode: a Buffer is stored as the code before today stored it", () => {
  // Text the code at df89ca8 stored for these values (devalue's own reads copy a Buffer's
  // bytes into a buffer of their own, whatever buffer it views).
  it("two Buffers over one whole buffer, and a Buffer beside the ArrayBuffer it views, are stored as before", () => {
    const b = Buffer.alloc(4, 1);
    expect(encode({ a: b, b: b.subarray() })).toBe(
      '[{"a":1,"b":3},["Uint8Array",2],["ArrayBuffer","AQEBAQ=="],["Uint8Array",4],["ArrayBuffer","AQEBAQ=="]]',
    );
    const ab = new Uint8Array([1, 2, 3]).buffer;
    const old =
      '[{"raw":1,"buf":2},["ArrayBuffer","AQID"],["Uint8Array",3],["ArrayBuffer","AQID"]]';
    expect(encode({ raw: ab, buf: Buffer.from(ab) })).toBe(old);
    // Recorded so by the old code: the same input started again is the same value, and a
    // child handed it has the digest its intent recorded.
    expect(sameStoredValue(old, encode({ raw: ab, buf: Buffer.from(ab) }))).toBe(true);
    expect(encodeIdentity({ raw: ab, buf: Buffer.from(ab) })).toBe(old);
  });

  it("a Buffer over a SharedArrayBuffer is stored as its bytes (it was refused)", () => {
    const shared = Buffer.from(new SharedArrayBuffer(4));
    shared[0] = 7;
    expect(encode(shared)).toBe('[["Uint8Array",1],["ArrayBuffer","BwAAAA=="]]');
    expect(encode({ part: Buffer.from(new SharedArrayBuffer(8), 2, 3) })).toBe(
      '[{"part":1},["Uint8Array",2],["ArrayBuffer","AAAA"]]',
    );
  });
});

describe("encode: the cheap pass and encoderReads read a value's tag alike", () => {
  it("a class instance whose Symbol.toStringTag getter answers Array on a later read is refused, not stored as an array", () => {
    let reads = 0;
    class Rec {
      length = 1;
      0 = "x";
      get [Symbol.toStringTag]() {
        reads += 1;
        return reads < 3 ? "Rec" : "Array";
      }
    }
    // encoderReads read the tag once ("Rec": a class instance, refused); the cheap pass
    // read it twice to choose its path, and devalue a third time, storing ["x"].
    expect(() => encode({ rec: new Rec() })).toThrow(/instance of class Rec/);
  });

  it("a plain object whose Symbol.toStringTag getter answers Array on its second read is stored as encoderReads read it", () => {
    let reads = 0;
    const value = {};
    Object.defineProperty(value, Symbol.toStringTag, {
      get: () => (++reads === 1 ? undefined : "Array"),
    });
    Object.assign(value, { length: 1, 0: "x" });
    // One read, as encoderReads make it: an object with keys length and 0.
    expect(encode({ value })).toBe('[{"value":1},{"0":2,"length":3},"x",1]');
  });
});
