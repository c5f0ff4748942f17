// Usage as amounts, and the lookup of prices and limits by model.

import { describe, expect, it } from "vitest";
import { estimateTokens, lookupModel, modelKeys, spendOf } from "./pricing.js";

describe("spendOf", () => {
  it("prices each kind of token at its rate and names every kind that is not zero", () => {
    const usage = {
      inputTokens: { total: 1000, noCache: 800, cacheRead: 150, cacheWrite: 50 },
      outputTokens: { total: 300, text: 200, reasoning: 100 },
    };
    const price = { input: 3, output: 15, cachedInput: 0.3, cacheWrite: 3.75, reasoning: 20 };
    expect(spendOf(usage, price)).toEqual({
      tokens: 1300,
      inputTokens: 1000,
      outputTokens: 300,
      cachedInputTokens: 150,
      reasoningTokens: 100,
      usd: (800 * 3 + 150 * 0.3 + 50 * 3.75 + 200 * 15 + 100 * 20) / 1e6,
    });
  });

  it("fills what a provider leaves out and defaults the rates; no price, no usd", () => {
    const usage = {
      inputTokens: { total: 100, noCache: undefined, cacheRead: 40, cacheWrite: undefined },
      outputTokens: { total: 10, text: undefined, reasoning: undefined },
    };
    expect(spendOf(usage, { input: 1, output: 2 })).toEqual({
      tokens: 110,
      inputTokens: 100,
      outputTokens: 10,
      cachedInputTokens: 40,
      usd: (60 + 40 + 20) / 1e6,
    });
    expect(spendOf(usage, undefined)).toEqual({
      tokens: 110,
      inputTokens: 100,
      outputTokens: 10,
      cachedInputTokens: 40,
    });
  });
});

describe("lookupModel", () => {
  it("tries provider.api:model, provider:model, provider.api:*, provider:*, then *", () => {
    const m = { provider: "openai.responses", modelId: "gpt-4o" };
    expect(modelKeys(m)).toEqual([
      "openai.responses:gpt-4o",
      "openai:gpt-4o",
      "openai.responses:*",
      "openai:*",
      "*",
    ]);
    expect(lookupModel({ "*": 1, "openai:*": 2 }, m)).toEqual({ key: "openai:*", value: 2 });
    expect(lookupModel({ "*": 1 }, m)).toEqual({ key: "*", value: 1 });
    expect(lookupModel({ "anthropic:*": 1 }, m)).toBeUndefined();
    expect(lookupModel(undefined, m)).toBeUndefined();
  });
});

describe("estimateTokens", () => {
  it("counts about four characters a token of the prompt's JSON, plus the output allowed", () => {
    expect(estimateTokens(1442, 500)).toBe(361 + 500);
    expect(estimateTokens(2, undefined)).toBe(1);
  });
});
