// How a provider's failure is judged: 429 and "overloaded" as RateLimitError with the wait
// the response asked for, refused requests as FatalError, the rest as they are.

import { APICallError } from "ai";
import { describe, expect, it } from "vitest";
import { FatalError, RateLimitError } from "../index.js";
import { providerError, retryAfterFrom } from "./provider-errors.js";

const NOW = Date.UTC(2026, 0, 1);
const model = { provider: "openai.chat", modelId: "gpt-4o" };

function apiError(statusCode: number, headers: Record<string, string> = {}) {
  return new APICallError({
    message: `HTTP ${statusCode}`,
    url: "https://api.example.com",
    requestBodyValues: {},
    statusCode,
    responseHeaders: headers,
  });
}

describe("retryAfterFrom", () => {
  it("reads retry-after-ms, Retry-After in seconds or as a date, else the latest reset header", () => {
    expect(retryAfterFrom({ "retry-after-ms": "1500", "retry-after": "30" }, NOW)).toBe(1500);
    expect(retryAfterFrom({ "Retry-After": "30" }, NOW)).toBe(30_000);
    expect(retryAfterFrom({ "retry-after": new Date(NOW + 45_000).toUTCString() }, NOW)).toBe(
      45_000,
    );
    expect(
      retryAfterFrom(
        { "x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s" },
        NOW,
      ),
    ).toBe(360_000);
    expect(retryAfterFrom({ "x-ratelimit-reset-tokens": "1h2m3.5s" }, NOW)).toBe(3_723_500);
    expect(retryAfterFrom({ "x-ratelimit-reset-requests": "20ms" }, NOW)).toBe(20);
    expect(
      retryAfterFrom(
        { "anthropic-ratelimit-requests-reset": new Date(NOW + 12_000).toISOString() },
        NOW,
      ),
    ).toBe(12_000);
  });

  it("ignores what it cannot read", () => {
    expect(retryAfterFrom(undefined, NOW)).toBeUndefined();
    expect(retryAfterFrom({}, NOW)).toBeUndefined();
    expect(retryAfterFrom({ "retry-after": "soon" }, NOW)).toBeUndefined();
    expect(retryAfterFrom({ "x-ratelimit-reset-requests": "6 minutes" }, NOW)).toBeUndefined();
  });
});

describe("providerError", () => {
  it("a 429 is a RateLimitError whose retryAfter is the provider's wait", () => {
    const { error, retryAfterMs } = providerError(
      apiError(429, { "retry-after": "30" }),
      model,
      NOW,
    );
    expect(error).toBeInstanceOf(RateLimitError);
    expect((error as RateLimitError).retryAfter).toBe(30_000);
    expect(retryAfterMs).toBe(30_000);
    expect((error as Error).message).toBe(
      'Provider "openai.chat" (model "gpt-4o") rate-limited the call (HTTP 429); it asked to wait 30 s',
    );
  });

  it("503 and 529 are overloaded: rate limits too, with or without a wait", () => {
    for (const status of [503, 529]) {
      const { error, retryAfterMs } = providerError(apiError(status), model, NOW);
      expect(error).toBeInstanceOf(RateLimitError);
      expect((error as RateLimitError).retryAfter).toBeUndefined();
      expect(retryAfterMs).toBeUndefined();
      expect((error as Error).message).toMatch(/is overloaded \(HTTP 5\d\d\)$/);
    }
  });

  it("a refused request is a FatalError; a retryable one and anything else pass through", () => {
    const refused = providerError(apiError(400), model, NOW).error;
    expect(refused).toBeInstanceOf(FatalError);
    expect((refused as Error).message).toMatch(/refused the call \(HTTP 400\): HTTP 400/);
    const server = apiError(500);
    expect(providerError(server, model, NOW).error).toBe(server);
    const network = new TypeError("fetch failed");
    expect(providerError(network, model, NOW).error).toBe(network);
    // Found through a wrapper's cause, as the SDK's RetryError and gateway errors wrap it.
    const wrapped = new Error("wrapped", { cause: apiError(429, { "retry-after": "2" }) });
    expect(providerError(wrapped, model, NOW).retryAfterMs).toBe(2_000);
  });
});
