// How the API answers errors: cairn's codes by their status, with their message; a code
// a request should never meet, and anything else, as a 500 that says nothing and is logged.

import { describe, expect, it } from "vitest";
import { PayloadKeyError, RateLimitError, RunNotFoundError } from "../index.js";
import { errorAnswer } from "./errors.js";

describe("errorAnswer", () => {
  it("answers cairn's errors by code, and the unexpected ones as a logged 500", () => {
    const logs: string[] = [];
    const log = (m: string) => logs.push(m);
    expect(errorAnswer(new RunNotFoundError('Run "run_x" does not exist'), log)).toEqual({
      status: 404,
      body: { error: { code: "RUN_NOT_FOUND", message: 'Run "run_x" does not exist' } },
    });
    expect(errorAnswer(new PayloadKeyError("key k", { keyId: "k" }), log).status).toBe(503);
    expect(logs).toEqual([]);
    for (const err of [new RateLimitError("the provider said 429"), new Error("boom")]) {
      expect(errorAnswer(err, log)).toEqual({
        status: 500,
        body: {
          error: { code: "INTERNAL", message: "Internal error; the server's log has the details." },
        },
      });
    }
    expect(logs).toEqual([
      "unexpected error in a request: RateLimitError: the provider said 429",
      "unexpected error in a request: Error: boom",
    ]);
  });
});
