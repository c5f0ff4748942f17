// Findings of a review of the codec's mends (stored values, part views, tags, realms): what
// encode writes, how stored values are compared (start, sendEvent, checkReplay), and the
// cost of encode on the step path.

import * as devalue from "devalue";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { encode } from "../src/codec/codec.js";
import { encoderReads } from "../src/codec/encoder-reads.js";
import { escapeLoneSurrogatesInJson } from "../src/lib/text.js";

/** encode's reducer, as the codec before the mends and now has it. */
const errorReducer = {
  Error: (v: unknown) =>
    v instanceof Error && [v.name, v.message, v.stack ?? "", (v as { code?: unknown }).code],
};

/** A text, or the words of a refusal: encoders agree when both are equal. */
function outcome(f: () => string): string {
  try {
    return f();
  } catch (err) {
    return `refused: ${(err as Error).message}`;
  }
}

/** Values without part views or forged tags: every kind devalue stores, nested. */
const storable = fc.anything({
  withBigInt: true,
  withBoxedValues: true,
  withDate: true,
  withMap: true,
  withSet: true,
  withNullPrototype: true,
  withSparseArray: true,
  withTypedArray: true,
  withObjectString: false,
  maxDepth: 4,
});

/** Parts encoderReads read otherwise than devalue: part views, forged tags, next to data. */
const special = fc.oneof(
  fc.uint8Array({ minLength: 2, maxLength: 12 }).map((a) => a.subarray(1)),
  fc.int16Array({ minLength: 2, maxLength: 6 }).map((a) => a.subarray(1, a.length)),
  fc.string({ maxLength: 8 }).map((s) => Buffer.from(s)),
  fc.uint8Array({ minLength: 4, maxLength: 12 }).map((a) => new DataView(a.buffer, 1, 2)),
  fc
    .constantFrom("Array", "Date", "Map", "Uint8Array", "Temporal.PlainDate")
    .map((tag) => Object.defineProperty({ 0: "a", length: 1 }, Symbol.toStringTag, { value: tag })),
);

describe("codec: encode's text", () => {
  it("is devalue's own text for every value without part views or forged tags", () => {
    fc.assert(
      fc.property(storable, (value) => {
        const mine = outcome(() => encode(value, Number.POSITIVE_INFINITY));
        const theirs = outcome(() =>
          escapeLoneSurrogatesInJson(devalue.stringify(value, errorReducer)),
        );
        if (!mine.startsWith("refused")) expect(mine).toBe(theirs);
        else expect(theirs.startsWith("refused")).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it("is the text of encoderReads' reads for values with part views and forged tags", () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(storable, special), { maxLength: 5 }), (parts) => {
        for (const value of [parts, { parts }, new Map([["k", parts]])]) {
          const mine = outcome(() => encode(value, Number.POSITIVE_INFINITY));
          const reads = outcome(() =>
            escapeLoneSurrogatesInJson(devalue.stringify(value, errorReducer, encoderReads)),
          );
          if (!mine.startsWith("refused")) expect(mine).toBe(reads);
          else expect(reads.startsWith("refused")).toBe(true);
        }
      }),
      { numRuns: 1000 },
    );
  });
});
