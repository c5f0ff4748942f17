import { describe, expect, it } from "vitest";
import { checkEngineOptions } from "./validate.js";

describe("checkEngineOptions", () => {
  it("refuses a lease under 1 ms, which PostgreSQL's whole milliseconds would round to none", () => {
    for (const leaseMs of [0.4, 0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => checkEngineOptions({ leaseMs })).toThrow(
        /createEngine\(\): leaseMs must be a finite number of milliseconds >= 1/,
      );
    }
    for (const leaseMs of [1, 1.5, 30_000])
      expect(() => checkEngineOptions({ leaseMs })).not.toThrow();
  });

  it("keeps the other time spans' rule: > 0, or >= 0 where 0 means no wait", () => {
    expect(() => checkEngineOptions({ heartbeatMs: 0 })).toThrow(
      /heartbeatMs must be a finite number of milliseconds > 0/,
    );
    expect(() => checkEngineOptions({ heartbeatMs: 0.5 })).not.toThrow();
    expect(() => checkEngineOptions({ closeGraceMs: 0 })).not.toThrow();
  });
});
