// What the call kinds that live beside the replay cursor (waits.ts, approval-call.ts,
// child-call.ts) use of it: the call preamble, recording an outcome in its turn, blocking a
// branch, the run's events, and counting active work. Context implements it; each call
// kind holds it and nothing else, so what a call kind may do to the run's state is this list.

import type { StoredTexts } from "../codec/codec.js";
import type {
  Amounts,
  AttemptRecord,
  ErrorRecord,
  PendingEvent,
  RunWrite,
  StepKind,
  StepRecord,
} from "../store/store.js";
import type { CallNode } from "./call-scope.js";
import type { ContextHost, Outcome } from "./context.js";
import type { WorkflowContext } from "./context-types.js";
import type { JournalIndex } from "./journal-index.js";
import type { CallPlace } from "./records.js";

/** One call this execution made: where it stands, and its recorded outcome if any. */
export interface Call extends CallPlace {
  node: CallNode;
  record: StepRecord | undefined;
  /** Made late, or in a cascade that may continue work of the workflow's own (a timer, a
   *  file): this execution's window for it is timing's, so it is not compared with a
   *  record's. Not recorded: the record says only whether the call was late. */
  looseWindow: boolean;
}

/** What a call is made as: its kind (what its record says), or "sleepUntil": a call of kind
 *  "sleep" made with ctx.sleepUntil, whose refusals name the method the workflow called. */
export type CallMethod = StepKind | "sleepUntil";

/** What a blocked branch waits for: a time, an event of a name, or room in the budget. */
export interface BlockOn {
  key: string;
  wakeAt: number | null;
  event?: string;
  budget?: string;
  /** A retry backoff: the attempt that starts at `wakeAt`. */
  retryAttempt?: number;
}

export type CommitWrite = Omit<RunWrite, "runId" | "epoch">;

export interface CallCore {
  readonly host: ContextHost;
  /** The workflow's ctx. */
  readonly api: WorkflowContext;
  readonly journal: JournalIndex;
  /** The texts values were stored as (copyAsStored). */
  readonly storedTexts: StoredTexts;
  /** Child creates not yet landed: the run is not released until they have. */
  readonly childStarts: Set<Promise<void>>;
  /** Every call: its preamble in the caller's scope, then `execute` (or its recorded
   *  outcome, replayed); `match` checks what the call was given against its journal. */
  makeCall<T>(
    name: string,
    kind: CallMethod,
    execute: (call: Call) => Promise<T>,
    match?: (call: Call) => void,
  ): Promise<T>;
  /** Every new call waits here before it executes anything: what to await, or undefined
   *  when there is nothing to wait for (awaiting undefined takes the tick awaiting an
   *  async function that awaited nothing took). */
  beforeExecute(call: Call): Promise<void> | undefined;
  /** Writes records fenced by the run's epoch (not an outcome: see record*). */
  commit(write: CommitWrite): Promise<void>;
  /** Counts `p` as active work; a store failure halts the run and `p` never settles. */
  active0<T>(p: Promise<T>): Promise<T>;
  /** Blocks this branch until woken in process; when all are blocked, the run suspends. */
  block(on: BlockOn): Promise<void>;
  /** Whether an event of that name is pending for this run (it is not taken); a promise
   *  when the run's events of that name must be read first. */
  hasEvent(name: string): boolean | Promise<boolean>;
  /** The oldest event of that name (past `deadline`, only one stored by then); a promise
   *  when the run's events of that name must be read first, or a take called before waits
   *  for such a read (takes go in the order called). A store failure halts the run, and
   *  the promise never settles. */
  takeEvent(
    name: string,
    deadline?: number | null,
  ): PendingEvent | undefined | Promise<PendingEvent | undefined>;
  /** The payload of an event takeEvent handed out (a head's read from the store, with those
   *  of the next pending events of its name, in one read), once the events taken before it
   *  have theirs: takes go on in the order taken. A store failure halts the run, and the
   *  promise never settles. */
  eventPayload(ev: PendingEvent): Promise<string>;
  /** Reads the run's events again; `settled` for the last look after a deadline. */
  reloadEvents(settled?: boolean): Promise<void>;
  /** How far the store's clock is still before `deadline`. */
  storeBehind(deadline: number): Promise<number>;
  /** Records a call's value (encoded here) and hands it over in its turn. */
  recordValue<T>(
    call: Call,
    value: T,
    startedAt: number,
    consume?: RunWrite["consume"],
    payload?: { value: unknown },
  ): Promise<T>;
  /** Records a call's value already encoded and hands over its decoded copy in its turn. */
  recordEncoded<T>(
    call: Call,
    encoded: string,
    startedAt: number,
    consume?: RunWrite["consume"],
    extra?: { spend?: Amounts; attempt?: number; reconciled?: boolean },
  ): Promise<T>;
  /** Records a call's error and rejects with it in its turn. */
  recordError<T>(
    call: Call,
    error: ErrorRecord,
    startedAt: number,
    o?: { attempts?: AttemptRecord[]; attempt?: number; consume?: RunWrite["consume"] },
  ): Promise<T>;
  /** Fails the run (NonDeterminismError and the like); nothing more is written. */
  fail(error: Error): void;
  /** Ends this execution as `o` says (lease lost, handed back, ...). */
  halt(o: Outcome): void;
  /** What to do about a run that no longer matches its journal. */
  remedy(): string;
  /** Ends this execution writing nothing more (a lease found stale). */
  stopWithoutWriting(): void;
}

/** A promise that never settles: a call of an execution that has stopped. */
export function never<T>(): Promise<T> {
  return new Promise<T>(() => {});
}

/** Thrown synchronously into a workflow by a ctx call made after the execution halted.
 *  Internal control flow: never catch this. */
export class HaltedSignal extends Error {
  constructor() {
    super("cairn: this execution has stopped (never catch this)");
    this.name = "HaltedSignal";
    Object.defineProperty(this, Symbol.for("cairn.halted"), { value: true });
  }
}
