// The journal records an execution writes, built from named fields.

import { decode, encode } from "../codec/codec.js";
import type {
  Amounts,
  AttemptRecord,
  ErrorRecord,
  IntentRecord,
  StepKind,
  StepRecord,
} from "../store/store.js";

/** Where a call stands in its run: identity, and its place in the call and delivery order. */
export interface CallPlace {
  runId: string;
  generation: number;
  key: string;
  name: string;
  kind: StepKind;
  seq: number;
  issuedAfter: number;
  issuedLate: boolean;
}

export function outcomeRecord(
  call: CallPlace,
  o: {
    startedAt: number;
    completedAt: number;
    /** Encoded value (outcome ok) or the error the workflow sees (outcome error). */
    result?: string;
    error?: ErrorRecord;
    spend?: Amounts;
    attempt?: number;
    /** null for calls that deliver nothing (ctx.now/random/uuid). */
    delivery: number | null;
    /** An effect's value: found by reconcile (true) or made by perform (false). */
    reconciled?: boolean;
  },
): StepRecord {
  const rec: StepRecord = {
    runId: call.runId,
    key: call.key,
    generation: call.generation,
    seq: call.seq,
    name: call.name,
    kind: call.kind,
    outcome: o.error ? "error" : "ok",
    result: o.error ? null : (o.result ?? null),
    error: o.error ?? null,
    spend: o.spend ?? {},
    attempt: o.attempt ?? 1,
    startedAt: o.startedAt,
    completedAt: o.completedAt,
    delivery: o.delivery,
    issuedAfter: call.issuedAfter,
    issuedLate: call.issuedLate,
  };
  if (o.reconciled !== undefined && !o.error) rec.reconciled = o.reconciled;
  return rec;
}

export function attemptRecord(
  call: CallPlace,
  a: {
    attempt: number;
    startedAt: number;
    endedAt: number;
    error: ErrorRecord;
    spend: Amounts;
    retryAt: number | null;
  },
): AttemptRecord {
  return {
    runId: call.runId,
    key: call.key,
    generation: call.generation,
    attempt: a.attempt,
    startedAt: a.startedAt,
    endedAt: a.endedAt,
    error: a.error,
    spend: a.spend,
    retryAt: a.retryAt,
  };
}

/** The attempt a crash cut short: charged when the call is made again after the worker
 *  executing it stopped without releasing the run (a crash, a kill, a lost lease). It may be
 *  retried at once, unless the attempts it brings to maxAttempts say otherwise. */
export function workerLostAttempt(
  call: CallPlace,
  a: { attempt: number; at: number },
): AttemptRecord {
  return attemptRecord(call, {
    attempt: a.attempt,
    startedAt: a.at,
    endedAt: a.at,
    error: {
      name: "WorkerLostError",
      code: "WORKER_LOST",
      message: `The worker executing step "${call.key}" stopped (crash, kill or lost lease) before recording an outcome`,
    },
    spend: {},
    retryAt: a.at,
  });
}

/** An intent's data says whether its call was made late, as a record's `issuedLate` does:
 *  the end of a replay gives a begun call the first run made late its time to be made again
 *  (context.ts, begunNotCalledAgain). Absent (older intents, calls made in a cascade): not.
 *  An effect or a child call made inside a cascade writes its window and place instead: a
 *  replay demands it by that cascade's end, as it does a record's call
 *  (JournalIndex.cascadeCalls), so a later call of its name cannot come first and take what
 *  it began (an effect reconciled to its value, its child). */
export function intentRecord(call: CallPlace, data: object, createdAt: number): IntentRecord {
  const windowed = call.kind === "effect" || call.kind === "child";
  return {
    runId: call.runId,
    key: call.key,
    kind: call.kind,
    name: call.name,
    data: encode(
      call.issuedLate
        ? { ...data, issuedLate: true }
        : windowed
          ? { ...data, issuedAfter: call.issuedAfter, seq: call.seq }
          : data,
    ),
    createdAt,
  };
}

/** Whether the call that wrote `intent` was made late (see intentRecord). Data that cannot
 *  be read (a corrupted record) says not: the begun call is judged at once, as before intents
 *  said so. Thrown, the read failed the end of the run itself, which then never ended. */
export function intentIssuedLate(intent: IntentRecord): boolean {
  try {
    return decode<{ issuedLate?: unknown } | null>(intent.data)?.issuedLate === true;
  } catch {
    return false;
  }
}

/** The window and place of the call that wrote `intent` inside a cascade (see intentRecord);
 *  undefined when it was made late, or its intent was written before intents kept them (or
 *  cannot be read): such a begun call is judged as before, at the end of the run. */
export function intentWindow(
  intent: IntentRecord,
): { issuedAfter: number; seq: number } | undefined {
  try {
    const d = decode<{ issuedAfter?: unknown; seq?: unknown; issuedLate?: unknown } | null>(
      intent.data,
    );
    if (d?.issuedLate === true) return undefined;
    if (typeof d?.issuedAfter !== "number" || typeof d.seq !== "number") return undefined;
    return { issuedAfter: d.issuedAfter, seq: d.seq };
  } catch {
    return undefined;
  }
}
