// Payload encryption at rest: AES-256-GCM from node:crypto. Every encrypted payload names
// the id of its key, so keys rotate: the first key given encrypts what is written, every key
// given decrypts, and a payload whose key is not given is a PayloadKeyError naming that id.
//
// Text payloads (encoded values, error messages) become `cairn:enc:1:<keyId>:<base64>`, so
// they stay storable text; bytes (workspace objects) get a binary header with the same
// parts. The base64 holds iv (12 bytes) | tag (16 bytes) | ciphertext.
//
// The iv is derived from the content (HMAC-SHA-256 under a key derived from the payload key
// with HKDF, as SIV constructions do) rather than drawn at random: the same payload under the
// same key encrypts to the same text, so the store still recognizes a retried write or a
// resent event with an idempotency key as the same record. It reveals only that two
// payloads are equal, and an iv repeats only for an identical payload, which GCM tolerates.

import { createCipheriv, createDecipheriv, createHmac, hkdfSync } from "node:crypto";
import { PayloadKeyError } from "../errors.js";
import { isWellFormed } from "../lib/text.js";
import { ENVELOPE, isEscaped } from "./stored-text.js";

export interface EncryptionKey {
  /** Names the key inside every payload it encrypts: 1-64 of A-Z a-z 0-9 . _ - */
  id: string;
  /** 32 bytes, or their base64 text. */
  key: Uint8Array | string;
}

const TEXT_PREFIX = `${ENVELOPE}1:`;
const BYTES_MAGIC = Buffer.from("CAIRNENC1", "latin1");
const KEY_ID = /^[A-Za-z0-9._-]{1,64}$/;
const IV_BYTES = 12;
const TAG_BYTES = 16;

interface KeyMaterial {
  id: string;
  aes: Buffer;
  iv: Buffer;
}

/**
 * The key id of an encrypted text payload, or undefined for a plain one. Plain text never
 * begins "cairn:enc:" unless escaped as version 0 (codec/stored-text.ts), so text that begins
 * so and is no envelope cairn can read (a byte of its header flipped: a colon, the version)
 * is a PayloadKeyError saying it is damaged, never passed through as plain text: an error
 * message read so would hand a replay other text than the first run had.
 */
export function encryptedTextKeyId(text: string, what = "A payload"): string | undefined {
  if (!text.startsWith(ENVELOPE)) return undefined;
  // Escaped plain text is always PLAIN + ENVELOPE + ...: version 1 flipped to 0 is not.
  if (isEscaped(text)) return undefined;
  const end = text.indexOf(":", TEXT_PREFIX.length);
  const keyId = text.startsWith(TEXT_PREFIX) && end >= 0 ? text.slice(TEXT_PREFIX.length, end) : "";
  if (!KEY_ID.test(keyId)) {
    throw new PayloadKeyError(
      `${what} is not an encrypted payload that can be read: it begins with the marker of one, but its header (version, key id) is damaged or of a newer cairn, so the stored value is damaged`,
      { keyId: "unknown" },
    );
  }
  return keyId;
}

/** True for bytes that begin with the marker of encrypted bytes (encryptedStore wrote them,
 *  or they are damaged ones: encryptedBytesKeyId tells). */
export function hasBytesEnvelope(data: Uint8Array): boolean {
  const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  return bytes.subarray(0, BYTES_MAGIC.length).equals(BYTES_MAGIC);
}

/**
 * The key id of encrypted bytes, or undefined for plain ones. Bytes that begin with the
 * marker are encrypted (a stored workspace object never does: its first byte is 0 or 1),
 * so a header cut short or garbled is a PayloadKeyError saying the payload (`what`) is not
 * a readable encrypted payload, never a RangeError or an id read from beyond the bytes.
 */
export function encryptedBytesKeyId(data: Uint8Array, what = "A payload"): string | undefined {
  if (!hasBytesEnvelope(data)) return undefined;
  const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const len = bytes[BYTES_MAGIC.length] ?? 0;
  const start = BYTES_MAGIC.length + 1;
  const keyId = bytes.subarray(start, start + len).toString("latin1");
  if (keyId.length !== len || !KEY_ID.test(keyId)) {
    throw new PayloadKeyError(
      `${what} is not an encrypted payload that can be read: it begins with the marker of one, but its header (the key id) is cut short or damaged, so the stored value is damaged`,
      { keyId: "unknown" },
    );
  }
  return keyId;
}

/** Checks and derives keys; throws a TypeError naming the bad entry. */
function prepareKeys(keys: readonly EncryptionKey[]): KeyMaterial[] {
  if (!Array.isArray(keys) || keys.length === 0) {
    throw new TypeError(
      "encryption: give at least one key, { id, key } with 32 bytes (or their base64); the first encrypts new payloads",
    );
  }
  const seen = new Set<string>();
  return keys.map((k, i) => {
    if (typeof k?.id !== "string" || !KEY_ID.test(k.id)) {
      throw new TypeError(
        `encryption: key #${i + 1} has id ${JSON.stringify(k?.id)}; an id is 1-64 of A-Z a-z 0-9 . _ -`,
      );
    }
    if (seen.has(k.id)) throw new TypeError(`encryption: key id "${k.id}" is given twice`);
    seen.add(k.id);
    const raw = typeof k.key === "string" ? Buffer.from(k.key, "base64") : Buffer.from(k.key);
    if (raw.length !== 32) {
      throw new TypeError(
        `encryption: key "${k.id}" is ${raw.length} bytes; AES-256 needs 32 (e.g. \`openssl rand -base64 32\`)`,
      );
    }
    const iv = Buffer.from(hkdfSync("sha256", raw, Buffer.alloc(0), "cairn payload iv", 32));
    return { id: k.id, aes: raw, iv };
  });
}

/** Encrypts and decrypts payloads with a set of keys (see the file header). */
export class PayloadCipher {
  readonly #keys: Map<string, KeyMaterial>;
  readonly #current: KeyMaterial;

  constructor(keys: readonly EncryptionKey[]) {
    const prepared = prepareKeys(keys);
    this.#keys = new Map(prepared.map((k) => [k.id, k]));
    this.#current = prepared[0] as KeyMaterial;
  }

  /** The id new payloads are encrypted with. */
  get currentKeyId(): string {
    return this.#current.id;
  }

  encryptText(text: string): string {
    const k = this.#current;
    const header = `${TEXT_PREFIX}${k.id}:`;
    return header + seal(k, Buffer.from(header, "latin1"), textBytes(text)).toString("base64");
  }

  /** Plain text passes through (a store written before encryption was turned on). */
  decryptText(text: string, what: string): string {
    const keyId = encryptedTextKeyId(text, what);
    if (keyId === undefined) return text;
    const k = this.#key(keyId, what);
    const header = `${TEXT_PREFIX}${keyId}:`;
    const body = Buffer.from(text.slice(header.length), "base64");
    return bytesText(open(k, Buffer.from(header, "latin1"), body, what));
  }

  encryptBytes(data: Uint8Array): Uint8Array {
    const k = this.#current;
    const header = Buffer.concat([BYTES_MAGIC, Buffer.from([k.id.length]), Buffer.from(k.id)]);
    return new Uint8Array(Buffer.concat([header, seal(k, header, Buffer.from(data))]));
  }

  decryptBytes(data: Uint8Array, what: string): Uint8Array {
    const keyId = encryptedBytesKeyId(data, what);
    if (keyId === undefined) return data;
    const k = this.#key(keyId, what);
    const headerLength = BYTES_MAGIC.length + 1 + keyId.length;
    const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    return new Uint8Array(open(k, buf.subarray(0, headerLength), buf.subarray(headerLength), what));
  }

  #key(keyId: string, what: string): KeyMaterial {
    const k = this.#keys.get(keyId);
    if (!k) {
      throw new PayloadKeyError(
        `${what} is encrypted with key "${keyId}", which is not among the keys given (${[...this.#keys.keys()].map((id) => `"${id}"`).join(", ")}); add key "${keyId}" to read it`,
        { keyId },
      );
    }
    return k;
  }
}

// Text is any JS string, lone surrogates included (an error message cut mid-emoji): UTF-8
// would turn those into U+FFFD, so such text is sealed as UTF-16 code units instead. The
// first byte says which.
const UTF8 = 0;
const UTF16 = 1;

function textBytes(text: string): Buffer {
  return isWellFormed(text)
    ? Buffer.concat([Buffer.from([UTF8]), Buffer.from(text, "utf8")])
    : Buffer.concat([Buffer.from([UTF16]), Buffer.from(text, "utf16le")]);
}

function bytesText(bytes: Buffer): string {
  const body = bytes.subarray(1);
  return bytes[0] === UTF16 ? body.toString("utf16le") : body.toString("utf8");
}

/** iv | tag | ciphertext. */
function seal(k: KeyMaterial, aad: Buffer, plain: Buffer): Buffer {
  const iv = createHmac("sha256", k.iv).update(aad).update(plain).digest().subarray(0, IV_BYTES);
  const cipher = createCipheriv("aes-256-gcm", k.aes, iv);
  cipher.setAAD(aad);
  const body = Buffer.concat([cipher.update(plain), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), body]);
}

function open(k: KeyMaterial, aad: Buffer, sealed: Buffer, what: string): Buffer {
  try {
    if (sealed.length < IV_BYTES + TAG_BYTES) throw new Error("too short");
    const decipher = createDecipheriv("aes-256-gcm", k.aes, sealed.subarray(0, IV_BYTES));
    decipher.setAAD(aad);
    decipher.setAuthTag(sealed.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
    return Buffer.concat([
      decipher.update(sealed.subarray(IV_BYTES + TAG_BYTES)),
      decipher.final(),
    ]);
  } catch (err) {
    throw new PayloadKeyError(
      `${what} cannot be decrypted with the key "${k.id}" given: it is another key under the same id, or the stored value is damaged`,
      { keyId: k.id, cause: err },
    );
  }
}

/** Keys from text: "id=base64key[,id2=base64key2...]" (what $CAIRN_ENCRYPTION_KEYS holds);
 *  the first encrypts. Throws a TypeError naming the bad entry, never showing a key. */
export function parseEncryptionKeys(text: string): EncryptionKey[] {
  const keys = text
    .split(",")
    .map((part) => part.trim())
    .filter((part) => part !== "")
    .map((part, i) => {
      const eq = part.indexOf("=");
      if (eq <= 0) {
        throw new TypeError(
          `encryption keys are written "id=base64key[,id2=base64key2...]"; entry #${i + 1} is not`,
        );
      }
      return { id: part.slice(0, eq), key: part.slice(eq + 1) };
    });
  prepareKeys(keys);
  return keys;
}
