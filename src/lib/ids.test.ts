// New ids: random, URL-safe, never repeated across the pool's refills. Child run ids: one
// per (parent, key), never shared by two parents, within the id limit.

import { describe, expect, it } from "vitest";
import { childRunId, MAX_RUN_ID_LENGTH, newId } from "./ids.js";

/** Splits a plain child id at its last "/": the inverse that makes childRunId injective. */
function split(id: string): [string, string] {
  const at = id.lastIndexOf("/");
  return [id.slice(0, at), decodeURIComponent(id.slice(at + 1))];
}

describe("newId", () => {
  it("is prefix_ and 16 URL-safe characters, none repeated over many pool refills", () => {
    const seen = new Set<string>();
    for (let i = 0; i < 5_000; i++) {
      const id = newId("run");
      expect(id).toMatch(/^run_[A-Za-z0-9_-]{16}$/);
      seen.add(id);
    }
    expect(seen.size).toBe(5_000);
  });
});

describe("childRunId", () => {
  it("is parent/key with the key's % and / encoded, and splits back at the last slash", () => {
    expect(childRunId("run_1", "review")).toBe("run_1/review");
    expect(childRunId("run_1", "review#2")).toBe("run_1/review#2");
    expect(childRunId("run_1", "a/b%c")).toBe("run_1/a%2Fb%25c");
    const pairs: Array<[string, string]> = [
      ["a:b", "c"],
      ["a", "b:c"],
      ["a/b", "c"],
      ["a", "b/c"],
      ["p", "k#2"],
      ["p", "%2F"],
      ["p/%2F", "x"],
      ["ünï 👍", "cødé 中文 👍"],
      ["'; DROP TABLE runs; --", '"quoted" \\ back'],
    ];
    for (const [parent, key] of pairs) {
      const id = childRunId(parent, key);
      expect(split(id)).toEqual([parent, key]);
    }
  });

  it("never gives two (parent, key) pairs the same id", () => {
    const parents = ["a", "a:b", "a/b", "a:b:c", "a/b/c", "x#", "x%23"];
    const keys = ["b", "c", "b:c", "b/c", "c#2", "#", "%23", "/", ":"];
    const seen = new Map<string, string>();
    for (const p of parents) {
      for (const k of keys) {
        const id = childRunId(p, k);
        const pair = JSON.stringify([p, k]);
        expect(seen.get(id) ?? pair, id).toBe(pair);
        seen.set(id, pair);
      }
    }
    expect(seen.size).toBe(parents.length * keys.length);
  });

  it("stays within the run id limit with a hash form, distinct per pair and from plain ids", () => {
    const parent = `run_${"p".repeat(250)}`;
    const long = childRunId(parent, "kid");
    expect(long.length).toBeLessThanOrEqual(MAX_RUN_ID_LENGTH);
    expect(long.startsWith("run_ppp")).toBe(true);
    expect(long.slice(long.lastIndexOf("/") + 1).startsWith("%h")).toBe(true);
    expect(childRunId(parent, "kid")).toBe(long);
    expect(childRunId(parent, "kid#2")).not.toBe(long);
    expect(childRunId(`${parent}x`, "kid")).not.toBe(long);
    // A long key (say, 200 characters that each encode to 9) takes the hash form too.
    const emoji = childRunId("p", "👍".repeat(100));
    expect(emoji.length).toBeLessThanOrEqual(MAX_RUN_ID_LENGTH);
    // Never half a surrogate pair where the parent id is cut.
    const cutParent = childRunId(`r${"👍".repeat(200)}`, "k");
    expect(cutParent.length).toBeLessThanOrEqual(MAX_RUN_ID_LENGTH);
    expect(() => encodeURIComponent(cutParent)).not.toThrow();
  });

  it("refuses keys no store can hold exactly", () => {
    expect(() => childRunId("p", "a\u0000b")).toThrow(TypeError);
    expect(() => childRunId("p", "👍".slice(1))).toThrow(/child key .*lone surrogate/);
  });
});
