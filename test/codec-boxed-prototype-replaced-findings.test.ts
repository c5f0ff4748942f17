// the codec refused a Map, Set, Date, buffer or view whose prototype was replaced with
// Object.prototype or none (kept-whole.ts hasHiddenSlots): stored as an object of its own
// keys, its contents were lost without a word. A boxed BigInt (`Object(1n)`) or Symbol so
// made was left out: Object.prototype.toString shows their slots through their prototype's
// Symbol.toStringTag alone, so with it gone they looked like plain objects. Such a BigInt was
// stored as `{}` beside plain data, and refused beside a typed array (the encoder's full
// pass asked for it): the same value stored or refused by what stood next to it. Both are
// refused now, on every path. Each test failed before the mend.

import { describe, expect, it } from "vitest";
import { encode } from "../src/codec/codec.js";

const replaced = (boxed: object, proto: object | null) => Object.setPrototypeOf(boxed, proto);

describe("a boxed BigInt or Symbol whose prototype was replaced is refused, not stored as {}", () => {
  for (const proto of [Object.prototype, null]) {
    const which = proto === null ? "null" : "Object.prototype";

    it(`a BigInt given ${which}: alone, in plain data, beside a typed array`, () => {
      const big = () => replaced(Object(1n), proto);
      const refusal = new RegExp(`a BigInt whose prototype was replaced \\(${which}\\)`);
      expect(() => encode(big())).toThrow(refusal);
      expect(() => encode({ v: big() })).toThrow(/ at \.v$/);
      expect(() => encode([1, big()])).toThrow(refusal);
      expect(() => encode({ bytes: new Uint8Array(1), v: big() })).toThrow(refusal);
    });

    it(`a Symbol given ${which}`, () => {
      const sym = () => replaced(Object(Symbol("s")), proto);
      expect(() => encode({ v: sym() })).toThrow(
        /a Symbol whose prototype was replaced .* store a plain copy of its data at \.v$/,
      );
      expect(() => encode([sym()])).toThrow(/at \[0\]$/);
    });
  }

  it("a boxed BigInt, number, string or boolean kept whole is stored as before", () => {
    expect(encode({ n: Object(1n), s: new String("x"), b: new Boolean(true) })).toBe(
      '[{"n":1,"s":3,"b":5},["Object",2],["BigInt","1"],["Object",4],"x",["Object",6],true]',
    );
  });
});
