// What inspection returns (getRun, listRuns, getSteps, listEvents, listWorkers): decoded
// values and Dates, never stored text the codec cannot decode or a key does not open. A
// step's whole history (every attempt with its error and spend) is built by step-views.ts.

import { decode } from "../codec/codec.js";
import { encryptedTextKeyId } from "../codec/encryption.js";
import { fromStoredText } from "../codec/stored-text.js";
import { quoteGiven } from "../lib/text.js";
import type {
  Amounts,
  ErrorRecord,
  EventRecord,
  RunRecord,
  RunStatus,
  StepKind,
  WorkerRecord,
} from "../store/store.js";
import { workerLive } from "./dead-workers.js";

export interface RunView {
  id: string;
  workflow: string;
  version: string;
  status: RunStatus;
  reason?: string;
  /** Its text shown as a placeholder (`[encrypted with key "k1"]`), which a person's own
   *  reason may read as too: present only for such text. */
  withheld?: { reason?: Withheld };
  /** Why a paused run is paused: over its budget, or no live worker has its version. */
  pausedFor?: "budget" | "version";
  input: unknown;
  output?: unknown;
  error?: { name: string; code?: string; message: string; withheld?: { message?: Withheld } };
  /** `limit`: what the run is held to (see budgetView in inspection.ts); `defaultsUnknown`:
   *  the engine that made this view does not have the workflow's code, so a name without a
   *  limit here may have one by the workflow's default budget. */
  budget: { limit: Amounts; spent: Amounts; defaultsUnknown?: true };
  parentId?: string;
  wakeAt?: Date;
  waitingFor?: string[];
  /** For a running run: the worker executing it, and when its lease ends unless renewed. */
  leaseOwner?: string;
  leaseUntil?: Date;
  /** For a running run: a cancel was requested (engine.cancel), and the worker executing it
   *  (leaseOwner) has not stopped it yet. `reason` is the cancel's reason; the run ends
   *  canceled with it unless it completes or fails first. */
  cancelRequested?: true;
  /** For a run not running, completed or canceled (one that may be claimed again), released
   *  while a step body of it still ran in its worker: that worker, and until when no other
   *  worker claims the run (renewed while the body runs, ended when it ends). A `heldUntil`
   *  past: the hold has run out. */
  heldBy?: string;
  heldUntil?: Date;
  createdAt: Date;
  updatedAt: Date;
}

export interface AttemptView {
  attempt: number;
  startedAt: Date;
  endedAt?: Date;
  error?: ShownError;
  spend: Amounts;
  /** When the next attempt may start (failed attempts that will be retried). */
  retryAt?: Date;
}

export type StepStatus = "completed" | "failed" | "retrying" | "started" | "waiting";

export interface StepView {
  key: string;
  name: string;
  kind: StepKind;
  status: StepStatus;
  result?: unknown;
  error?: ShownError;
  attempts: AttemptView[];
  /** Total spend of all attempts. */
  spend: Amounts;
  startedAt: Date;
  completedAt?: Date;
  /** When the call was begun durably (an effect's intent, a sleep or wait reached, a child
   *  started), if it records one; with completedAt it is the call's intent/completion history. */
  intentAt?: Date;
  /** A completed effect: its value was made by `perform`, or found by `reconcile` (after a
   *  crash or a failed attempt, the effect had happened). Absent on records from before
   *  cairn recorded it. */
  effect?: "performed" | "reconciled";
}

/** Stands in for a stored value the codec cannot decode (a damaged row, a format this
 *  cairn does not know): inspection shows this placeholder, never the stored text. */
export class UndecodableValue {
  readonly undecodable = true;
  toJSON(): string {
    return "[undecodable value]";
  }
  toString(): string {
    return this.toJSON();
  }
}

const UNDECODABLE = Object.freeze(new UndecodableValue());

/** Stands in for a stored value encrypted with a key this process was not given (an
 *  encrypted store read without its keys): inspection says which key, never the text. */
export class EncryptedValue {
  readonly encrypted = true;
  constructor(readonly keyId: string) {}
  toJSON(): string {
    return encryptedText(this.keyId);
  }
  toString(): string {
    return this.toJSON();
  }
}

/** Why a value inspection shows is withheld, as the JSON of the CLI and the HTTP API says it
 *  (a record's `withheld` field): its placeholder text alone could be a user's string. */
export type Withheld = { reason: "encrypted"; keyId: string } | { reason: "undecodable" };

export function withheldOf(value: unknown): Withheld | undefined {
  if (value instanceof EncryptedValue) return { reason: "encrypted", keyId: value.keyId };
  if (value instanceof UndecodableValue) return { reason: "undecodable" };
  return undefined;
}

function encryptedText(keyId: string): string {
  return `[encrypted with key "${keyId}"]`;
}

/** Stored text as shown: what it holds (codec/stored-text.ts), or what key it is encrypted
 *  with. */
export function shownText(text: string): string {
  let keyId: string | undefined;
  try {
    keyId = encryptedTextKeyId(text);
  } catch {
    return UNDECODABLE.toJSON(); // an envelope whose header is damaged
  }
  return keyId === undefined ? fromStoredText(text) : encryptedText(keyId);
}

/** `{ field: why }` for each of `values` that is withheld (an EncryptedValue or an
 *  UndecodableValue); undefined when none is. The CLI's --json and the HTTP API set it as
 *  a record's `withheld` field, beside what a view already names there. */
export function withheldFields(
  values: Record<string, unknown>,
): Record<string, Withheld> | undefined {
  const out: Record<string, Withheld> = {};
  for (const [field, value] of Object.entries(values)) {
    const why = withheldOf(value);
    if (why) out[field] = why;
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

/** Why stored text (an error's message or stack, a cancel reason, an approval comment) is
 *  shown as a placeholder by shownText; undefined when it is shown as itself. */
export function withheldText(text: string): Withheld | undefined {
  try {
    const keyId = encryptedTextKeyId(text);
    return keyId === undefined ? undefined : { reason: "encrypted", keyId };
  } catch {
    return { reason: "undecodable" };
  }
}

/** An error as inspection shows it; `withheld` names its text shown as a placeholder. */
export type ShownError = ErrorRecord & { withheld?: { message?: Withheld; stack?: Withheld } };

/** A stored error as shown: its message and stack as shownText shows them. */
export function shownError(e: ErrorRecord): ShownError {
  const out: ShownError = { ...e, message: shownText(e.message) };
  if (typeof e.stack === "string") out.stack = shownText(e.stack);
  const withheld = withheldTexts({ message: e.message, stack: e.stack });
  if (withheld) out.withheld = withheld;
  return out;
}

/** `{ field: why }` for each of `texts` (stored text) shown as a placeholder; undefined
 *  when none is. */
export function withheldTexts<F extends string>(
  texts: Record<F, string | null | undefined>,
): Partial<Record<F, Withheld>> | undefined {
  const out: Partial<Record<F, Withheld>> = {};
  let any = false;
  for (const field of Object.keys(texts) as F[]) {
    const text = texts[field];
    const why = typeof text === "string" ? withheldText(text) : undefined;
    if (why) {
      out[field] = why;
      any = true;
    }
  }
  return any ? out : undefined;
}

/** A stored value as inspection shows it: decoded, an EncryptedValue naming the key it is
 *  encrypted with, or an UndecodableValue; undefined for none. */
export function decodeForView(text: string | null): unknown {
  if (text === null) return undefined;
  try {
    const keyId = encryptedTextKeyId(text);
    if (keyId !== undefined) return new EncryptedValue(keyId);
    return decode(text);
  } catch {
    return UNDECODABLE;
  }
}

/** An event sent to a run (listEvents), consumed by a wait or not yet. */
export interface EventView {
  /** Store-assigned, increasing in the order events were sent to this store. */
  seq: number;
  name: string;
  payload: unknown;
  sentAt: Date;
  /** The key of the wait that consumed it, if one did. */
  consumedBy?: string;
  idempotencyKey?: string;
}

export function toEventView(e: EventRecord): EventView {
  const view: EventView = {
    seq: e.seq,
    name: e.name,
    payload: decodeForView(e.payload),
    sentAt: new Date(e.createdAt),
  };
  if (e.consumedBy !== null) view.consumedBy = e.consumedBy;
  if (e.idempotencyKey !== null) view.idempotencyKey = e.idempotencyKey;
  return view;
}

/** A worker process as registered in the store (listWorkers). */
export interface WorkerView {
  id: string;
  host: string;
  pid: number;
  /** The "name@version" pairs it executes. */
  workflows: string[];
  startedAt: Date;
  heartbeatAt: Date;
  /** Its last heartbeat is within one lease period of the store's now: it counts as a live
   *  worker for version pinning. */
  live: boolean;
}

export function toWorkerView(w: WorkerRecord, storeNow: number, leaseMs: number): WorkerView {
  return {
    id: w.id,
    host: w.host,
    pid: w.pid,
    workflows: [...w.workflows],
    startedAt: new Date(w.startedAt),
    heartbeatAt: new Date(w.heartbeatAt),
    live: workerLive(w, storeNow, leaseMs),
  };
}

const RETRY_BACKOFF = "retry backoff of step ";

/** A waiting run's reason when its next wake is a retry backoff's end (not a ctx.sleep):
 *  the step, the attempt it starts and when. Written with the release (release-of.ts). */
export function retryBackoffReason(b: { key: string; attempt: number }, at: number): string {
  return `${RETRY_BACKOFF}${quoteGiven(b.key)}: attempt ${b.attempt} at ${new Date(at).toISOString()}`;
}

/** Whether a run's reason is a retry backoff's (retryBackoffReason). */
export function isRetryBackoffReason(reason: string | undefined | null): boolean {
  return typeof reason === "string" && reason.startsWith(RETRY_BACKOFF);
}

/** A run of this status may be claimed again (a failed one once resumed). */
function mayBeClaimed(status: RunRecord["status"]): boolean {
  return status !== "running" && status !== "completed" && status !== "canceled";
}

export function toRunView(run: RunRecord): RunView {
  const view: RunView = {
    id: run.id,
    workflow: run.workflow,
    version: run.version,
    status: run.status,
    input: decodeForView(run.input),
    budget: { limit: { ...run.budgetLimit }, spent: { ...run.budgetSpent } },
    createdAt: new Date(run.createdAt),
    updatedAt: new Date(run.updatedAt),
  };
  // A retry backoff's reason is kept by the claim that ends it: it says nothing of a run
  // not waiting (the store keeps a waiting run's reason through its claim).
  if (run.reason && (run.status === "waiting" || !isRetryBackoffReason(run.reason))) {
    view.reason = shownText(run.reason);
    const withheld = withheldTexts({ reason: run.reason });
    if (withheld) view.withheld = withheld;
  }
  if (run.status === "paused" && run.pausedFor) view.pausedFor = run.pausedFor;
  if (run.output !== null) view.output = decodeForView(run.output);
  if (run.error) {
    view.error = { name: run.error.name, message: shownText(run.error.message) };
    if (run.error.code) view.error.code = run.error.code;
    const withheld = withheldTexts({ message: run.error.message });
    if (withheld) view.error.withheld = withheld;
  }
  if (run.parentId) view.parentId = run.parentId;
  if (run.status === "running") {
    if (run.leaseOwner !== null) view.leaseOwner = run.leaseOwner;
    if (run.leaseUntil !== null) view.leaseUntil = new Date(run.leaseUntil);
    if (run.cancelRequested) view.cancelRequested = true;
  }
  // Only a run that may still be claimed: a canceled one (a cancel keeps the hold it had)
  // or a completed one never is, and a running one's claim ended any hold.
  if (mayBeClaimed(run.status) && run.heldBy != null && run.heldUntil != null) {
    view.heldBy = run.heldBy;
    view.heldUntil = new Date(run.heldUntil);
  }
  if (run.status === "waiting") {
    if (run.wakeAt !== null) view.wakeAt = new Date(run.wakeAt);
    if (run.waitingFor.length > 0) view.waitingFor = [...run.waitingFor];
  }
  return view;
}
