// The encoder writes plain data without devalue (codec/plain-text.ts). Its text must be
// devalue's, character for character: a record's text is compared with a later one's (a
// start again under an id, an event resent under its key), and every replay decodes it.
// Generated values (nesting, shared and cyclic references, every code devalue writes for a
// number, strings needing escapes) are written both ways; values that are not plain data
// are left to devalue.

import * as devalue from "devalue";
import { describe, expect, it } from "vitest";
import { decode, encode } from "../src/codec/codec.js";
import { plainText } from "../src/codec/plain-text.js";

/** A small deterministic generator (mulberry32), so a failure names its seed. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const CHARS = ["a", "Z", "0", " ", '"', "\\", "<", ">", "\n", "\r", "\t", "\b", "\f", "\u0000"];
CHARS.push("\u001f", "\u2028", "\u2029", "é", "😀", "\ud800", "/", "'", "`", "$", "_");
const NUMBERS = [0, -0, 1, -1, 1.5, 1e21, 1e-7, 2 ** 53, Number.NaN, Infinity, -Infinity];

function generate(rand: () => number, depth: number, seen: object[]): unknown {
  const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)] as T;
  const text = () => Array.from({ length: Math.floor(rand() * 6) }, () => pick(CHARS)).join("");
  const roll = rand();
  if (roll < 0.12 && seen.length > 0) return pick(seen); // a shared (or cyclic) reference
  if (depth <= 0 || roll < 0.55) {
    switch (Math.floor(rand() * 7)) {
      case 0:
        return text();
      case 1:
        return pick(NUMBERS);
      case 2:
        return Math.floor(rand() * 1000);
      case 3:
        return rand() < 0.5;
      case 4:
        return null;
      case 5:
        return undefined;
      default:
        return BigInt(Math.floor(rand() * 1e6)) * (rand() < 0.5 ? -1n : 1n);
    }
  }
  if (rand() < 0.4) {
    const array: unknown[] = [];
    seen.push(array);
    const n = Math.floor(rand() * 5);
    for (let i = 0; i < n; i++) array.push(generate(rand, depth - 1, seen));
    return array;
  }
  const object: Record<string, unknown> = {};
  seen.push(object);
  const n = Math.floor(rand() * 5);
  for (let i = 0; i < n; i++) {
    const key = rand() < 0.2 ? String(Math.floor(rand() * 20)) : text();
    object[key] = generate(rand, depth - 1, seen);
  }
  return object;
}

describe("plain data is written as devalue writes it", () => {
  it("on 20,000 generated values: the same text, which decodes to the same value", () => {
    for (let seed = 1; seed <= 20_000; seed++) {
      const value = generate(random(seed), 4, []);
      const text = plainText(value);
      expect({ seed, text }).toEqual({ seed, text: devalue.stringify(value) });
      expect(decode(encode(value))).toEqual(value);
    }
  });

  it("leaves what is not plain data to devalue, reading no getter", () => {
    let reads = 0;
    const getter = {
      get g() {
        reads++;
        return 1;
      },
    };
    const error = new Error("e");
    Object.setPrototypeOf(error, Object.prototype);
    const date = new Date(0);
    Object.setPrototypeOf(date, Object.prototype);
    const extraKey = Object.assign([1, 2], { more: 3 });
    const withHole = (): unknown[] => {
      const a: unknown[] = [];
      a[1] = 1;
      return a;
    };
    const holeAndKey = Object.assign(withHole(), { more: 3 });
    const notPlain = [
      new Date(0),
      new Map([[1, 2]]),
      new Set([1]),
      new Error("e"),
      new Uint8Array(2),
      Symbol("s"),
      () => 1,
      { s: Symbol("s") },
      { [Symbol("k")]: 1 },
      Object.create(null),
      new (class Thing {})(),
      new Proxy({}, {}),
      withHole(),
      extraKey,
      holeAndKey,
      { [Symbol.toStringTag]: "Array" },
      error,
      date,
      Object(1),
      { nested: [{ deeper: new Date(0) }] },
      // biome-ignore lint/suspicious/noThenProperty: a thenable is what is refused here.
      { then: () => 1 },
      { before: 1, getter },
    ];
    for (const value of notPlain) expect(plainText(value)).toBeUndefined();
    expect(reads).toBe(0);
  });
});
