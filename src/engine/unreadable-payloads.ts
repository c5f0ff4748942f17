// Whether a process may write a payload into a run, or into the store, as it is: a process
// given no encryption keys stores plain text where the workers encrypt everything else. A
// client door (the CLI, the HTTP API) asks these before it writes a payload, and refuses
// instead of leaving a secret in plain text beside ciphertext with nothing said.

import { PayloadKeyError, RunNotFoundError } from "../errors.js";
import type { Engine } from "./engine.js";
import { EncryptedValue } from "./views.js";

const isEncrypted = (v: unknown): v is EncryptedValue => v instanceof EncryptedValue;

/** Engines whose store encrypts what they write (createEngine marks them). */
const encrypting = new WeakSet<Engine>();

export function markEncrypting(engine: Engine): void {
  encrypting.add(engine);
}

/** True when `engine` writes payloads encrypted: it never stores plain text, so a door need
 *  not ask the questions below (whose answer would be wrong for it: it may lack a retired
 *  key a run was written with, and still write encrypted). */
export function writesEncrypted(engine: Engine): boolean {
  return encrypting.has(engine);
}

/** How each engine reads its store's mark (createEngine sets it): the store's description
 *  when it is marked encrypted, else undefined. */
const storeMarks = new WeakMap<Engine, () => Promise<string | undefined>>();

export function readsStoreMark(engine: Engine, read: () => Promise<string | undefined>): void {
  storeMarks.set(engine, read);
}

/** The description of `engine`'s store (its file, or database and schema) when the store
 *  says it encrypts (encryptedStore marked it when it opened it), else undefined: a door
 *  whose engine writes plain text refuses every payload then, whatever the runs hold yet.
 *  (The reads below guess from what runs hold, and could not tell a store none of whose
 *  newest runs had finished.) Undefined for an engine not made by createEngine. */
export async function markedEncryptedStore(engine: Engine): Promise<string | undefined> {
  return storeMarks.get(engine)?.();
}

/** A payload of run `id` that `engine` cannot decrypt, or undefined (no such run too).
 *  `quick` (a door that writes often: the HTTP API's webhook path) reads the run's events and
 *  journal only when the store's newest runs hold such payloads: where nothing is
 *  encrypted, a send costs two small reads at once (the newest runs, which hold the run
 *  itself when it is one of them, and its approvals), not a read of the whole journal. */
export async function unreadablePayloadOf(
  engine: Engine,
  id: string,
  options: { quick?: boolean } = {},
): Promise<EncryptedValue | undefined> {
  try {
    return await (options.quick ? findUnreadableQuickly(engine, id) : findUnreadable(engine, id));
  } catch (err) {
    // An encrypted store that lacks the run's key refuses the read: that is the answer.
    if (err instanceof PayloadKeyError) return new EncryptedValue(err.keyId);
    throw err;
  }
}

async function findUnreadable(engine: Engine, id: string): Promise<EncryptedValue | undefined> {
  const run = await engine.getRun(id);
  if (run === undefined) return undefined;
  // The input alone does not tell: a run started by a client with no keys has a plain
  // input, and every record its workers wrote after it encrypted (steps, events, approval
  // requests). Those are read only when the input is plain, the journal last.
  const own = runPayload(run) ?? requestPayload(await engine.listApprovals(id));
  return own ?? (await eventsOrJournal(engine, id));
}

/** As findUnreadable, in fewer reads: the newest runs and the run's approvals at once; the
 *  run itself is read only when it is not among the newest. Not always the same answer:
 *  its events and journal are read only when a newest run shows ciphertext, so while none
 *  of them has (a keyless client starts every run, and none has finished yet) an encrypted
 *  step result goes unseen (left open: the store does not say that it encrypts). */
async function findUnreadableQuickly(
  engine: Engine,
  id: string,
): Promise<EncryptedValue | undefined> {
  const [recent, approvals] = await Promise.all([
    engine.listRuns({ limit: RECENT_RUNS }),
    engine.listApprovals(id).catch((err: unknown) => {
      if (err instanceof RunNotFoundError) return [];
      throw err;
    }),
  ]);
  const run = recent.find((r) => r.id === id) ?? (await engine.getRun(id));
  if (run === undefined) return undefined;
  const own = runPayload(run) ?? requestPayload(approvals);
  if (own) return own;
  if (!recent.some((r) => runPayload(r) !== undefined)) return undefined;
  return eventsOrJournal(engine, id);
}

/** The run's input or output, if `engine` cannot decrypt it. */
function runPayload(run: { input?: unknown; output?: unknown }): EncryptedValue | undefined {
  return [run.input, run.output].find(isEncrypted);
}

/** An approval's request `engine` cannot decrypt. */
function requestPayload(approvals: Array<{ request: unknown }>): EncryptedValue | undefined {
  return approvals.map((a) => a.request).find(isEncrypted);
}

/** A payload of the run's events, else of its journal, that `engine` cannot decrypt. */
async function eventsOrJournal(engine: Engine, id: string): Promise<EncryptedValue | undefined> {
  return (
    (await engine.listEvents(id)).map((e) => e.payload).find(isEncrypted) ??
    (await engine.getSteps(id)).map((s) => s.result).find(isEncrypted)
  );
}

/** How many of the newest runs a new run's start looks at (a store is encrypted as a whole:
 *  what its newest runs hold is what its workers write). */
const RECENT_RUNS = 20;

/** A payload of one of the store's newest runs that `engine` cannot decrypt, or undefined:
 *  a run started now by this engine would keep its input in plain text among them.
 *  `forStart` (a new run's start) looks only at the runs newer than the newest whose output
 *  is plain: an output is written by a worker, so a plain one says the workers write plain
 *  text now (a store that turned encryption off), and the encrypted runs before it are old.
 *  (Without it, the CLI and the API refused every start until 20 runs had been started by
 *  other means.) A plain input says nothing: a client with no keys writes one. */
export async function unreadableRecentPayload(
  engine: Engine,
  options: { forStart?: boolean } = {},
): Promise<{ runId: string; value: EncryptedValue } | undefined> {
  for (const run of await engine.listRuns({ limit: RECENT_RUNS })) {
    const value = runPayload(run);
    if (value) return { runId: run.id, value };
    if (options.forStart && run.output !== undefined) return undefined;
  }
  return undefined;
}
