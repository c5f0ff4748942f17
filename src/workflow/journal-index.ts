// A run's journal as one execution reads it: which outcome each key holds (a failure that
// failed the run is set aside once the run is resumed), the order in which the recorded
// outcomes must be handed over again, the attempts that still count, and which recorded
// calls must have been made again by the end of each cascade.

import { addAmounts } from "../lib/amounts.js";
import type {
  Amounts,
  AttemptRecord,
  IntentRecord,
  Journal,
  PendingEvent,
  StepRecord,
} from "../store/store.js";
import { intentWindow } from "./records.js";

/** A call the journal says was made inside a cascade: its key, and its window and place. */
export type CascadeCall = Pick<StepRecord, "key" | "kind" | "name" | "seq" | "issuedAfter">;

export class JournalIndex {
  /** The outcome each key holds for this execution. */
  readonly outcomes: Map<string, StepRecord>;
  /** Those outcomes by the seq their call was made at (one of them where seqs repeat): a
   *  replay makes its calls in their order, so `recordOf` finds a call's record here
   *  without a lookup by a key made anew for the call (hashed, and compared by its text). */
  private readonly bySeq: Array<StepRecord | undefined> = [];
  /** Attempts of this generation, per key, in order: they count toward maxAttempts. */
  readonly attempts = new Map<string, AttemptRecord[]>();
  /** Spend of every attempt of every generation, per key (replayed with the key). */
  readonly attemptSpend = new Map<string, Amounts>();
  readonly intents = new Map<string, IntentRecord>();
  /** The unconsumed events, oldest first: whole, or heads (their payloads read when taken). */
  readonly events: PendingEvent[];
  /** Recorded outcomes that are handed over in the recorded order. */
  readonly orderedPositions: number[] = [];
  /** Keys whose recorded outcome is handed over as soon as its call is made again: records
   *  from before ordered replay, and those of a history that a resume replaced. */
  readonly freeKeys = new Set<string>();
  /** For each free key with a place in the history, the generation whose failure replaced
   *  it: from the next generation on it was handed over before that generation's own new
   *  outcomes whenever both were ready (delivery.ts). */
  readonly freeSince = new Map<string, number>();
  /** The generation of the record at each ordered position, but generation 0's (absent:
   *  delivery.ts reads it as older than any, and a free outcome's generation is never below 0). */
  readonly positionGenerations = new Map<number, number>();
  /** Calls made inside a cascade (their window is a fact of the program), by window: those
   *  recorded, and effects and children begun (an intent with its window). */
  readonly cascadeCalls: CascadeCall[];
  /** The first position a new outcome may take. */
  readonly firstNewPosition: number;
  /** Windows can be compared exactly: no outcome of this journal is outside the order. */
  readonly exactWindows: boolean;
  /** Keys of calls whose failure failed the run in a generation a resume left behind:
   *  they execute again. */
  readonly replacedFailures = new Set<string>();
  /** Keys of calls begun (an intent or an attempt) that hold no outcome. */
  readonly unfinished: string[];

  constructor(
    journal: Journal,
    generation: number,
    failedCalls: ReadonlyArray<{ key: string; generation: number }>,
  ) {
    const byKey = new Map<string, StepRecord>();
    let maxPosition = -1;
    for (const s of journal.steps) {
      if (s.delivery !== null) maxPosition = Math.max(maxPosition, s.delivery);
      const held = byKey.get(s.key);
      if (!held || s.generation > held.generation) byKey.set(s.key, s);
    }
    this.firstNewPosition = maxPosition + 1;
    // A failure that failed the run, in a generation a resume has since left behind: the
    // call executes again, and what was called after its hand-over belongs to the history
    // the resume replaced, so it is handed over when called, outside the order.
    const replaced: Array<{ generation: number; after: number; calledAt: number }> = [];
    // Every such failure counts, also one whose call has since been executed again (the
    // key then holds the later generation's record): what followed it stays replaced.
    // A failure names the generation whose execution it failed; the error it threw may be a
    // record of an older generation, replayed then (a caught failure rethrown): the record
    // the key held in that generation is the one that failed the run.
    const failedIn = new Map<StepRecord, number>();
    // Only failures of an earlier generation count: a run resumed after none (nearly every
    // resume: a crash, an event, a wake-up) builds nothing more of its journal here.
    const earlier = failedCalls.filter((f) => f.generation < generation);
    if (earlier.length > 0) {
      // Records by key: a Promise.any over thousands of calls names each of them as failing
      // the run, and a scan of the journal per name was quadratic.
      const recordsOf = new Map<string, StepRecord[]>();
      for (const s of journal.steps) {
        const list = recordsOf.get(s.key);
        if (list) list.push(s);
        else recordsOf.set(s.key, [s]);
      }
      for (const f of earlier) {
        let held: StepRecord | undefined;
        for (const s of recordsOf.get(f.key) ?? []) {
          if (s.generation > f.generation) continue;
          if (!held || s.generation > held.generation) held = s;
        }
        if (held?.outcome === "error") {
          failedIn.set(held, Math.max(failedIn.get(held) ?? -1, f.generation));
        }
      }
    }
    for (const rec of failedIn.size === 0 ? [] : journal.steps) {
      const failedGeneration = failedIn.get(rec);
      if (failedGeneration === undefined) continue;
      // Unless the call has since been executed again (a later generation's record): then
      // it is replayed, not executed.
      if (byKey.get(rec.key) === rec) {
        byKey.delete(rec.key);
        this.replacedFailures.add(rec.key);
      }
      replaced.push({
        generation: failedGeneration,
        after: rec.delivery ?? -1,
        calledAt: rec.issuedAfter ?? -1,
      });
    }
    // A call made before the failing call was (a race's loser that finished after the
    // failure) keeps its place. Windows are counts of outcomes handed over, not positions
    // (a replaced failure leaves a gap in those), so the failing call's own window is the
    // measure: a call made in it or later may have followed the failure, and goes free.
    // A value drawn (ctx.now/random/uuid: no delivery) after the failing call was made, in a
    // later window, may have been drawn after its failure was handed over (an error
    // handler's ctx.uuid()): the same.
    const isFree = (s: StepRecord) =>
      s.issuedAfter === null ||
      (replaced.length > 0 &&
        replaced.some(
          (r) =>
            s.generation <= r.generation &&
            (s.delivery === null
              ? s.issuedAfter! > r.calledAt
              : s.delivery > r.after && s.issuedAfter! >= r.calledAt),
        ));
    const cascade: CascadeCall[] = [];
    // The outcomes are those left by key (a replaced failure's key taken out above).
    this.outcomes = byKey;
    for (const [key, rec] of byKey) {
      if (Number.isSafeInteger(rec.seq) && rec.seq >= 0) this.bySeq[rec.seq] = rec;
      if (isFree(rec)) {
        this.freeKeys.add(key);
        const by = replaced.filter(
          (r) =>
            rec.issuedAfter !== null &&
            rec.generation <= r.generation &&
            (rec.delivery ?? -1) > r.after &&
            rec.issuedAfter >= r.calledAt,
        );
        if (by.length > 0) this.freeSince.set(key, Math.min(...by.map((r) => r.generation)));
        // A fork's copy of a record its source handed over outside the order (fork.ts): its
        // generation is the one whose failure put it there.
        else if (rec.issuedAfter === null && rec.delivery !== null) {
          this.freeSince.set(key, rec.generation);
        }
        continue;
      }
      if (rec.delivery !== null) {
        this.orderedPositions.push(rec.delivery);
        // Generation 0 is left out (read as the oldest): nearly every record of a journal.
        if (rec.generation !== 0) this.positionGenerations.set(rec.delivery, rec.generation);
      }
      if (!rec.issuedLate) cascade.push(rec);
    }
    this.exactWindows = this.freeKeys.size === 0;
    // An effect or a child call begun inside a cascade and not finished (its intent, with
    // its window) is demanded by that cascade's end as a record's call is: a later call of
    // its name must not come first and take what it began (an effect reconciled to its
    // value). Not where a resume replaced a failure: the window may be the replaced
    // history's. Intents written before they kept a window are judged as before.
    if (replaced.length === 0) {
      for (const i of journal.intents) {
        if (byKey.has(i.key) || (i.kind !== "effect" && i.kind !== "child")) continue;
        const w = intentWindow(i);
        if (w === undefined) continue;
        cascade.push({ key: i.key, kind: i.kind, name: i.name, ...w });
      }
    }
    this.cascadeCalls = cascade.sort((a, b) => (a.issuedAfter ?? 0) - (b.issuedAfter ?? 0));
    // Spend is summed per key by generation, then attempt: the order the execution that
    // recorded them summed it in (Context.countSpend), whatever order the store lists them in.
    const ordered = [...journal.attempts].sort(
      (x, y) => x.generation - y.generation || x.attempt - y.attempt,
    );
    for (const a of ordered) {
      const spend = this.attemptSpend.get(a.key) ?? {};
      addAmounts(spend, a.spend);
      this.attemptSpend.set(a.key, spend);
    }
    for (const a of journal.attempts) {
      if (a.generation !== generation) continue;
      const list = this.attempts.get(a.key) ?? [];
      list.push(a);
      this.attempts.set(a.key, list);
    }
    for (const list of this.attempts.values()) list.sort((x, y) => x.attempt - y.attempt);
    for (const i of journal.intents) this.intents.set(i.key, i);
    this.events = [...journal.events, ...(journal.eventHeads ?? [])].sort((a, b) => a.seq - b.seq);
    const begun = [...journal.intents.map((i) => i.key), ...journal.attempts.map((a) => a.key)];
    this.unfinished = [...new Set(begun)].filter((k) => !this.outcomes.has(k));
  }

  isFree(key: string): boolean {
    return this.freeKeys.has(key);
  }

  /** The outcome `key` holds (outcomes.get), for a call made at `seq`. */
  recordOf(key: string, seq: number): StepRecord | undefined {
    const guess = this.bySeq[seq];
    // The record of that seq is the one when it is this key's outcome (its text the same).
    if (guess !== undefined && guess.key === key) return guess;
    return this.outcomes.get(key);
  }

  /** The index of `journal`: for a journal that holds nothing (a run created now), one
   *  index shared by every execution, whatever its generation (nothing in it depends on
   *  it): seven empty maps and sets a run were a tenth of a 0-step run's heap. Its maps,
   *  sets and arrays refuse changes, as nothing may change an index. */
  static of(
    journal: Journal,
    generation: number,
    failedCalls: ReadonlyArray<{ key: string; generation: number }>,
  ): JournalIndex {
    const empty =
      journal.steps.length === 0 &&
      journal.attempts.length === 0 &&
      journal.intents.length === 0 &&
      journal.events.length === 0 &&
      (journal.eventHeads === undefined || journal.eventHeads.length === 0);
    if (!empty) return new JournalIndex(journal, generation, failedCalls);
    emptyIndex ??= sealedEmptyIndex();
    return emptyIndex;
  }
}

let emptyIndex: JournalIndex | undefined;

function sealedEmptyIndex(): JournalIndex {
  const index = new JournalIndex({ steps: [], attempts: [], intents: [], events: [] }, 0, []);
  const open = index as { -readonly [K in keyof JournalIndex]: JournalIndex[K] };
  open.outcomes = new SealedMap();
  open.attempts = new SealedMap();
  open.attemptSpend = new SealedMap();
  open.intents = new SealedMap();
  open.freeSince = new SealedMap();
  open.positionGenerations = new SealedMap();
  open.freeKeys = new SealedSet();
  open.replacedFailures = new SealedSet();
  Object.freeze(index.events);
  Object.freeze(index.orderedPositions);
  Object.freeze(index.cascadeCalls);
  Object.freeze(index.unfinished);
  Object.freeze(index);
  return index;
}

function sealed(): Error {
  return new Error("cairn: internal: the shared index of an empty journal was changed");
}

/** A map of the shared empty index (JournalIndex.of): changing it throws. */
class SealedMap<K, V> extends Map<K, V> {
  override set(): this {
    throw sealed();
  }
  override delete(): boolean {
    throw sealed();
  }
  override clear(): void {
    throw sealed();
  }
}

/** A set of the shared empty index (JournalIndex.of): changing it throws. */
class SealedSet<T> extends Set<T> {
  override add(): this {
    throw sealed();
  }
  override delete(): boolean {
    throw sealed();
  }
  override clear(): void {
    throw sealed();
  }
}
