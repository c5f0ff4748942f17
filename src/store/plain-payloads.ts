// A store marked encrypted (store-marks.ts: encryptedStore marks the store it opens) refuses
// a payload written in plain text, whoever writes it: an engine, a worker, the CLI or the
// HTTP API on a store opened without encryptedStore (the key configuration forgotten) would
// otherwise keep secrets in clear in an "encrypted" database, with nothing said. Both
// backends ask this guard before a verb that carries a payload; nothing is written when it
// refuses.
//
// Ciphertext is told from plain text by its envelope alone (codec/encryption.ts): text that
// begins "cairn:enc:" in any version but 0 (version 0 is plain text escaped, stored-text.ts),
// bytes that begin with the bytes envelope. What encryptedStore leaves plain is not looked
// at: names, keys, ids, statuses, times, amounts, hashes, an error's name and code, and the
// reason of a run that is not failed or canceled (a pause's reason is the engine's). Nor is
// the text of undefined (NOTHING), which holds nothing to keep secret.
//
// SQLite reads the mark inside each payload write's own transaction while it believes the
// store unmarked (admitInTransaction: one point read on a one-row table, under the write lock
// the write takes anyway), so no window is left there. PostgreSQL, where that read would be a
// round trip of its own, goes as follows.
//
// The mark is read without a read per write: once when the store opens, then by the mark
// verbs of the store (they tell the guard what they read or wrote), and again, in the
// background, by the first write after the last answer "not marked" is MARK_FRESH_MS old
// (the store's clock): a plain store reads it about once per MARK_FRESH_MS while it writes,
// an encrypted one never (its payloads are ciphertext: nothing to ask). A store that said
// "marked" (or could not say) reads it again before it refuses a plain payload, so a mark
// removed by another process (unmarkEncrypted) counts at once. What that leaves (a process
// that read "not marked" writing plain text until its background read returns, about
// MARK_FRESH_MS after another process marked the store) the database closes: the mark
// installs triggers that refuse such a write there (postgres/plain-triggers.ts), with this
// guard's refusal. A store opened after the mark refuses its first plain payload here.

import { hasBytesEnvelope } from "../codec/encryption.js";
import { ENVELOPE, PLAIN } from "../codec/stored-text.js";
import { EncryptionKeyMissingError } from "../errors.js";
import type { ApprovalVerbs } from "./approval-records.js";
import {
  type CancelReason,
  canceledChildEvent,
  isCairnCancelReason,
  type ParentOf,
} from "./cancel-texts.js";
import type { ErrorRecord, NewEvent, NewRun, Release, RunEnd, RunWrite } from "./store.js";
import type { WorkspaceVerbs } from "./workspace-records.js";

/** How long (the store's clock, ms) a store's "not marked" is believed before a plain
 *  payload reads the mark again. */
export const MARK_FRESH_MS = 1_000;

/** A plain payload found in a write: what it is (for the message), and its run and key. */
export interface PlainPayload {
  what: string;
  runId?: string;
  key?: string;
}

/** True for text an encryptedStore wrote: an envelope of a version other than 0. */
export function isCiphertext(text: string): boolean {
  return text.startsWith(ENVELOPE) && !text.startsWith(PLAIN);
}

/** The codec's text of undefined (devalue's -1): it holds nothing, so it is let through
 *  plain: a run started without input, an event sent without payload (the CLI's and the
 *  HTTP API's keyless doors always let those be). */
const NOTHING = "-1";

const plainText = (t: string | null | undefined): boolean =>
  typeof t === "string" && t !== NOTHING && !isCiphertext(t);

const plainError = (e: ErrorRecord | null | undefined): boolean =>
  !!e && (plainText(e.message) || plainText(e.stack));

/** What a store marked encrypted says when it refuses `plain` (the guard, or PostgreSQL's
 *  triggers: plain-triggers.ts). */
export function plainPayloadRefusal(store: string, plain: PlainPayload): EncryptionKeyMissingError {
  return new EncryptionKeyMissingError(
    `The store ${JSON.stringify(store)} is marked encrypted (an encryptedStore opened it), and this process writes to it without keys: ${plain.what} would be stored in plain text beside encrypted payloads, so nothing was written. Give this process the keys (encryptedStore(store, { keys }); the CLI and cairn ui: $CAIRN_ENCRYPTION_KEYS), or, if this store's workers no longer encrypt, remove the mark: store.unmarkEncrypted()`,
    {
      store,
      what: plain.what,
      ...(plain.runId !== undefined && { runId: plain.runId }),
      ...(plain.key !== undefined && { key: plain.key }),
    },
  );
}

export class PlainPayloadGuard {
  /** The store's time when it last said it is not marked; undefined: marked, or not read. */
  #unmarkedAt: number | undefined;
  #refreshing = false;

  constructor(
    private readonly store: string,
    private readonly readMark: () => Promise<boolean>,
    private readonly now: () => number,
  ) {}

  /** What the store's own mark verbs (and its open) read or wrote. */
  saw(marked: boolean): void {
    this.#unmarkedAt = marked ? undefined : this.#time();
  }

  /** Reads the mark when the store opens (by `read`, the store's read at open, if given): a
   *  store that cannot (a role without the table's rights) reads it at its first plain
   *  payload instead. */
  async opened(read: () => Promise<boolean> = this.readMark): Promise<void> {
    try {
      this.saw(await read());
    } catch {
      this.#unmarkedAt = undefined;
    }
  }

  /** Runs `write` unless `find` finds a plain payload and the store is marked: then rejects
   *  with an EncryptionKeyMissingError, nothing written. A store believed unmarked writes
   *  at once (never later than asked: a close() right after it sends it, as before), and
   *  reads the mark again, without waiting, when its answer is older than MARK_FRESH_MS. */
  admit<T>(find: () => PlainPayload | undefined, write: () => Promise<T>): Promise<T> {
    if (this.#believedUnmarked()) return write();
    let plain: PlainPayload | undefined;
    try {
      plain = find();
    } catch (err) {
      return Promise.reject(err);
    }
    return plain === undefined ? write() : this.#admitPlain(plain, write);
  }

  /**
   * As admit, for a store that can read the mark inside the write's own transaction
   * (SQLite, whose writes take the file's write lock first): while the store is believed
   * unmarked, `write` is handed a check to run inside its transaction before it writes,
   * which reads the mark there and refuses a plain payload if another process marked the
   * store since (nothing written). No window is left: the mark and the write are ordered by
   * the write lock. A store believed marked goes as admit does, reading the mark before a
   * plain payload; `write` is handed the check then too (the mark may be set between that
   * read and the write), and none for a write with no plain payload.
   * `find` is handed the transaction when it runs inside one (a cancel reads there the
   * parents its reason names).
   */
  admitInTransaction<T, Tx>(
    find: (tx?: Tx) => PlainPayload | undefined,
    markedIn: (tx: Tx) => boolean,
    write: (check: ((tx: Tx) => void) | undefined) => Promise<T>,
  ): Promise<T> {
    if (this.#believedUnmarked()) return write(this.#checkIn(find, markedIn));
    let plain: PlainPayload | undefined;
    try {
      plain = find();
    } catch (err) {
      return Promise.reject(err);
    }
    if (plain === undefined) return write(undefined);
    // The mark read before the write said "not marked": the write reads it again inside its
    // transaction, since another process may have marked the store in between (the read
    // and the write each take the file's lock of their own).
    return this.#admitPlain(plain, () => write(this.#checkIn(find, markedIn)));
  }

  /** The check admitInTransaction hands a write: refuses `find`'s plain payload where the
   *  transaction reads the store marked. */
  #checkIn<Tx>(
    find: (tx?: Tx) => PlainPayload | undefined,
    markedIn: (tx: Tx) => boolean,
  ): (tx: Tx) => void {
    return (tx) => {
      if (!markedIn(tx)) return;
      this.saw(true);
      const plain = find(tx);
      if (plain !== undefined) throw this.refusal(plain);
    };
  }

  /** For a verb that is asked its payload inside its transaction (createReleasedRun's end):
   *  whether the store is believed unmarked now (then a plain payload is let through). */
  believedUnmarked(): boolean {
    return this.#believedUnmarked();
  }

  /** The refusal of `plain`. */
  refusal(plain: PlainPayload): EncryptionKeyMissingError {
    return plainPayloadRefusal(this.store, plain);
  }

  /** Marked, or not known: the mark is read before a plain payload is written or refused
   *  (a mark another process removed counts at once). */
  async #admitPlain<T>(plain: PlainPayload, write: () => Promise<T>): Promise<T> {
    const marked = await this.readMark();
    this.saw(marked);
    if (marked) throw this.refusal(plain);
    return write();
  }

  #believedUnmarked(): boolean {
    const at = this.#unmarkedAt;
    if (at === undefined) return false;
    const now = this.#time();
    if (!(now >= at && now - at < MARK_FRESH_MS)) this.#refresh();
    return true;
  }

  /** Reads the mark again, once at a time, without holding up the write that asked. */
  #refresh(): void {
    if (this.#refreshing) return;
    this.#refreshing = true;
    this.readMark().then(
      (marked) => {
        this.#refreshing = false;
        this.saw(marked);
      },
      () => {
        this.#refreshing = false; // closed meanwhile: the next write asks again
      },
    );
  }

  #time(): number {
    try {
      return this.now();
    } catch {
      return Number.NaN; // not open: the next write reads the mark again
    }
  }
}

// ---- the plain payloads of each verb (what encryptedStore encrypts) ----

const ofRun = (runId: string, what: string): PlainPayload => ({ what, runId });

export function plainInNewRun(run: NewRun): PlainPayload | undefined {
  if (plainText(run.input)) return ofRun(run.id, `the input of run "${run.id}"`);
  if (plainText(run.handedInputDigest)) {
    return ofRun(run.id, `the handed-input digest of run "${run.id}"`);
  }
  return undefined;
}

export function plainInEvents(events: readonly NewEvent[] | undefined): PlainPayload | undefined {
  for (const e of events ?? []) {
    if (plainText(e.payload)) {
      return ofRun(e.runId, `the payload of event "${e.name}" for run "${e.runId}"`);
    }
  }
  return undefined;
}

export function plainInRelease(runId: string, r: RunEnd): PlainPayload | undefined {
  if (plainText(r.output)) return ofRun(runId, `the output of run "${runId}"`);
  if (plainError(r.error)) return ofRun(runId, `the error of run "${runId}"`);
  const mayQuoteError = r.status === "failed" || r.status === "canceled";
  if (mayQuoteError && plainText(r.reason)) return ofRun(runId, `the reason of run "${runId}"`);
  return plainInEvents(r.events) ?? plainInEvents(r.eventsIfCanceled);
}

export function plainInReleaseOf(r: Release): PlainPayload | undefined {
  return plainInRelease(r.runId, r);
}

export function plainInWrites(writes: readonly RunWrite[]): PlainPayload | undefined {
  for (const w of writes) {
    for (const s of w.steps ?? []) {
      if (plainText(s.result) || plainError(s.error)) {
        const part = plainText(s.result) ? "result" : "error";
        return {
          what: `the ${part} of step "${s.key}" of run "${w.runId}"`,
          runId: w.runId,
          key: s.key,
        };
      }
    }
    for (const a of w.attempts ?? []) {
      if (plainError(a.error)) {
        return {
          what: `the error of attempt ${a.attempt} of step "${a.key}" of run "${w.runId}"`,
          runId: w.runId,
          key: a.key,
        };
      }
    }
    for (const i of w.intents ?? []) {
      if (plainText(i.data)) {
        return {
          what: `the intent of "${i.key}" of run "${w.runId}"`,
          runId: w.runId,
          key: i.key,
        };
      }
    }
  }
  return undefined;
}

/** `parentOf` reads the parents of the runs the reason names (cancel-texts.ts,
 *  runsNamedAsChildren): a cascade's reason is cairn's only where each id in it is the
 *  parent of the run before it. */
export function plainInCancel(
  cancel: CancelReason,
  p: { parentEvent?: { name: string; payload: string } } | undefined,
  parentOf: ParentOf,
): PlainPayload | undefined {
  const { runId, reason } = cancel;
  // cairn's own words (a cancel given no reason, a cascade of one) hold nothing to keep
  // secret, nor the child-result event made of them (cancel-texts.ts).
  const cairns = isCairnCancelReason(cancel, parentOf);
  if (!cairns && plainText(reason)) {
    return ofRun(runId, `the cancel reason of run "${runId}"`);
  }
  const e = p?.parentEvent;
  if (e && plainText(e.payload) && !(cairns && sameEvent(e, canceledChildEvent(runId, reason)))) {
    return ofRun(runId, `the payload of event "${e.name}" for the parent of run "${runId}"`);
  }
  return undefined;
}

const sameEvent = (
  a: { name: string; payload: string },
  b: { name: string; payload: string },
): boolean => a.name === b.name && a.payload === b.payload;

export function plainInStream(p: { runId: string; chunks: string[] }): PlainPayload | undefined {
  return p.chunks.some(plainText)
    ? ofRun(p.runId, `a stream chunk of run "${p.runId}"`)
    : undefined;
}

export function plainInObjects(
  p: Parameters<WorkspaceVerbs["putWorkspaceObjects"]>[0],
): PlainPayload | undefined {
  const o = p.objects.find((x) => !hasBytesEnvelope(x.data));
  return o && ofRun(p.runId, `workspace object ${o.hash} of run "${p.runId}"`);
}

export function plainInApprovalRequest(
  p: Parameters<ApprovalVerbs["requestApproval"]>[0],
): PlainPayload | undefined {
  if (!plainText(p.request)) return undefined;
  return {
    what: `the request of approval "${p.key}" of run "${p.runId}"`,
    runId: p.runId,
    key: p.key,
  };
}

/** An answer's answer and comment. Not its event: that repeats the decision, who answered
 *  and how (kept plain in the approval's row) beside the answer and the comment, so an
 *  answer with neither (an approval from a keyless door) holds nothing to keep secret. */
export function plainInApprovalAnswer(
  p: Parameters<ApprovalVerbs["answerApproval"]>[0],
): PlainPayload | undefined {
  const part = plainText(p.answer) ? "answer" : plainText(p.comment) ? "comment" : undefined;
  if (part === undefined) return undefined;
  return {
    what: `the ${part} of approval "${p.key}" of run "${p.runId}"`,
    runId: p.runId,
    key: p.key,
  };
}
