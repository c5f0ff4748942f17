// The retry decision as a pure function: the attempt proposes (it failed with this error),
// the policy decides (again, when, or never).

import { describe, expect, it } from "vitest";
import { BudgetExceededError, FatalError, RateLimitError, toErrorRecord } from "../errors.js";
import type { AttemptRecord } from "../store/store.js";
import { judgeFailure, planNextAttempt, resolvePolicy } from "./retry.js";

const policy = resolvePolicy([{ maxAttempts: 3, initialDelay: 1000, jitter: false }]);
const judge = (err: Error, attempt = 1) =>
  judgeFailure(err, toErrorRecord(err), attempt, policy, 10_000, () => 0.5);

function attempt(n: number, retryAt: number | null): AttemptRecord {
  return {
    runId: "r",
    key: "k",
    attempt: n,
    generation: 0,
    startedAt: 0,
    endedAt: 0,
    error: { name: "Error", message: `try ${n}` },
    spend: {},
    retryAt,
  };
}

describe("judgeFailure", () => {
  it("retries with exponential backoff until maxAttempts", () => {
    expect(judge(new Error("x"), 1)).toEqual({ final: false, retryAt: 11_000 });
    expect(judge(new Error("x"), 2)).toEqual({ final: false, retryAt: 12_000 });
    expect(judge(new Error("x"), 3)).toEqual({ final: true, retryAt: null });
  });

  it("gives up at once on FatalError and BudgetExceededError, also rebuilt from a record", () => {
    expect(judge(new FatalError("no")).final).toBe(true);
    expect(judge(new BudgetExceededError("spent")).final).toBe(true);
    const recorded = Object.assign(new Error("no"), { code: "FATAL" });
    expect(judge(recorded).final).toBe(true);
  });

  it("waits at least a rate limit's retryAfter", () => {
    expect(judge(new RateLimitError("slow down", { retryAfter: "30s" }))).toEqual({
      final: false,
      retryAt: 40_000,
    });
  });
});

describe("planNextAttempt", () => {
  it("starts with attempt 1, then the next one at the recorded retryAt", () => {
    expect(planNextAttempt([], policy)).toEqual({ kind: "attempt", attempt: 1, notBefore: null });
    expect(planNextAttempt([attempt(1, 500)], policy)).toEqual({
      kind: "attempt",
      attempt: 2,
      notBefore: 500,
    });
  });

  it("gives up after a final attempt, or once maxAttempts are recorded", () => {
    expect(planNextAttempt([attempt(1, null)], policy)).toMatchObject({ kind: "give-up" });
    const three = [attempt(1, 1), attempt(2, 2), attempt(3, 3)];
    expect(planNextAttempt(three, policy)).toEqual({
      kind: "give-up",
      error: { name: "Error", message: "try 3" },
    });
  });
});
