import { describe, expect, it } from "vitest";
import { addAmounts, subtractAmounts } from "./amounts.js";

describe("amounts", () => {
  it("adds and subtracts name by name, creating names it has not seen", () => {
    const into: Record<string, number> = { tokens: 10 };
    expect(addAmounts(into, { tokens: 5, usd: 0.25 })).toBe(into);
    expect(into).toEqual({ tokens: 15, usd: 0.25 });
    subtractAmounts(into, { tokens: 15, calls: 1 });
    expect(into).toEqual({ tokens: 0, usd: 0.25, calls: -1 });
    expect(addAmounts(into, {})).toEqual({ tokens: 0, usd: 0.25, calls: -1 });
  });

  it("reads own names only, as Object.entries does; a prototype-less object works", () => {
    const inherited = Object.create({ tokens: 100 }) as Record<string, number>;
    inherited.usd = 1;
    const bare = Object.create(null) as Record<string, number>;
    bare.tokens = 2;
    const into: Record<string, number> = {};
    addAmounts(into, inherited);
    addAmounts(into, bare);
    subtractAmounts(into, inherited);
    expect(into).toEqual({ usd: 0, tokens: 2 });
  });
});
