// The API's doors that write a payload (start, an event, a cancel reason, an approval's
// comment or answer) refuse to store it in plain text beside encrypted records: a server
// whose engine writes plain text (`cairn ui` without $CAIRN_ENCRYPTION_KEYS) while the store
// holds encrypted payloads would keep it so, with nothing said. Nothing is written when
// refused. An engine on encryptedStore always writes encrypted: it is never refused.

import {
  markedEncryptedStore,
  unreadablePayloadOf,
  unreadableRecentPayload,
  writesEncrypted,
} from "../../engine/unreadable-payloads.js";
import type { Engine } from "../../index.js";
import { HttpError, quote } from "../errors.js";

const GIVE_KEY =
  "give this server the key (cairn ui: $CAIRN_ENCRYPTION_KEYS as the workers have it; createHttpApp: an engine on encryptedStore(store, { keys }))";

/** Refuses (409 ENCRYPTION_KEY_MISSING) to store `what` into run `id` when the engine
 *  writes plain text and cannot read the run's payloads. */
export async function refusePlainTextInto(engine: Engine, id: string, what: string): Promise<void> {
  if (writesEncrypted(engine)) return;
  const encrypted = await unreadablePayloadOf(engine, id, { quick: true });
  // Nothing in the run tells (its newest records may not be encrypted yet): the store may.
  if (encrypted === undefined) return refuseMarkedStore(engine, what, "nothing was written");
  throw new HttpError(
    409,
    "ENCRYPTION_KEY_MISSING",
    `Run ${quote(id)} is encrypted with key "${encrypted.keyId}", and this server's store has no keys: ${what} would be stored in plain text. To write it, ${GIVE_KEY}; nothing was written`,
  );
}

/** As refusePlainTextInto, for a new run's input: refused when the engine writes plain text
 *  and the store's newest runs are encrypted. */
export async function refusePlainTextStart(engine: Engine): Promise<void> {
  if (writesEncrypted(engine)) return;
  const found = await unreadableRecentPayload(engine, { forStart: true });
  if (found === undefined) return refuseMarkedStore(engine, "the input", "nothing was started");
  throw new HttpError(
    409,
    "ENCRYPTION_KEY_MISSING",
    `This store is encrypted (run ${quote(found.runId)} is, with key "${found.value.keyId}"), and this server's store has no keys: the input would be stored in plain text. To start runs, ${GIVE_KEY}; nothing was started`,
  );
}

/** Refuses any payload when the store says it encrypts (an encrypted worker or server opened
 *  it): its runs may hold no ciphertext yet (none finished), and still be encrypted. */
async function refuseMarkedStore(engine: Engine, what: string, outcome: string): Promise<void> {
  const store = await markedEncryptedStore(engine);
  if (store === undefined) return;
  throw new HttpError(
    409,
    "ENCRYPTION_KEY_MISSING",
    `The store ${quote(store)} is marked encrypted (its workers encrypt what they write), and this server's store has no keys: ${what} would be stored in plain text. To write it, ${GIVE_KEY}; ${outcome}`,
  );
}
