// Findings of a review of the codec's mends (stored values, part views, tags, realms): what
// encode writes, how stored values are compared (start, sendEvent, checkReplay), and the
// cost of encode on the step path.

import Database from "better-sqlite3";
import * as devalue from "devalue";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decode, encode, encodeIdentity } from "../src/codec/codec.js";
import { encoderReads } from "../src/codec/encoder-reads.js";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import { escapeLoneSurrogatesInJson } from "../src/lib/text.js";
import { checkReplay } from "../src/testing/index.js";
import { childInputDigest } from "../src/workflow/child-identity.js";
import { useHarness } from "./helpers/engines.js";
import { tempDbPath } from "./helpers/sqlite.js";

const harness = useHarness("sqlite");

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

/** An Error made here: each call site gives it another stack. */
function madeHere(message: string, code?: string): Error {
  const e = new Error(message);
  if (code !== undefined) (e as { code?: string }).code = code;
  return e;
}

/** A record as a cairn before a3199a7 wrote a part view of "secrethi!" showing "hi!". */
const OLD_PART_VIEW = '["Uint8Array",2,6,3],["ArrayBuffer","c2VjcmV0aGkh"]';

describe("engine.start again under one id: the input compared as a value", () => {
  it("an Error made at another call site (another stack) is the same input", async () => {
    const h = harness();
    const wf = workflow({ name: "h6-start-err", version: "1" }, async (_ctx, i: { note: Error }) =>
      String(i.note.message),
    );
    const e = h.engine([wf]);
    const first = await e.start(wf, { note: madeHere("x") }, { id: "start-err" });
    expect(await first.result()).toBe("x");
    const again = await e.start(wf, { note: new Error("x") }, { id: "start-err" });
    expect(again.id).toBe("start-err");
    // What differs of an Error as stored is still another input.
    await expect(e.start(wf, { note: new Error("y") }, { id: "start-err" })).rejects.toThrow(
      /already exists with a different input/,
    );
    await expect(
      e.start(wf, { note: madeHere("x", "E_OTHER") }, { id: "start-err" }),
    ).rejects.toThrow(/already exists with a different input/);
  });

  it("a part view stored the old way (its whole buffer) is the same input as its bytes", async () => {
    const db = tempDbPath();
    try {
      const plain = workflow(
        { name: "h6-start-old-view", version: "1" },
        async (_ctx, i: { b: Uint8Array }) => Buffer.from(i.b).toString(),
      );
      const schema = {
        "~standard": {
          version: 1 as const,
          vendor: "h6",
          validate: (value: unknown) => ({ value: value as { b: Uint8Array } }),
        },
      };
      const checked = workflow(
        { name: "h6-start-old-view", version: "2", input: schema },
        async (_ctx, i: { b: Uint8Array }) => Buffer.from(i.b).toString(),
      );
      const view = () => Uint8Array.from(Buffer.from("secrethi!")).subarray(6, 9);
      const e = createEngine({ store: sqliteStore(db.path), workflows: [plain, checked] });
      await (await e.start(plain, { b: view() }, { id: "old-1" })).result();
      await (await e.start(checked, { b: view() }, { id: "old-2" })).result();
      await e.close();
      const raw = new Database(db.path);
      raw.prepare("UPDATE runs SET input = ?").run(`[{"b":1},${OLD_PART_VIEW}]`);
      raw.close();
      const e2 = createEngine({ store: sqliteStore(db.path), workflows: [plain, checked] });
      try {
        expect((await e2.start(plain, { b: view() }, { id: "old-1" })).id).toBe("old-1");
        expect((await e2.start(checked, { b: view() }, { id: "old-2" })).id).toBe("old-2");
        await expect(
          e2.start(plain, { b: Uint8Array.from(Buffer.from("secret")) }, { id: "old-1" }),
        ).rejects.toThrow(/already exists with a different input/);
      } finally {
        await e2.close();
      }
    } finally {
      db.cleanup();
    }
  });
});

describe("sendEvent again under one idempotency key: the payload compared as a value", () => {
  it("an Error made at another call site is the same event; another message is not", async () => {
    const h = harness();
    const wf = workflow({ name: "h6-resend-err", version: "1" }, async (ctx) => {
      const got = await ctx.waitForEvent("note");
      return got.timedOut ? "" : (got.payload as Error).message;
    });
    const e = h.engine([wf]);
    const run = await e.start(wf, undefined, { id: "resend-err" });
    const first = await e.sendEvent("resend-err", "note", madeHere("x"), { idempotencyKey: "k" });
    const again = await e.sendEvent("resend-err", "note", new Error("x"), { idempotencyKey: "k" });
    expect(first.duplicate).toBe(false);
    expect(again).toEqual({ event: first.event, duplicate: true });
    await expect(
      e.sendEvent("resend-err", "note", new Error("y"), { idempotencyKey: "k" }),
    ).rejects.toThrow(/with this idempotency key, with another name or payload/);
    expect(await run.result()).toBe("x");
  });
});

describe("checkReplay: an output that differs as stored is a divergence", () => {
  it("an object that says it is an Array (Symbol.toStringTag) is not the array recorded", async () => {
    const h = harness();
    const wf = workflow({ name: "h6-forged-out", version: "1" }, async (ctx) => {
      await ctx.step("n", async () => 1);
      return ["a"];
    });
    await (await h.engine([wf]).start(wf, undefined, { id: "forged-out" })).result();
    const now = workflow({ name: "h6-forged-out", version: "1" }, async (ctx) => {
      await ctx.step("n", async () => 1);
      // Stored as the object it is: {"0":"a","length":1}.
      return Object.defineProperty({ 0: "a", length: 1 }, Symbol.toStringTag, { value: "Array" });
    });
    const [res] = await checkReplay({ store: h.store(), workflows: [now], runIds: ["forged-out"] });
    expect(res?.verdict).toBe("diverged");
  });

  it("a part view recorded the old way is the same output as a view of its bytes alone", async () => {
    const db = tempDbPath();
    try {
      const wf = workflow({ name: "h6-old-view-out", version: "1" }, async (ctx) => {
        await ctx.step("n", async () => 1);
        return { got: Uint8Array.from(Buffer.from("secrethi!")).subarray(6, 9) };
      });
      const e = createEngine({ store: sqliteStore(db.path), workflows: [wf] });
      await (await e.start(wf, undefined, { id: "old-out" })).result();
      await e.close();
      const raw = new Database(db.path);
      raw.prepare("UPDATE runs SET output = ?").run(`[{"got":1},${OLD_PART_VIEW}]`);
      raw.close();
      const whole = workflow({ name: "h6-old-view-out", version: "1" }, async (ctx) => {
        await ctx.step("n", async () => 1);
        return { got: Uint8Array.from(Buffer.from("hi!")) };
      });
      const [res] = await checkReplay({
        store: sqliteStore(db.path),
        workflows: [whole],
        runIds: ["old-out"],
      });
      expect(res?.verdict).toBe("ok");
    } finally {
      db.cleanup();
    }
  });
});

describe("codec: the bytes a view shows are read by no code of the value's own", () => {
  it("a buffer's own slice or constructor (species) changes nothing of the bytes stored", () => {
    const withSlice = new Uint8Array([1, 2, 3, 4, 5, 6]).buffer;
    Object.defineProperty(withSlice, "slice", { value: () => new ArrayBuffer(8) });
    const withSpecies = new Uint8Array([1, 2, 3, 4, 5, 6]).buffer;
    Object.defineProperty(withSpecies, "constructor", {
      value: { [Symbol.species]: (n: number) => new ArrayBuffer(n + 4) },
    });
    for (const buffer of [withSlice, withSpecies]) {
      const back = decode<{ v: Uint8Array; d: DataView }>(
        encode({ v: new Uint8Array(buffer, 1, 2), d: new DataView(buffer, 2, 3) }),
      );
      expect([...back.v]).toEqual([2, 3]);
      expect(back.v.buffer.byteLength).toBe(2);
      expect([...new Uint8Array(back.d.buffer)]).toEqual([3, 4, 5]);
    }
  });

  it("a proxy whose tag changes between reads is encoded as encoderReads read it", () => {
    const view = new Uint8Array(new Uint8Array([1, 2, 3, 4, 5, 6]).buffer, 1, 2);
    const lying = () => {
      let reads = 0;
      return new Proxy(
        {},
        {
          get: (_t, k) =>
            k === Symbol.toStringTag
              ? reads++ === 0
                ? undefined
                : "Uint8Array"
              : Reflect.get(view, k, view),
        },
      );
    };
    const reads = outcome(() =>
      escapeLoneSurrogatesInJson(devalue.stringify({ p: lying() }, errorReducer, encoderReads)),
    );
    expect(outcome(() => encode({ p: lying() }))).toBe(reads);
    expect(reads).not.toContain("ArrayBuffer");
  });
});

describe("codec: a refused proxy is named as one", () => {
  it("a Proxy of a Map, Date or typed array is not called an instance of its class", () => {
    for (const target of [new Map([[1, 2]]), new Date(0), new Uint8Array(2)]) {
      let thrown: unknown;
      try {
        encode({ wrapped: new Proxy(target, {}) });
      } catch (err) {
        thrown = err;
      }
      expect((thrown as Error).message).toMatch(
        /^cannot store a Proxy \(store the value it wraps, or a plain copy\) at \.wrapped$/,
      );
    }
  });
});

describe("a child's input digest: inputs stored otherwise are other inputs", () => {
  it("an object that says it is an Array, or a view whose own buffer says otherwise, is not the value it mimics", () => {
    const forged = Object.defineProperty({ 0: "a", length: 1 }, Symbol.toStringTag, {
      value: "Array",
    });
    expect(encode(forged)).not.toBe(encode(["a"]));
    expect(childInputDigest(forged)).not.toBe(childInputDigest(["a"]));
    const shown = new Uint8Array([1, 2, 3, 4]).subarray(0, 2);
    const other = new Uint8Array([9, 9, 9, 9]).subarray(0, 2);
    Object.defineProperty(other, "buffer", { value: shown.buffer });
    expect(encode({ v: other })).not.toBe(encode({ v: shown }));
    expect(childInputDigest({ v: other })).not.toBe(childInputDigest({ v: shown }));
  });

  it("is unchanged for genuine values (digests recorded before stay matched)", () => {
    const err = new TypeError("bad");
    (err as { code?: string }).code = "E";
    const pooled = Buffer.from("pooled bytes");
    const input = {
      err,
      part: new Uint16Array([1, 2, 3, 4]).subarray(1, 3),
      dv: new DataView(new ArrayBuffer(8), 2, 4),
      pooled,
      whole: new Uint8Array([5, 6]),
      when: new Date(0),
      map: new Map([["k", new Set([1])]]),
    };
    const beforeReducers = {
      Error: (v: unknown) =>
        v instanceof Error && [v.name, v.message, (v as { code?: unknown }).code],
      PartView: (v: unknown) =>
        ArrayBuffer.isView(v) &&
        v.byteLength !== v.buffer.byteLength && [
          Object.prototype.toString.call(v),
          Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("base64"),
        ],
    };
    // An input with an Error is digested by its every part now, marked (child-identity.ts); a
    // digest recorded before is compared with the text it was taken from, byName.
    expect(encodeIdentity(input, "byName")).toBe(devalue.stringify(input, beforeReducers));
    const genuineViews = fc.oneof(
      fc.uint8Array({ minLength: 2, maxLength: 12 }).map((a) => a.subarray(1)),
      fc.string({ maxLength: 8 }).map((t) => Buffer.from(t)),
      fc.uint8Array({ minLength: 4, maxLength: 12 }).map((a) => new DataView(a.buffer, 1, 2)),
    );
    fc.assert(
      fc.property(fc.array(fc.oneof(storable, genuineViews), { maxLength: 5 }), (value) => {
        const before = outcome(() =>
          escapeLoneSurrogatesInJson(devalue.stringify(value, beforeReducers)),
        );
        if (!before.startsWith("refused")) expect(encodeIdentity(value, "byName")).toBe(before);
      }),
      { numRuns: 1000 },
    );
  });
});
