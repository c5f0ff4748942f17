// encryptedStore(store, { keys }): the same Store, with every payload encrypted on its way in
// and decrypted on its way out (codec/encryption.ts). One decorator at the seam covers every
// writer and reader alike: run inputs, outputs and errors, step results and errors, attempt
// errors, intents, events, approvals (request, answer, comment), run streams (model output of
// cairn/ai) and workspace objects. Names, keys, ids, statuses, times and amounts stay plain:
// the store queries them. A child run's handed-input digest is encrypted too: the digest of
// a small input (a number, a name) tells the input to whoever tries the likely ones.
//
// Error records keep `name` and `code` plain and encrypt `message` and `stack`; a run's
// `reason` is encrypted when it may quote an error (failed and canceled runs).
//
// A run claimed by this worker whose payload names a key it was not given is not handed
// back to be claimed again at once (a crash loop): it is paused with a reason naming the
// key, and resumes once a worker with the key is told to resume it.

import { type EncryptionKey, PayloadCipher } from "../codec/encryption.js";
import { PayloadKeyError } from "../errors.js";
import { displayText } from "../lib/text.js";
import type { ApprovalRecord } from "./approval-records.js";
import { refuseUnstorable } from "./storable.js";
import type {
  AttemptRecord,
  ClaimedRun,
  ErrorRecord,
  EventHeadsPage,
  EventRecord,
  IntentRecord,
  Journal,
  NewEvent,
  NewRun,
  PendingEventsOptions,
  ReleasedRun,
  RunEnd,
  RunRecord,
  RunWrite,
  StepRecord,
  Store,
} from "./store.js";
import { createRunProblem, releaseProblem } from "./verb-arguments.js";
import type { WorkspaceObject } from "./workspace-records.js";

export interface EncryptionOptions {
  /** The first key encrypts what is written; every key decrypts (rotation: put the new key
   *  first and keep the old ones while payloads encrypted with them are kept). */
  keys: EncryptionKey[];
}

type Cipher = PayloadCipher;

function enc(c: Cipher, text: string | null): string | null;
function enc(c: Cipher, text: string | null | undefined): string | null | undefined;
function enc(c: Cipher, text: string | null | undefined): string | null | undefined {
  return typeof text === "string" ? c.encryptText(text) : text;
}

function dec(c: Cipher, text: string, what: string): string;
function dec(c: Cipher, text: string | null, what: string): string | null;
function dec(c: Cipher, text: string | null, what: string): string | null {
  return text === null ? null : c.decryptText(text, what);
}

function encError(c: Cipher, e: ErrorRecord): ErrorRecord;
function encError(c: Cipher, e: ErrorRecord | null): ErrorRecord | null;
function encError(c: Cipher, e: ErrorRecord | null | undefined): ErrorRecord | null | undefined;
function encError(c: Cipher, e: ErrorRecord | null | undefined): ErrorRecord | null | undefined {
  if (!e) return e;
  const out: ErrorRecord = { ...e, message: c.encryptText(e.message) };
  if (typeof e.stack === "string") out.stack = c.encryptText(e.stack);
  return out;
}

function decError(c: Cipher, e: ErrorRecord, what: string): ErrorRecord;
function decError(c: Cipher, e: ErrorRecord | null, what: string): ErrorRecord | null;
function decError(c: Cipher, e: ErrorRecord | null, what: string): ErrorRecord | null {
  if (!e) return e;
  const out: ErrorRecord = { ...e, message: c.decryptText(e.message, what) };
  if (typeof e.stack === "string") out.stack = c.decryptText(e.stack, what);
  return out;
}

function encNewRun(c: Cipher, run: NewRun): NewRun {
  return {
    ...run,
    input: c.encryptText(run.input),
    ...(run.handedInputDigest != null && {
      handedInputDigest: c.encryptText(run.handedInputDigest),
    }),
  };
}

function decRun(c: Cipher, r: RunRecord): RunRecord {
  // The input first: a key missing for it is the one a reader is told of.
  const input = c.decryptText(r.input, `A payload of run "${r.id}"`);
  return { ...decReleasedRun(c, r), input };
}

/** A released run (ReleasedRun: no input). An inner store's whole record has its input left
 *  out, not decrypted: nobody reads it, and a release never changed it. */
function decReleasedRun(c: Cipher, whole: ReleasedRun & { input?: string }): ReleasedRun {
  const { input: _unread, ...r } = whole;
  const what = `A payload of run "${r.id}"`;
  return {
    ...r,
    output: dec(c, r.output, what),
    error: decError(c, r.error, what),
    reason: dec(c, r.reason, what),
    ...(r.handedInputDigest != null && {
      handedInputDigest: c.decryptText(r.handedInputDigest, what),
    }),
  };
}

/** A listed run: what this store cannot decrypt stays as stored (inspection shows which key
 *  it needs), so one run under a retired key neither hides the others from a listing nor
 *  stops retention from deleting it. Reads of one run (getRun) still refuse it. */
function decListedRun(c: Cipher, r: RunRecord): RunRecord {
  const what = `A payload of run "${r.id}"`;
  const keep = <T>(read: () => T, stored: T): T => {
    try {
      return read();
    } catch (err) {
      if (err instanceof PayloadKeyError) return stored;
      throw err;
    }
  };
  return {
    ...r,
    input: keep(() => c.decryptText(r.input, what), r.input),
    output: keep(() => dec(c, r.output, what), r.output),
    error: keep(() => decError(c, r.error, what), r.error),
    reason: keep(() => dec(c, r.reason, what), r.reason),
    ...(r.handedInputDigest != null && {
      handedInputDigest: keep(() => c.decryptText(r.handedInputDigest!, what), r.handedInputDigest),
    }),
  };
}

function decStep(c: Cipher, s: StepRecord): StepRecord {
  const what = `The record of step "${s.key}" of run "${s.runId}"`;
  return { ...s, result: dec(c, s.result, what), error: decError(c, s.error, what) };
}

function decAttempt(c: Cipher, a: AttemptRecord): AttemptRecord {
  const what = `Attempt ${a.attempt} of step "${a.key}" of run "${a.runId}"`;
  return { ...a, error: decError(c, a.error, what) };
}

function decIntent(c: Cipher, i: IntentRecord): IntentRecord {
  return { ...i, data: c.decryptText(i.data, `The intent of "${i.key}" of run "${i.runId}"`) };
}

function decEvent(c: Cipher, e: EventRecord): EventRecord {
  const what = `Event #${e.seq} "${e.name}" of run "${e.runId}"`;
  return { ...e, payload: c.decryptText(e.payload, what) };
}

function encEvent<E extends { payload: string }>(c: Cipher, e: E): E {
  return { ...e, payload: c.encryptText(e.payload) };
}

function decApproval(c: Cipher, a: ApprovalRecord): ApprovalRecord {
  const what = `Approval "${a.key}" of run "${a.runId}"`;
  return {
    ...a,
    request: c.decryptText(a.request, what),
    answer: dec(c, a.answer, what),
    comment: dec(c, a.comment, what),
  };
}

function decJournal(c: Cipher, j: Journal): Journal {
  return {
    steps: j.steps.map((s) => decStep(c, s)),
    attempts: j.attempts.map((a) => decAttempt(c, a)),
    intents: j.intents.map((i) => decIntent(c, i)),
    events: j.events.map((e) => decEvent(c, e)),
    ...(j.eventHeads && { eventHeads: j.eventHeads }),
  };
}

function decObject(c: Cipher, o: WorkspaceObject): WorkspaceObject {
  return { ...o, data: c.decryptBytes(o.data, `Workspace object ${o.hash}`) };
}

/** The reason a run whose payload cannot be read here is paused with. */
export function unreadablePayloadReason(runId: string, err: PayloadKeyError): string {
  // No key id could be read: no key would open it (codec/encryption.ts).
  if (err.keyId === "unknown") {
    return `run "${runId}" has an encrypted payload whose header is damaged, so no key can read it; restore the damaged record from a backup and resume the run, or fork it from a step before the damage`;
  }
  return `run "${runId}" has a payload encrypted with key "${err.keyId}", which this worker cannot read; give the worker that key and resume the run`;
}

/** The mark of a store encryptedStore made (encrypts). A symbol-keyed property, not a
 *  WeakSet of the stores: a decorator over one (a Proxy such as faultyStore, an object
 *  spread of its verbs) passes the mark on, as it passes its writes through it, encrypted.
 *  (A WeakSet missed it: an engine on faultyStore(encryptedStore(...)) lacking a retired
 *  key was refused as if it wrote plain text.) */
const ENCRYPTS = Symbol.for("cairn.encryptedStore");

/** True for a store made by encryptedStore, or a decorator that passes its properties on:
 *  what it is given to write is encrypted. (A decorator that does not hides it: then false,
 *  and callers fall back to reading.) */
export function encrypts(store: Store): boolean {
  try {
    return (store as unknown as Record<symbol, unknown>)[ENCRYPTS] === true;
  } catch {
    return false; // a Proxy whose get throws for names it does not know
  }
}

export function encryptedStore(inner: Store, options: EncryptionOptions): Store {
  const c = new PayloadCipher(options?.keys);
  const store: Store = {
    get description() {
      return inner.description;
    },
    ...plainVerbs(inner),
    ...runVerbs(inner, c),
    ...journalVerbs(inner, c),
    ...eventVerbs(inner, c),
    ...sideChannelVerbs(inner, c),
    ...approvalVerbs(inner, c),
  };
  Object.defineProperty(store, ENCRYPTS, { value: true, enumerable: true });
  return store;
}

/** Opens `inner` and marks it encrypted: a process given no keys that opens the same
 *  database then refuses to write plain text into it, whatever its runs hold yet. A mark
 *  that cannot be written fails the open (and closes what it opened). */
async function openMarked(inner: Store, o: Parameters<Store["open"]>[0]): Promise<void> {
  await inner.open(o);
  // A store this process can only read (a read-only file or role: a dashboard, `cairn show`)
  // cannot take the mark, and writes no plain payload either: it opens all the same. The
  // mark is written by the next open that can (an engine's store must write anyway).
  await inner.markEncrypted?.().catch(() => {});
}

/** The verbs that carry no payload: names, ids, times, amounts, hashes. */
function plainVerbs(inner: Store) {
  return {
    open: (o) => openMarked(inner, o),
    close: () => inner.close(),
    now: () => inner.now(),
    markEncrypted: () => inner.markEncrypted?.() ?? Promise.resolve(),
    isMarkedEncrypted: () => inner.isMarkedEncrypted?.() ?? Promise.resolve(false),
    unmarkEncrypted: () => inner.unmarkEncrypted?.() ?? Promise.resolve(),
    renewLeases: (p) => inner.renewLeases(p),
    expireLease: (p) => inner.expireLease(p),
    markUnserved: (p) => inner.markUnserved(p),
    // Ids only: nothing to decrypt. Offered only when the inner store has it.
    ...(inner.listChildrenOfCanceled && {
      listChildrenOfCanceled: (p: { limit: number }) => inner.listChildrenOfCanceled!(p),
    }),
    registerWorker: (w) => inner.registerWorker(w),
    heartbeatWorker: (id) => inner.heartbeatWorker(id),
    removeWorker: (id, options) => inner.removeWorker(id, options),
    listWorkers: () => inner.listWorkers(),
    acquireRate: (p) => inner.acquireRate(p),
    settleRate: (p) => inner.settleRate(p),
    blockRate: (p) => inner.blockRate(p),
    missingWorkspaceObjects: (h) => inner.missingWorkspaceObjects(h),
    heldWorkspaceObjects: (runId, h) => inner.heldWorkspaceObjects(runId, h),
    deleteRun: (id) => inner.deleteRun(id),
    deleteRuns: (ids, options) => inner.deleteRuns(ids, options),
    subscribe: (l) => inner.subscribe(l),
  } satisfies Partial<Store>;
}

/** Runs: input, output, error and (of failed and canceled runs) reason. */
function runVerbs(inner: Store, c: Cipher) {
  return {
    async createRun(run) {
      // Checked before encryption hides the text (and UTF-8 would turn a lone surrogate
      // into U+FFFD inside the ciphertext).
      const bad = createRunProblem(run);
      if (bad) throw bad;
      const res = await inner.createRun(encNewRun(c, run));
      return { ...res, run: decRun(c, res.run) };
    },
    async getRun(id) {
      const run = await inner.getRun(id);
      return run && decRun(c, run);
    },
    async listRuns(filter) {
      return (await inner.listRuns(filter)).map((r) => decListedRun(c, r));
    },
    claimRuns: (p) => readableClaims(inner, c, p),
    async releaseRun(r) {
      const bad = releaseProblem(r);
      if (bad) throw bad;
      const res = await inner.releaseRun(encRelease(c, r));
      return res.ok ? { ok: true, run: decReleasedRun(c, res.run) } : res;
    },
    // Offered only when the inner store has it (without, the engine creates, then releases).
    ...(inner.createReleasedRun && {
      async createReleasedRun(run, end) {
        const bad = createRunProblem(run);
        if (bad) throw bad;
        const res = await inner.createReleasedRun!(
          { ...encNewRun(c, run), claimBy: run.claimBy },
          () => {
            const release = end();
            if (release === undefined) return undefined;
            const refused = releaseProblem({ ...release, runId: run.id, epoch: 1 });
            if (refused) throw refused;
            return encRelease(c, release);
          },
        );
        return { ...res, run: decRun(c, res.run) };
      },
    }),
    async requestCancel(runId, reason, p) {
      const res = await inner.requestCancel(runId, c.encryptText(displayText(reason)), {
        ...p,
        ...(p?.parentEvent && { parentEvent: encEvent(c, p.parentEvent) }),
      });
      // The cancel is committed: a payload of the run under a key this process lacks must
      // not turn it into an error (the caller would think nothing happened). The run comes
      // back as a listing shows it; the engine reads only its status.
      return "run" in res ? { ...res, run: decListedRun(c, res.run) } : res;
    },
    async resumeRun(runId, p) {
      const res = await inner.resumeRun(runId, p);
      // As for requestCancel: a resume that committed is not reported as a failure.
      return "run" in res ? { ...res, run: decListedRun(c, res.run) } : res;
    },
    async forkRun(p) {
      const res = await inner.forkRun({
        ...p,
        run: encNewRun(c, p.run),
      });
      return { ...res, run: decRun(c, res.run) };
    },
  } satisfies Partial<Store>;
}

/** A release (or a run's end, createReleasedRun) with its payloads encrypted: output, error,
 *  the reason of a failed or canceled run (it may quote the error), events. */
function encRelease<R extends RunEnd>(c: Cipher, r: R): R {
  const mayQuoteError = r.status === "failed" || r.status === "canceled";
  return {
    ...r,
    ...(r.output !== undefined && { output: enc(c, r.output) }),
    ...(r.error !== undefined && { error: encError(c, r.error) }),
    ...(mayQuoteError && r.reason != null && { reason: c.encryptText(displayText(r.reason)) }),
    ...(r.events && { events: r.events.map((e) => encEvent(c, e)) }),
    ...(r.eventsIfCanceled && {
      eventsIfCanceled: r.eventsIfCanceled.map((e) => encEvent(c, e)),
    }),
  };
}

/** The claimed runs this worker can read; one whose payload names a key it was not given
 *  is paused with a reason naming the key (see the file header). */
async function readableClaims(
  inner: Store,
  c: Cipher,
  p: Parameters<Store["claimRuns"]>[0],
): Promise<ClaimedRun[]> {
  const claimed = await inner.claimRuns(p);
  const readable: ClaimedRun[] = [];
  for (const claim of claimed) {
    try {
      readable.push({ ...claim, run: decRun(c, claim.run) });
    } catch (err) {
      if (!(err instanceof PayloadKeyError)) throw err;
      await inner.releaseRun({
        runId: claim.run.id,
        epoch: claim.run.epoch,
        status: "paused",
        reason: unreadablePayloadReason(claim.run.id, err),
        readyAt: null,
      });
    }
  }
  return readable;
}

/** Journal records: step results and errors, attempt errors, intents. */
function journalVerbs(inner: Store, c: Cipher) {
  return {
    appendRecords(writes) {
      // A record no backend could store plain is refused as the backends refuse it (its
      // ciphertext would be storable, and the run would then read back something else).
      return refuseUnstorable(writes, (storable) =>
        inner.appendRecords(storable.map((w) => encWrite(c, w))),
      );
    },
    async loadJournal(runId, options) {
      return decJournal(c, await inner.loadJournal(runId, options));
    },
    async readJournalPage(p) {
      const page = await inner.readJournalPage(p);
      const { steps, attempts, intents } = decJournal(c, { ...page, events: [] });
      return { steps, attempts, intents, more: page.more };
    },
  } satisfies Partial<Store>;
}

function encWrite(c: Cipher, w: RunWrite): RunWrite {
  return {
    ...w,
    ...(w.steps && {
      steps: w.steps.map((s) => ({ ...s, result: enc(c, s.result), error: encError(c, s.error) })),
    }),
    ...(w.attempts && {
      attempts: w.attempts.map((a) => ({ ...a, error: encError(c, a.error) })),
    }),
    ...(w.intents && {
      intents: w.intents.map((i) => ({ ...i, data: c.encryptText(i.data) })),
    }),
  };
}

/** Events: their payloads. */
function eventVerbs(inner: Store, c: Cipher) {
  return {
    async pendingEvents(runId, options) {
      return (await inner.pendingEvents(runId, options)).map((e) => decEvent(c, e));
    },
    // A head holds no payload; the payloads are read as they are waited for.
    ...(inner.pendingEventHeads &&
      inner.eventPayloads && {
        pendingEventHeads: (runId: string, options?: PendingEventsOptions) =>
          inner.pendingEventHeads!(runId, options),
        ...(inner.pendingEventHeadsNamed && {
          pendingEventHeadsNamed: (
            runId: string,
            page: EventHeadsPage,
            options?: PendingEventsOptions,
          ) => inner.pendingEventHeadsNamed!(runId, page, options),
          ...(inner.pendingEventHeadsOfNames && {
            pendingEventHeadsOfNames: (
              runId: string,
              pages: readonly EventHeadsPage[],
              options?: PendingEventsOptions,
            ) => inner.pendingEventHeadsOfNames!(runId, pages, options),
          }),
        }),
        async eventPayloads(runId: string, seqs: readonly number[]) {
          return (await inner.eventPayloads!(runId, seqs)).map((e) => ({
            seq: e.seq,
            payload: c.decryptText(e.payload, `Event #${e.seq} of run "${runId}"`),
          }));
        },
      }),
    async sendEvent(e: NewEvent) {
      const res = await inner.sendEvent(encEvent(c, e));
      if (res.ok) return { ...res, event: decEvent(c, res.event) };
      if (res.reason === "key-conflict") {
        // The stored payload may be under another key (rotated since) or plain (written
        // before encryption): equal plaintext is the same event, as the store would judge it.
        const event = decEvent(c, res.event);
        if (event.name === e.name && event.payload === e.payload) {
          return { ok: true, event, duplicate: true };
        }
        return { ...res, event };
      }
      return res;
    },
    async listEvents(runId) {
      return (await inner.listEvents(runId)).map((e) => decEvent(c, e));
    },
    async readEvents(p) {
      return (await inner.readEvents(p)).map((e) => decEvent(c, e));
    },
  } satisfies Partial<Store>;
}

/** What is stored beside the journal: run streams (cairn/ai) and workspace objects. */
function sideChannelVerbs(inner: Store, c: Cipher) {
  return {
    appendStream(p) {
      return inner.appendStream({ ...p, chunks: p.chunks.map((x) => c.encryptText(x)) });
    },
    async readStream(p) {
      return (await inner.readStream(p)).map((chunk) => ({
        ...chunk,
        data: c.decryptText(chunk.data, `Stream chunk ${chunk.offset} of run "${p.runId}"`),
      }));
    },
    putWorkspaceObjects(p) {
      return inner.putWorkspaceObjects({
        ...p,
        objects: p.objects.map((o) => ({ ...o, data: c.encryptBytes(o.data) })),
      });
    },
    async getWorkspaceObjects(hashes) {
      return (await inner.getWorkspaceObjects(hashes)).map((o) => decObject(c, o));
    },
  } satisfies Partial<Store>;
}

/** Approvals: request, answer, comment. */
function approvalVerbs(inner: Store, c: Cipher) {
  return {
    async requestApproval(p) {
      const res = await inner.requestApproval({ ...p, request: c.encryptText(p.request) });
      return res.ok ? { ...res, approval: decApproval(c, res.approval) } : res;
    },
    async answerApproval(p) {
      const res = await inner.answerApproval({
        ...p,
        answer: enc(c, p.answer),
        comment: enc(c, p.comment),
        event: encEvent(c, p.event),
      });
      return "approval" in res ? { ...res, approval: decApproval(c, res.approval) } : res;
    },
    async listApprovals(runId) {
      return (await inner.listApprovals(runId)).map((a) => decApproval(c, a));
    },
  } satisfies Partial<Store>;
}
