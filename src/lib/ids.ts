// Identifiers: prefixed, random, URL-safe. Every message that mentions one quotes it.

import { createHash, randomFillSync } from "node:crypto";
import { checkText, leadingText } from "./text.js";

const ID_BYTES = 12;
/** Random bytes for ids, drawn 256 ids at a time: one randomBytes(12) per id cost tens of
 *  microseconds per run in a profile (as randomUUID, Node caches entropy for this). */
const idPool = Buffer.alloc(ID_BYTES * 256);
let idPoolAt = idPool.length;

export function newId(prefix: string): string {
  if (idPoolAt + ID_BYTES > idPool.length) {
    randomFillSync(idPool);
    idPoolAt = 0;
  }
  const random = idPool.toString("base64url", idPoolAt, idPoolAt + ID_BYTES);
  idPoolAt += ID_BYTES;
  return `${prefix}_${random}`;
}

/** The idempotency key of a step: stable for (run id, step key), the same on every attempt. */
export function idempotencyKey(runId: string, stepKey: string): string {
  const h = createHash("sha256").update(runId).update("\u0000").update(stepKey).digest("base64url");
  return `ck_${h.slice(0, 32)}`;
}

/** The longest run id (in UTF-16 code units) the engine accepts. */
export const MAX_RUN_ID_LENGTH = 256;

/** The hash form's marker: in a plain child id the key's "%" is always "%25" or "%2F", so
 *  no plain id's last segment starts with "%h". */
const HASHED = "%h";

/**
 * The id of the child run that `parentId` starts under step key `key`, for ctx.child:
 * `parent/key`, the key's "%" and "/" percent-encoded (readable: `run_1/review#2`).
 * Injective: the key part never contains "/", so the last "/" splits an id back into its
 * parent and key, and two parents can never make the same child id (with "parent:key",
 * "a:b" + "c" and "a" + "b:c" did). When that form is longer than MAX_RUN_ID_LENGTH, the id
 * is the parent's leading characters, "/%h" and a SHA-256 of (parent, key): still unique,
 * and never equal to a plain one.
 * Throws a TypeError for a key with NUL or a lone surrogate (checkText): validate names first.
 */
export function childRunId(parentId: string, key: string): string {
  checkText(parentId, "parent run id");
  checkText(key, "child key");
  const plain = `${parentId}/${key.replaceAll("%", "%25").replaceAll("/", "%2F")}`;
  if (plain.length <= MAX_RUN_ID_LENGTH) return plain;
  const hash = createHash("sha256")
    .update(parentId)
    .update("\u0000")
    .update(key)
    .digest("base64url");
  const room = MAX_RUN_ID_LENGTH - hash.length - HASHED.length - 1;
  return `${leadingText(parentId, room)}/${HASHED}${hash}`;
}
