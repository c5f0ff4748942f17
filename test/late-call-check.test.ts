// The reused-name check of late calls (src/workflow/late-call-check.ts), through its narrow
// interface to the Context: which reuse of a name it refuses, and the windows and cascade
// points it judges by.

import { describe, expect, it } from "vitest";
import { NonDeterminismError } from "../src/errors.js";
import type { StepRecord } from "../src/store/store.js";
import type { CallNode } from "../src/workflow/call-scope.js";
import { LateCallCheck, type LateCallHost } from "../src/workflow/late-call-check.js";

function fakeRun(o: { inCascade: boolean; released?: number; cascadePosition?: number }) {
  let seq = 5;
  const run = {
    runId: "r",
    delivery: {
      inCascade: o.inCascade,
      released: o.released ?? 2,
      cascadePosition: o.cascadePosition,
    },
    journal: { exactWindows: true },
    seq: () => seq,
    owner: {},
  } as unknown as LateCallHost;
  return { run, setSeq: (n: number) => (seq = n) };
}

function node(key: string, o: Partial<CallNode> = {}): CallNode {
  return { owner: {}, key, parent: undefined, depth: 1, late: true, seq: 0, fixed: false, ...o };
}

const call = { kind: "step" as const, name: "fetch", record: undefined, recordedWindow: undefined };

describe("late-call check", () => {
  it("refuses a late call reusing a late call's name from a concurrent branch", () => {
    const check = new LateCallCheck(fakeRun({ inCascade: false }).run);
    const err = check.reusedName(node("fetch"), { ...call, late: true, parent: undefined });
    expect(err).toBeInstanceOf(NonDeterminismError);
    expect(err?.message).toContain('the one keyed "fetch"');
    expect(err?.message).toContain("e.g. `fetch:");
  });

  it("lets through a call that continues from the earlier one (its descendant)", () => {
    const check = new LateCallCheck(fakeRun({ inCascade: false }).run);
    const prev = node("fetch");
    const child = node("other", { parent: prev, depth: 2 });
    expect(check.reusedName(prev, { ...call, late: true, parent: child })).toBeUndefined();
  });

  it("judges no pair of calls both made inside cascades", () => {
    const check = new LateCallCheck(fakeRun({ inCascade: true }).run);
    const prev = node("fetch", { late: false });
    expect(check.reusedName(prev, { ...call, late: false, parent: undefined })).toBeUndefined();
  });

  it("a call made in a cascade after prev's outcome was handed over comes after it", () => {
    const check = new LateCallCheck(fakeRun({ inCascade: true, cascadePosition: 4 }).run);
    // Not handed over yet: timing alone orders the two.
    expect(
      check.reusedName(node("fetch"), { ...call, late: false, parent: undefined }),
    ).toBeInstanceOf(NonDeterminismError);
    // Handed over at position 4, the point of the cascade running now.
    check.noteHandedOver("fetch");
    expect(check.reusedName(node("fetch"), { ...call, late: false, parent: undefined })).toBe(
      undefined,
    );
  });

  it("a record's window counts only when made inside a cascade, in the window of now", () => {
    const check = new LateCallCheck(fakeRun({ inCascade: false, released: 2 }).run);
    const rec = (issuedAfter: number | null, issuedLate: boolean) =>
      ({ issuedAfter, issuedLate }) as unknown as StepRecord;
    expect(check.recordedWindowOf(rec(2, false))).toBe(2);
    expect(check.recordedWindowOf(rec(1, false))).toBeUndefined();
    expect(check.recordedWindowOf(rec(2, true))).toBeUndefined();
    expect(check.recordedWindowOf(undefined)).toBeUndefined();
  });

  it("the cascade point is one object while the call count and position hold", () => {
    const f = fakeRun({ inCascade: true, cascadePosition: 1 });
    const check = new LateCallCheck(f.run);
    const a = check.cascadePoint();
    expect(check.cascadePoint()).toBe(a);
    f.setSeq(6);
    const b = check.cascadePoint();
    expect(b).not.toBe(a);
    expect(b).toEqual({ seq: 6, position: 1 });
    expect(new LateCallCheck(fakeRun({ inCascade: false }).run).cascadePoint()).toBeUndefined();
  });
});
