// Found by an adversarial review of how stored values are encoded and compared (encode's
// fast and full paths, sameStoredValue, the child input digest, child adoption after a
// crash), against the text the code before df89ca8 stored: each test is a bug it found, and
// failed before its mend.

import * as devalue from "devalue";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { encode, encodeIdentity } from "../src/codec/codec.js";
import { sameStoredValue } from "../src/codec/same-stored-value.js";
import {
  type AnyWorkflow,
  createEngine,
  encryptedStore,
  NonDeterminismError,
  type Store,
  workflow,
} from "../src/index.js";
import type { RunWrite } from "../src/store/store.js";
import { crashableStore } from "../src/testing/crashable-store.js";
import { advanceUntil, useHarness } from "./helpers/engines.js";
import { until } from "./helpers/sqlite.js";

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
  it("generated: views over shared buffers (Buffers, whole views, the buffers themselves) are stored as devalue's own reads stored them before today", () => {
    // encode before today: devalue's own reads, with this reducer.
    const before = (v: unknown) =>
      devalue.stringify(v, {
        Error: (e: unknown) =>
          e instanceof Error && [e.name, e.message, e.stack ?? "", (e as { code?: unknown }).code],
      });
    const part = fc.record({
      kind: fc.constantFrom("Buffer", "Uint8Array", "Int8Array", "DataView", "ArrayBuffer"),
      start: fc.nat(),
      length: fc.nat(),
    });
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 32 }),
        fc.boolean(),
        fc.array(part, { minLength: 1, maxLength: 5 }),
        (size, pooled, parts) => {
          const base = pooled ? Buffer.from("x".repeat(size)) : Buffer.alloc(size, 3);
          const ab = base.buffer;
          const values = parts.map(({ kind, start, length }) => {
            if (kind === "ArrayBuffer") return pooled ? null : ab;
            // Buffers show any part; other views their whole buffer (a part view of one is
            // stored as its bytes since a3199a7, on purpose).
            if (kind !== "Buffer") return new (globalThis[kind] as typeof Uint8Array)(ab);
            const at = start % size;
            return Buffer.from(ab, base.byteOffset + at, length % (size - at + 1));
          });
          const value = {
            values,
            again: values[0],
            err: Object.assign(new Error("e"), { code: 1 }),
          };
          expect(encode(value)).toBe(before(value));
        },
      ),
      { numRuns: 300 },
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

describe("a child created before a crash, on an encrypted store", () => {
  const harness = useHarness("sqlite");
  const keys = [{ id: "k1", key: Buffer.alloc(32, 7) }];

  /** Runs `parent` until its child is created and the intent's write is lost with the
   *  engine; then `change()` alters the code and a new engine takes the parent over. */
  async function crashThenChange(parent: AnyWorkflow[], change: () => void) {
    const h = harness();
    const encrypted = (): Store => encryptedStore(h.store(), { keys });
    const store = crashableStore(encrypted(), {
      crashBefore: (call) =>
        call.verb === "appendRecords" &&
        (call.args[0] as RunWrite[]).some((w) => w.intents?.some((i) => i.kind === "child")),
    });
    const e1 = createEngine({ store, workflows: parent, clock: h.clock, pollIntervalMs: 10 });
    await e1.start(parent[0]!, 1, { id: "p" });
    await until(async () => store.crashed, "crash before the child's intent");
    await store.settled();
    change();
    const e2 = createEngine({ store: encrypted(), workflows: parent, clock: h.clock });
    try {
      return await advanceUntil(h.clock, e2.handle("p").result(), 1_000, 200);
    } finally {
      await e2.close();
    }
  }

  const kid = workflow(
    { name: "enc-kid", version: "1" },
    async (ctx, x: { n: number; err: Error; b: Uint8Array }) => {
      await ctx.sleep("nap", "1s");
      return x.n * 10;
    },
  );

  it("its stored input, decrypted, is compared with the input handed now", async () => {
    const code = { n: 1 };
    const parent = workflow({ name: "enc-parent", version: "1" }, async (ctx) =>
      ctx.child("kid", kid, { n: code.n, err: new Error("not by stack"), b: Buffer.from("x") }),
    );
    const out = crashThenChange([parent, kid], () => {
      code.n = 2;
    });
    await expect(out).rejects.toBeInstanceOf(NonDeterminismError);
    await expect(out).rejects.toThrow(/key "kid".*another input/);
  });

  it("the same call adopts it", async () => {
    const parent = workflow({ name: "enc-same-parent", version: "1" }, async (ctx) =>
      ctx.child("kid", kid, { n: 4, err: new Error("not by stack"), b: Buffer.from("x") }),
    );
    expect(await crashThenChange([parent, kid], () => {})).toBe(40);
  });
});
