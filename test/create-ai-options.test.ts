// createAi({ limit: ... }) or createAi({ price: ... }) (a misspelt option, or a config object
// read from a file, where TypeScript checks no excess property) made a kit without its
// shared rate limits or its prices, silently: every model ran unthrottled and unpriced. A
// misspelt field inside `limits` was already refused; a misspelt option is now too.
import { describe, expect, it } from "vitest";
import { createAi } from "../src/ai/index.js";

describe("createAi options", () => {
  it("an unknown option is a TypeError naming it and the options there are", () => {
    const config: Record<string, unknown> = { limit: { "openai:*": { requestsPerMinute: 10 } } };
    expect(() => createAi(config)).toThrow(
      new TypeError(
        'createAi(): unknown option "limit"; the options are store, clock, prices, limits, maxInProcessWaitMs, log',
      ),
    );
    expect(() => createAi({ price: {}, maxInprocessWaitMs: 1 } as Record<string, unknown>)).toThrow(
      /^createAi\(\): unknown options "price", "maxInprocessWaitMs"; the options are/,
    );
  });

  it("options that are no object are refused; none at all, or known ones, make a kit", async () => {
    expect(() => createAi("openai" as never)).toThrow(
      new TypeError(
        "createAi(options): options must be an object { store, clock, prices, limits, maxInProcessWaitMs, log }, got string",
      ),
    );
    const kits = [
      createAi(),
      createAi(undefined),
      createAi({ prices: { "*": { input: 1, output: 2 } }, maxInProcessWaitMs: 0, log: () => {} }),
    ];
    for (const k of kits) await k.close();
  });
});
