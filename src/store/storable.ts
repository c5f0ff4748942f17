// What a journal write must be for every backend to store it exactly. Both backends run
// this check on each write of a group commit before touching their database, and answer
// a write that fails it with the outcome "unstorable": so a bad record fails only its own
// write, never the others of its batch, and in the same way on SQLite and PostgreSQL.
//
// Text columns refuse NUL (PostgreSQL) or silently turn a lone surrogate into U+FFFD (both),
// jsonb amounts refuse both, and numbers must be finite integers a bigint holds exactly.
// Error records need no check: they are stored as JSON text (error-json.ts), which escapes
// anything. Values the engine writes are codec text, which is always storable (codec.ts).

import { unstorableText } from "../lib/text.js";
import type { Amounts, RunWrite, WriteOutcome } from "./store.js";

export interface Unstorable {
  /** The key of the record that cannot be stored. */
  key: string;
  /** Which field, and why; never the value itself. */
  message: string;
}

/** A group commit with the writes no backend could store answered "unstorable" (each fails
 *  alone, never reaching the database) and the others handed to `store`, whose outcomes
 *  are merged back in the writes' order. Nearly every batch has none to refuse: it goes to
 *  `store` as it is, with no promise of this function's own (one per commit adds up). */
export function refuseUnstorable(
  writes: RunWrite[],
  store: (storable: RunWrite[]) => Promise<WriteOutcome[]>,
): Promise<WriteOutcome[]> {
  try {
    let refused: Array<WriteOutcome | undefined> | undefined;
    writes.forEach((w, i) => {
      const bad = findUnstorable(w);
      if (!bad) return;
      refused ??= new Array<WriteOutcome | undefined>(writes.length).fill(undefined);
      refused[i] = { ok: false, reason: "unstorable", key: bad.key, message: bad.message };
    });
    if (refused === undefined) return store(writes);
    const answers = refused;
    return store(writes.filter((_, i) => answers[i] === undefined)).then((stored) => {
      let next = 0;
      return answers.map((o) => o ?? (stored[next++] as WriteOutcome));
    });
  } catch (err) {
    // As the async function this was: a throw is a rejection, never a synchronous throw.
    return Promise.reject(err);
  }
}

/** The first record of `w` that no backend could store exactly, or undefined. */
export function findUnstorable(w: RunWrite): Unstorable | undefined {
  const firstKey =
    w.steps?.[0]?.key ?? w.attempts?.[0]?.key ?? w.intents?.[0]?.key ?? w.consume?.[0]?.key ?? "";
  const runId = unstorableText(w.runId);
  if (runId) return { key: firstKey, message: `the run id ${runId}` };
  // Field by field, with no object per record: this runs for every record of every commit.
  for (const s of w.steps ?? []) {
    const bad =
      text("step", s.key, "key", s.key) ??
      text("step", s.key, "name", s.name) ??
      text("step", s.key, "kind", s.kind) ??
      text("step", s.key, "outcome", s.outcome) ??
      (s.result === null ? undefined : text("step", s.key, "result", s.result)) ??
      whole("step", s.key, "seq", s.seq) ??
      whole("step", s.key, "attempt", s.attempt) ??
      whole("step", s.key, "startedAt", s.startedAt) ??
      whole("step", s.key, "completedAt", s.completedAt) ??
      amounts("step", s.key, s.spend);
    if (bad) return bad;
  }
  for (const a of w.attempts ?? []) {
    const bad =
      text("attempt", a.key, "key", a.key) ??
      whole("attempt", a.key, "attempt", a.attempt) ??
      whole("attempt", a.key, "generation", a.generation) ??
      whole("attempt", a.key, "startedAt", a.startedAt) ??
      whole("attempt", a.key, "endedAt", a.endedAt) ??
      (a.retryAt === null ? undefined : whole("attempt", a.key, "retryAt", a.retryAt)) ??
      amounts("attempt", a.key, a.spend);
    if (bad) return bad;
  }
  for (const i of w.intents ?? []) {
    const bad =
      text("intent", i.key, "key", i.key) ??
      text("intent", i.key, "kind", i.kind) ??
      text("intent", i.key, "name", i.name) ??
      text("intent", i.key, "data", i.data) ??
      whole("intent", i.key, "createdAt", i.createdAt);
    if (bad) return bad;
  }
  for (const c of w.consume ?? []) {
    const bad =
      text("consume", c.key, "key", c.key) ?? whole("consume", c.key, "eventSeq", c.eventSeq);
    if (bad) return bad;
  }
  return undefined;
}

function text(kind: string, key: string, field: string, value: unknown): Unstorable | undefined {
  if (typeof value !== "string") {
    return { key, message: `${label(kind, key)}: ${field} is not a string` };
  }
  const why = unstorableText(value);
  return why ? { key, message: `${label(kind, key)}: ${field} ${why}` } : undefined;
}

function whole(kind: string, key: string, field: string, value: number): Unstorable | undefined {
  return Number.isSafeInteger(Math.round(value))
    ? undefined
    : { key, message: `${label(kind, key)}: ${field} is not a finite whole number` };
}

function amounts(kind: string, key: string, spend: Amounts): Unstorable | undefined {
  for (const name in spend ?? {}) {
    if (!Object.hasOwn(spend, name)) continue;
    const value = spend[name];
    const why = unstorableText(name);
    if (why) return { key, message: `${label(kind, key)}: a spend name ${why}` };
    if (typeof value !== "number" || !Number.isFinite(value)) {
      return { key, message: `${label(kind, key)}: spend "${name}" is not a finite number` };
    }
  }
  return undefined;
}

/** `step "key"`, the key quoted as JSON so that even an unstorable one reads cleanly. */
function label(kind: string, key: string): string {
  return `${kind} ${JSON.stringify(key)}`;
}
