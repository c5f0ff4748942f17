// What a model call's request is, as text, read ONCE per call: the request digest (the
// replay check), the digests of the prompt's prefixes (which earlier answer a call
// continues) and the prompt's length (the limiter's estimate) all come from one pass.
//
// The text is JSON.stringify's, but for a file's bytes (a typed array in the prompt).
// For JSON.stringify those are an object of one key per byte: some 14 characters a byte,
// seconds of CPU for a few megabytes, and the request was stringified three times per call
// (digest, prefixes, estimate), on every execution, replays too, with the event loop
// (heartbeats, every other run of the worker) blocked meanwhile. Here a typed array is
// left out of the stringify and its bytes go into the hashes as they are, after a marker
// no JSON text holds (a raw NUL). Records written before (without `u`, call-record.ts)
// hold the digest of the whole JSON text: `legacyDigest` computes that one, only when a
// replay meets such a record for a prompt with bytes.

import { createHash, type Hash, randomUUID } from "node:crypto";
import type { CallOptions } from "./sdk-types.js";

export interface RequestText {
  /** Digest of the request (base64url, 16 characters); "" when it has no JSON text. */
  digest: string;
  /** Digests of the prompt's first n messages, n = 0..length (each message's text and
   *  "\n"); undefined when the prompt has no JSON text. */
  prefixes: string[] | undefined;
  /** Characters of the prompt as a provider is sent it, for the limiter's estimate: its
   *  JSON text, a file's bytes counted as base64 (as JSON they are some 14 characters a
   *  byte: a 100 KB image "took" a window of a million tokens); 0 when it has no text. */
  promptChars: number;
  /** The prompt holds a file's bytes (a typed array): its digest is not the older form. */
  hasBytes: boolean;
}

/** How a typed array is written: its bytes (digests now), or its JSON text (records
 *  without `u`, a Buffer as its toJSON's `{"type":"Buffer","data":[...]}`). */
type BytesAs = "bytes" | "json";

/** Reads the request's text once. `digest` only when asked for (`withDigest`). */
export function readRequest(options: CallOptions, withDigest: boolean): RequestText {
  const whole = createHash("sha256");
  const prefix = createHash("sha256");
  const sinks = withDigest ? [whole] : [];
  const prefixes = [prefix.copy().digest("base64url")];
  let promptChars = 2;
  let hasBytes = false;
  try {
    // The digest's text is JSON.stringify([prompt, toolNames, toolChoice, responseFormat]).
    write(sinks, "[[");
    options.prompt.forEach((message, i) => {
      if (i > 0) write(sinks, ",");
      const n = writeJson(message, [...sinks, prefix], "bytes");
      if (n === undefined) write([...sinks, prefix], "null");
      prefix.update("\n");
      prefixes.push(prefix.copy().digest("base64url"));
      promptChars += (n?.chars ?? 4) + (i > 0 ? 1 : 0);
      hasBytes ||= n?.hasBytes === true;
    });
    write(sinks, "]");
  } catch {
    // No JSON text (a cycle, a BigInt): no check, no continuation, no estimate, as before.
    return { digest: "", prefixes: undefined, promptChars: 0, hasBytes: false };
  }
  const digest = withDigest ? restOfDigest(options, whole, "bytes") : "";
  return { digest, prefixes, promptChars, hasBytes };
}

/** The digest records written before `u` hold: of JSON.stringify's whole text. */
export function legacyDigest(options: CallOptions): string {
  return wholeDigest(options, "json");
}

function wholeDigest(options: CallOptions, bytesAs: BytesAs): string {
  const whole = createHash("sha256");
  try {
    whole.update("[[");
    options.prompt.forEach((message, i) => {
      if (i > 0) whole.update(",");
      if (writeJson(message, [whole], bytesAs) === undefined) whole.update("null");
    });
    whole.update("]");
  } catch {
    return "";
  }
  return restOfDigest(options, whole, bytesAs);
}

/** The digest, once the prompt's text is in `whole`; "" when the rest has no JSON text. */
function restOfDigest(options: CallOptions, whole: Hash, bytesAs: BytesAs): string {
  try {
    for (const rest of [
      options.tools?.map((t) => ("name" in t ? t.name : "")),
      options.toolChoice,
      options.responseFormat,
    ]) {
      whole.update(",");
      if (writeJson(rest, [whole], bytesAs) === undefined) whole.update("null");
    }
    whole.update("]");
    return whole.digest("base64url").slice(0, 16);
  } catch {
    return "";
  }
}

function write(sinks: Hash[], data: string | Uint8Array): void {
  for (const h of sinks) h.update(data);
}

type NumberArray = Exclude<ArrayBufferView, DataView | BigInt64Array | BigUint64Array>;

function isNumberArray(v: unknown): v is NumberArray {
  return (
    ArrayBuffer.isView(v) &&
    !(v instanceof DataView) &&
    !(v instanceof BigInt64Array) &&
    !(v instanceof BigUint64Array)
  );
}

/** Writes JSON.stringify(value)'s text into every sink, typed arrays as `bytesAs` says.
 *  Returns its length with a typed array counted as its bytes in base64, and whether it
 *  held one; undefined when there is no text (JSON.stringify returned undefined). */
function writeJson(
  value: unknown,
  sinks: Hash[],
  bytesAs: BytesAs,
): { chars: number; hasBytes: boolean } | undefined {
  const arrays: NumberArray[] = [];
  // A marker no value can hold (a NUL and a fresh random id) stands for each typed array.
  const mark = `\u0000${randomUUID()}:`;
  const text = JSON.stringify(value, function (this: unknown, key: string, v: unknown) {
    // The value before its toJSON: a Buffer (fs.readFile's) reaches a replacer as
    // `{"type":"Buffer","data":[...]}`, some 4 characters a byte, and hashed so it made
    // the same bytes a Uint8Array gives another digest, and counted 3 times their base64.
    const held = (this as Record<string, unknown>)[key];
    const bytes = bytesAs === "bytes" && Buffer.isBuffer(held) ? held : v;
    if (!isNumberArray(bytes)) return v;
    arrays.push(bytes);
    return `${mark}${arrays.length - 1}`;
  });
  if (text === undefined) return undefined;
  if (arrays.length === 0) {
    write(sinks, text);
    return { chars: text.length, hasBytes: false };
  }
  const quoted = JSON.stringify(mark).slice(0, -1); // as the text holds it: `"\u0000<id>:`
  let chars = 0;
  let from = 0;
  for (;;) {
    const at = text.indexOf(quoted, from);
    if (at < 0) break;
    const end = text.indexOf('"', at + quoted.length);
    write(sinks, text.slice(from, at));
    const a = arrays[Number(text.slice(at + quoted.length, end))]!;
    if (bytesAs === "json") writeArrayJson(sinks, a);
    else writeBytes(sinks, a);
    chars += at - from + Math.ceil(a.byteLength / 3) * 4 + 2;
    from = end + 1;
  }
  write(sinks, text.slice(from));
  return { chars: chars + text.length - from, hasBytes: true };
}

/** A typed array as its kind, length and bytes, after a raw NUL: JSON text escapes every
 *  control character, so no text can be hashed the same. */
function writeBytes(sinks: Hash[], a: NumberArray): void {
  // A Buffer is a Uint8Array: the same bytes, the same digest.
  const kind = Buffer.isBuffer(a) ? "Uint8Array" : a.constructor.name;
  write(sinks, `\u0000${kind}:${a.byteLength}:`);
  write(sinks, new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
}

/** A typed array's JSON text (`{"0":1,"1":2}`: JSON.stringify's, an object keyed by
 *  index), written in chunks: only to check a record written before `u`. */
function writeArrayJson(sinks: Hash[], a: NumberArray): void {
  const items = a as unknown as ArrayLike<number>;
  let chunk = "{";
  for (let i = 0; i < items.length; i++) {
    const v = items[i]!;
    chunk += `${i > 0 ? "," : ""}"${i}":${Number.isFinite(v) ? String(v) : "null"}`;
    if (chunk.length >= 65_536) {
      write(sinks, chunk);
      chunk = "";
    }
  }
  write(sinks, `${chunk}}`);
}
