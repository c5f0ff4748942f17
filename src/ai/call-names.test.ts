import { describe, expect, it } from "vitest";
import { callName } from "./call-names.js";

describe("callName", () => {
  it("a long name is shortened with a hash and never cuts an emoji in two", () => {
    // "model:" and 169 characters, then an emoji whose two halves straddle the cut at 176.
    const model = `${"m".repeat(169)}🚀${"x".repeat(100)}`;
    const name = callName("model", model);
    expect(name.length).toBeLessThanOrEqual(200);
    expect(name).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])/);
    expect(name).toMatch(/:~[\w-]{22}$/);
    // Another long name with the same start gets another name.
    expect(callName("model", `${model}y`)).not.toBe(name);
  });
});
