// What the tests of plain payloads written to a store marked encrypted share
// (pg-plain-triggers, store-refuses-plain-payloads-findings, encryption-window-findings): a
// key, the records they write (a run, a step, an approval asked and answered, each holding
// the payload given), and a write's refusal.

import { randomBytes } from "node:crypto";
import { expect } from "vitest";
import { type EncryptionKey, EncryptionKeyMissingError } from "../../src/index.js";
import type { ErrorRecord, NewRun, StepRecord } from "../../src/store/store.js";

export const k1: EncryptionKey = { id: "k1", key: randomBytes(32).toString("base64") };

/** Run `id` of wf@1 with `input` (the codec's text), a child of `parentId` if given. */
export const newRun = (id: string, input: string, parentId?: string): NewRun => ({
  id,
  workflow: "wf",
  version: "1",
  input,
  budgetLimit: {},
  ...(parentId !== undefined && { parentId }),
});

/** Run `id` of wf@1 with input -1, created claimed (by worker "w", for ten minutes). */
export const claimedRun = (id: string): NewRun => ({
  ...newRun(id, "-1"),
  claimBy: { workerId: "w", leaseMs: 600_000 },
});

/** A completed step of `runId` at `key` (named so, call position 1) with `result`. */
export const stepWith = (runId: string, key: string, result: string): StepRecord => ({
  runId,
  key,
  generation: 0,
  seq: 1,
  name: key,
  kind: "step",
  outcome: "ok",
  result,
  error: null,
  spend: {},
  startedAt: 1,
  completedAt: 2,
  attempt: 1,
  delivery: 1,
  issuedAfter: 0,
  issuedLate: false,
});

/** A failed step of `runId` at `key` (named so, call position 1) with `error`. */
export const stepFailed = (runId: string, key: string, error: ErrorRecord): StepRecord => ({
  ...stepWith(runId, key, "-1"),
  outcome: "error",
  result: null,
  error,
});

/** Approval "a1" of `runId` asked with `request`, rejected at its (absent) deadline. */
export const approvalAsked = (runId: string, epoch: number, request: string) => ({
  runId,
  epoch,
  key: "a1",
  name: "a1",
  request,
  requestedAt: 1,
  deadline: null,
  onTimeout: "reject" as const,
});

/** Approval "a1" of `runId` approved by alice with the comment "SECRET-comment". */
export const approvalAnswer = (runId: string) => ({
  runId,
  key: "a1",
  decision: "approved" as const,
  answeredBy: "alice",
  comment: "SECRET-comment",
  answer: null,
  via: "cli",
  tokenId: null,
  event: { name: "cairn.approval:a1", payload: '{"decision":"approved"}' },
});

/** The EncryptionKeyMissingError `write` is refused with (a write that goes fails). */
export async function refusal(write: Promise<unknown>): Promise<EncryptionKeyMissingError> {
  const err = await write.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(EncryptionKeyMissingError);
  return err as EncryptionKeyMissingError;
}
