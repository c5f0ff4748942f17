// The record builders: every field of a journal record comes from a named field, and the
// defaults are the ones a replay reads back.

import { describe, expect, it } from "vitest";
import { decode } from "../codec/codec.js";
import {
  attemptRecord,
  type CallPlace,
  intentRecord,
  intentWindow,
  outcomeRecord,
  workerLostAttempt,
} from "./records.js";

const call: CallPlace = {
  runId: "run_1",
  generation: 2,
  key: "open-pr#2",
  name: "open-pr",
  kind: "effect",
  seq: 4,
  issuedAfter: 3,
  issuedLate: false,
};

describe("outcomeRecord", () => {
  it("a value: the call's place, the encoded result, and defaults for spend and attempt", () => {
    expect(
      outcomeRecord(call, { startedAt: 10, completedAt: 20, result: "[1]", delivery: 5 }),
    ).toEqual({
      runId: "run_1",
      key: "open-pr#2",
      generation: 2,
      seq: 4,
      name: "open-pr",
      kind: "effect",
      outcome: "ok",
      result: "[1]",
      error: null,
      spend: {},
      attempt: 1,
      startedAt: 10,
      completedAt: 20,
      delivery: 5,
      issuedAfter: 3,
      issuedLate: false,
    });
  });

  it("an error: no result, and no reconciled flag even when one is given", () => {
    const error = { name: "FatalError", message: "no", code: "FATAL" };
    const rec = outcomeRecord(call, {
      startedAt: 10,
      completedAt: 20,
      result: "[1]",
      error,
      attempt: 3,
      delivery: 5,
      reconciled: true,
    });
    expect(rec).toMatchObject({ outcome: "error", result: null, error, attempt: 3 });
    expect("reconciled" in rec).toBe(false);
  });

  it("an effect's value says whether reconcile found it; other values say nothing", () => {
    const at = { startedAt: 1, completedAt: 2, result: "[1]", delivery: null };
    expect(outcomeRecord(call, { ...at, reconciled: false }).reconciled).toBe(false);
    expect(outcomeRecord(call, { ...at, reconciled: true }).reconciled).toBe(true);
    expect("reconciled" in outcomeRecord(call, at)).toBe(false);
  });
});

describe("attempt records", () => {
  it("a failed attempt keeps its error, spend and retryAt", () => {
    const error = { name: "Error", message: "503" };
    expect(
      attemptRecord(call, {
        attempt: 2,
        startedAt: 10,
        endedAt: 12,
        error,
        spend: { usd: 0.5 },
        retryAt: 1012,
      }),
    ).toEqual({
      runId: "run_1",
      key: "open-pr#2",
      generation: 2,
      attempt: 2,
      startedAt: 10,
      endedAt: 12,
      error,
      spend: { usd: 0.5 },
      retryAt: 1012,
    });
  });

  it("an attempt a crash cut short is a WORKER_LOST error, retryable at once, with no spend", () => {
    const rec = workerLostAttempt(call, { attempt: 1, at: 50 });
    expect(rec).toMatchObject({ attempt: 1, startedAt: 50, endedAt: 50, spend: {}, retryAt: 50 });
    expect(rec.error).toMatchObject({ name: "WorkerLostError", code: "WORKER_LOST" });
    expect(rec.error.message).toContain('step "open-pr#2"');
  });
});

describe("intentRecord", () => {
  it("stores the call's identity and its data encoded", () => {
    const rec = intentRecord(call, { idempotencyKey: "k" }, 7);
    expect(rec).toMatchObject({
      runId: "run_1",
      key: "open-pr#2",
      kind: "effect",
      name: "open-pr",
      createdAt: 7,
    });
    // An effect made inside a cascade: its window and place, which a replay demands it by.
    expect(decode(rec.data)).toEqual({ idempotencyKey: "k", issuedAfter: 3, seq: 4 });
    expect(intentWindow(rec)).toEqual({ issuedAfter: 3, seq: 4 });
  });

  it("a late call's intent says so and holds no window; a wait's holds none", () => {
    const late = intentRecord({ ...call, issuedLate: true }, { idempotencyKey: "k" }, 7);
    expect(decode(late.data)).toEqual({ idempotencyKey: "k", issuedLate: true });
    expect(intentWindow(late)).toBeUndefined();
    const wait = intentRecord({ ...call, kind: "wait" }, { deadline: 9 }, 7);
    expect(decode(wait.data)).toEqual({ deadline: 9 });
    expect(intentWindow(wait)).toBeUndefined();
  });

  it("an intent written before intents kept a window, or unreadable, holds none", () => {
    const older = { ...intentRecord(call, {}, 7), data: '[{"idempotencyKey":1},"k"]' };
    expect(intentWindow(older)).toBeUndefined();
    expect(intentWindow({ ...older, data: "not devalue" })).toBeUndefined();
  });
});
