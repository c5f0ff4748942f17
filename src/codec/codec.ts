// Values <-> stored text. devalue keeps Date, Map, Set, BigInt, undefined, typed arrays,
// repeated and circular references; reducers add Error (error-parts.ts) and an array with
// properties beside its elements (array-parts.ts). Anything else that
// is not plain data (functions, symbols, class instances), and a value a copy would lose
// part of (kept-whole.ts), is refused with the path to the bad value: the workflow is
// handed the decoded copy, on the first run as on every replay, never a value with less.
//
// The text is always storable exactly (lib/text.ts): devalue escapes NUL, and lone UTF-16
// surrogates (an LLM reply cut mid-emoji) are escaped here, so no backend's driver turns
// them into U+FFFD and the first run and every replay decode the same string.

import { types } from "node:util";
import * as devalue from "devalue";
import { PayloadKeyError } from "../errors.js";
import { escapeLoneSurrogatesInJson } from "../lib/text.js";
import { arrayRevivers, arrayWithPropsParts } from "./array-parts.js";
import { encoderReads, identityReads, needsEncoderReads, partViewBytes } from "./encoder-reads.js";
import { encryptedTextKeyId } from "./encryption.js";
import {
  cycleErrorParts,
  cycleErrorRevivers,
  errorPartsWithoutStack,
  errorRevivers,
  fullErrorParts,
  inPlaceErrorRevivers,
  isError,
  mayHoldFullError,
  NOT_WHOLE,
  plainErrorParts,
  plainErrorPartsWithoutGetters,
  symbolErrorParts,
  wholeErrorRevivers,
} from "./error-parts.js";
import { notKeptWhat } from "./kept-whole.js";
import { type GetterReads, plainTextOrReads } from "./plain-text.js";
import { readablePath } from "./readable-path.js";
import { throwingReadPath } from "./throwing-read.js";

export const DEFAULT_MAX_PAYLOAD_BYTES = 2 * 1024 * 1024;

export class EncodeError extends Error {
  constructor(
    message: string,
    readonly path: string,
    readonly bytes?: number,
  ) {
    super(message);
    this.name = "EncodeError";
  }
}

/** Stored text the codec cannot read back: damaged, or written by a cairn that knows a type
 *  this one does not. A run holding it cannot go on (execution.ts pauses it). */
export class UndecodableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "UndecodableError";
  }
}

export { isError } from "./error-parts.js";

/** An Error is stored by its parts (error-parts.ts): the plain form first, as it always
 *  was, or the form with its cause and properties; an array with properties beside its
 *  elements by its own (array-parts.ts). */
const reducers = {
  Error: (v: unknown) => notedCode(plainErrorParts(v)),
  ErrorWithProps: fullErrorParts,
  ErrorWithSymbols: symbolErrorParts,
  ArrayWithProps: arrayWithPropsParts,
};

/** The reducers of a value with a loop through an Error: every Error that may be in one is
 *  stored under ErrorWithCycles (error-parts.ts). */
const cycleReducers = {
  ErrorWithCycles: cycleErrorParts,
  Error: plainErrorParts,
  ArrayWithProps: arrayWithPropsParts,
};

const revivers = { ...errorRevivers, ...cycleErrorRevivers, ...arrayRevivers };

/** Whether the value encode is storing has an Error whose code is an object: its code may
 *  lead back to it, which the "Error" tag's reviver does not see (it made a second Error,
 *  without its code, where the value held the Error itself). */
let objectCodeSeen = false;

function notedCode<T>(parts: T): T {
  if (Array.isArray(parts)) {
    const code = parts[3] as unknown;
    if (typeof code === "object" && code !== null) objectCodeSeen = true;
  }
  return parts;
}

/** Thrown (never seen outside stringify) where devalue's own reads would store a part of
 *  the value otherwise than encoderReads. */
const NEEDS_ENCODER_READS = new Error("needs encoderReads");

/** The cheap pass's reducer, called on every part (one reducer: devalue calls each on
 *  every part, numbers and strings too): a plain Error's parts as encode's, or nothing, or
 *  a stop where encoderReads would read the part otherwise, where the part has a getter, or
 *  at an Error with more than its base parts (encode's other reducers store it). A getter
 *  read by the cheap pass was read again when a later part stopped it: a getter that
 *  counts, logs or pulls the next item of a stream ran twice, and what was stored was its
 *  second answer. Stopped before it, the cheap pass reads no getter. */
const plainReducers = {
  Error: (v: unknown) => {
    if (typeof v !== "object" || v === null) return false;
    if (isError(v)) {
      // As encode's reducers take it, whatever its tag; a proxy is read once, by them.
      const parts = !types.isProxy(v) && plainErrorPartsWithoutGetters(v);
      if (!parts) throw NEEDS_ENCODER_READS;
      return notedCode(parts);
    }
    if (needsEncoderReads(v) || hasOwnGetter(v)) throw NEEDS_ENCODER_READS;
    return false;
  },
};

/** Whether one of the own enumerable properties of `value` (what the encoder lists) is an
 *  accessor, looked at without running it. An array's indices are looked at too (~25 ns
 *  each, only for values plainText gave up on): a getter the cheap pass read was read again
 *  by encode's own pass when a later part stopped the cheap one (`{ at: new Date(), list }`
 *  with a typed array after the getter in `list`), and the second answer was stored. An
 *  array with other keys is refused by needsEncoderReads anyway. */
function hasOwnGetter(value: object): boolean {
  if (Array.isArray(value)) return hasIndexGetter(value);
  const keys = Object.keys(value);
  for (let i = 0; i < keys.length; i++) {
    // The key is own: its getter, or none (a data property); no descriptor is made.
    if (lookupGetter.call(value, keys[i] as string) !== undefined) return true;
  }
  return false;
}

/** Whether an element of `array` is an accessor. A long array is walked while it has no
 *  hole, and its own keys are listed from its first one: its length may be a sparse
 *  array's billions (`a[1e9] = 1`), never walked (devalue lists them there too). Listed
 *  whole, a dense array of 3 million numbers beside a Date took 48% more CPU to encode. */
function hasIndexGetter(array: unknown[]): boolean {
  const length = array.length;
  if (length > 65_536) {
    for (let i = 0; i < length; i++) {
      if (!Object.hasOwn(array, i)) {
        return Object.getOwnPropertyNames(array).some(
          (k) => k !== "length" && lookupGetter.call(array, k) !== undefined,
        );
      }
      if (lookupGetter.call(array, i as unknown as string) !== undefined) return true;
    }
    return false;
  }
  for (let i = 0; i < length; i++) {
    // A hole is looked up the prototype chain: a getter there sends it to the full pass too.
    if (lookupGetter.call(array, i as unknown as string) !== undefined) return true;
  }
  return false;
}

const lookupGetter = (
  Object.prototype as unknown as { __lookupGetter__: (this: object, key: string) => unknown }
).__lookupGetter__;

/** devalue's text of `value`, read as encoderReads say. devalue merges the operations it is
 *  handed into a new object on every call (~1 µs, 5 times the encoding of a number), so a
 *  value no part of which they would read otherwise (a string, plain data: most step
 *  results) is encoded with devalue's own reads, and only the rest again with encoderReads.
 *  The text is the same either way; a refusal met before such a part is too. */
function stringify(value: unknown): string {
  const plain = plainTextOrReads(value);
  if (typeof plain === "string") return plain;
  // Not an object: no reducer can take it (devalue sets them up on every call).
  if (typeof value !== "object" || value === null) return devalue.stringify(value);
  // An array's getters plainText ran are not run again: their answers are handed over.
  const get = plain && readsFirst(plain);
  try {
    return devalue.stringify(value, plainReducers, get && { operations: { get } });
  } catch (err) {
    if (err !== NEEDS_ENCODER_READS) throw err;
  }
  return devalue.stringify(
    value,
    reducers,
    get ? { operations: { ...encoderReads.operations, get } } : encoderReads,
  );
}

/** devalue's `get`, answering an array's elements plainText read with what it read. */
function readsFirst(reads: GetterReads) {
  return (thing: unknown, key: string | number): unknown => {
    const read = reads.get(thing as unknown[]);
    const i = typeof key === "number" ? key : Number(key);
    if (read !== undefined && Number.isInteger(i) && i >= 0 && i < read.length) return read[i];
    return (thing as Record<string | number, unknown>)[key];
  };
}

/** Encodes a value; throws EncodeError naming the offending path or the size. */
export function encode(value: unknown, maxBytes = DEFAULT_MAX_PAYLOAD_BYTES): string {
  let text: string;
  try {
    text = escapeLoneSurrogatesInJson(stringify(value));
  } catch (err) {
    throw refusal(value, err);
  }
  if (objectCodeSeen || mayHoldFullError(text)) {
    // Reset here, not on every encode (a number's encoding paid for it); one left set by a
    // refused value costs the next encode a look, never another text.
    objectCodeSeen = false;
    text = withErrorLoopsRevivable(text);
  }
  // Byte length only matters near the limit; text.length is a lower bound of UTF-8 bytes.
  if (text.length * 3 > maxBytes) {
    const bytes = Buffer.byteLength(text, "utf8");
    if (bytes > maxBytes) {
      throw new EncodeError(
        `is ${bytes} bytes encoded, over the payload limit of ${maxBytes} bytes`,
        "(root)",
        bytes,
      );
    }
  }
  return text;
}

/** Why encode refused `value`, from what its encoder threw (`err`). What a getter threw may be
 *  anything, read here without trusting it: a proxy whose traps throw (instanceof included)
 *  escaped encode as what they threw, not an EncodeError, and a run returning such a value
 *  was taken for one interrupted by its store, handed back and claimed again for ever. */
function refusal(value: unknown, err: unknown): EncodeError {
  try {
    return encoderRefusal(value, err);
  } catch {
    const path = safeThrowingReadPath(value);
    const where = path === "(root)" ? "it" : path;
    return new EncodeError(
      `cannot be stored: reading ${where} threw ${thrownText(err)} (a getter or a proxy)`,
      path,
    );
  }
}

function safeThrowingReadPath(value: unknown): string {
  try {
    return throwingReadPath(value) || "(root)";
  } catch {
    return "(root)";
  }
}

function encoderRefusal(value: unknown, err: unknown): EncodeError {
  // The encoder recurses: a value nested thousands of levels deep exhausts the stack. The
  // message then said "cannot store Maximum call stack size exceeded", not what to change.
  if (err instanceof RangeError && /call stack/i.test(err.message)) {
    return new EncodeError(
      "cannot store a value nested this deeply (the encoder ran out of stack); flatten it, or store it as text",
      "(root)",
    );
  }
  if (err instanceof TypeError && /detached/i.test(err.message)) {
    // Read as any buffer is, it threw: taken for a getter's failure, it said "a proxy".
    return new EncodeError(
      "cannot be stored: it holds a detached ArrayBuffer (its memory was transferred); copy its bytes before it is transferred",
      "(root)",
    );
  }
  if (!(err instanceof devalue.DevalueError)) {
    // Not the encoder's verdict: a getter of the value threw while it was read, and what
    // it threw may be anything (null, a string). Reading a path off it threw a TypeError
    // of cairn's own instead, which named nothing and escaped a step as its failure.
    const path = throwingReadPath(value) || "(root)";
    const where = path === "(root)" ? "it" : path;
    return new EncodeError(
      `cannot be stored: reading ${where} threw ${thrownText(err)} (a getter or a proxy)`,
      path,
    );
  }
  const readable = readablePath(value, err.path);
  const path = readable.path || "(root)";
  // The user did not put it there, most often: an HTTP client's error holds its request.
  const inError = readable.error
    ? ` (a property of the Error at ${readable.error}: store a plain object with the parts of it you need, such as its message and status)`
    : "";
  return new EncodeError(`cannot store ${refusedWhat(err)} at ${path}${inError}`, path);
}

/** `text`, or, when an Error in it leads back to itself (`err.error = err`, a response
 *  that holds the error), the same value written again with its Errors under
 *  ErrorWithCycles: the older tags revive an Error from its parts, which cannot hold it yet
 *  (the run paused for good at its first replay, or, for an Error whose code held it, was
 *  handed a second Error without its code). Written again from the text, not the value: a
 *  getter is read once. */
function withErrorLoopsRevivable(text: string): string {
  try {
    devalue.parse(text, wholeRevivers);
    return text;
  } catch (err) {
    if (err !== NOT_WHOLE) throw undecodableErrorRefusal();
  }
  try {
    const copy = devalue.parse(text, inPlaceRevivers);
    const again = escapeLoneSurrogatesInJson(devalue.stringify(copy, cycleReducers, encoderReads));
    devalue.parse(again, revivers);
    return again;
  } catch {
    throw undecodableErrorRefusal();
  }
}

/** decode's revivers, refusing an older Error tag's value that leads back to itself. */
const wholeRevivers = { ...wholeErrorRevivers, ...cycleErrorRevivers, ...arrayRevivers };

/** Every Error tag revived in place: a copy of such text to write again. */
const inPlaceRevivers = { ...inPlaceErrorRevivers, ...arrayRevivers };

function undecodableErrorRefusal(): EncodeError {
  return new EncodeError(
    "cannot store an Error whose cause or properties lead back to it in a way cairn cannot read back; store the cause's message, or a plain copy without the loop",
    "(root)",
  );
}

/** Text that identifies a value as the code builds it, for a digest (a child call's input):
 *  encode's text, except that
 *  - an Error counts by every part encode stores but its stack (`byName`: by its name,
 *    message and code, as cairn counted it before). Its stack names the files, lines and
 *    callers of the code that made it: the same code deployed at another path, or rebuilt,
 *    would be taken for another value;
 *  - a typed array or DataView showing part of its buffer counts by the bytes it shows.
 *    encode keeps the whole buffer, and the rest of it may be anything (a view of a small
 *    Buffer's bytes shows part of Node's shared pool, which holds whatever the process
 *    made lately).
 *  Throws as encode does. */
export function encodeIdentity(value: unknown, errors: "byParts" | "byName" = "byParts"): string {
  const texts = encodeIdentities(value, errors === "byName");
  return errors === "byName" ? (texts.byName ?? texts.text) : texts.text;
}

/** encodeIdentity's text, and, when the value holds an Error (only then do they differ),
 *  its text with Errors counted by name, message and code (`byName`, when asked for): the
 *  identity older records were taken by. */
export function encodeIdentities(
  value: unknown,
  withByName = true,
): { text: string; byName?: string } {
  // The second pass (byName) is handed what the first read: each property's value, each
  // Error's name, message and code. Read again, a getter ran twice (an effect twice, a
  // counter's two answers), and the two digests could count two different inputs.
  const reads = new Map<unknown, Map<string | number, unknown>>();
  const errorNames = new Map<unknown, unknown[]>();
  const byParts = {
    ...identityReducers,
    Error: (v: unknown) => {
      const parts = errorPartsWithoutStack(v);
      if (parts) errorNames.set(v, parts.slice(0, 3));
      return parts;
    },
  };
  const get = (thing: unknown, key: string | number): unknown => {
    let read = reads.get(thing);
    if (!read) {
      read = new Map();
      reads.set(thing, read);
    }
    if (read.has(key)) return read.get(key);
    const v = (thing as Record<string | number, unknown>)[key];
    read.set(key, v);
    return v;
  };
  const text = identityText(value, byParts, get);
  if (errorNames.size === 0 || !withByName) return { text };
  const byName = {
    ...identityReducers,
    Error: (v: unknown) => errorNames.get(v) ?? identityReducers.Error(v),
  };
  return { text, byName: identityText(value, byName, get) };
}

/** encodeIdentity's text (Errors by their parts) of a value the codec refuses for the
 *  class instances in it, each read as its class's name and its own enumerable properties.
 *  For a digest only, never stored: an approval's request that its schema turns into data
 *  (approval-request-digest.ts). Throws for a value refused for anything else. */
export function encodeInstanceIdentity(value: unknown): string {
  const reducers = {
    ...identityReducers,
    Error: errorPartsWithoutStack,
    Instance: (v: unknown) => classInstanceParts(v),
  };
  return escapeLoneSurrogatesInJson(devalue.stringify(value, reducers, identityReads));
}

/** A class instance (an object of no built-in kind whose prototype is not Object's) as its
 *  class's name and own enumerable properties; false for anything else. */
function classInstanceParts(v: unknown): false | [string, Record<string, unknown>] {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v);
  if (proto === null || proto === Object.prototype) return false;
  if (Object.prototype.toString.call(v) !== "[object Object]") return false;
  const name = (proto as { constructor?: { name?: unknown } }).constructor?.name;
  return [typeof name === "string" ? name : "", { ...(v as Record<string, unknown>) }];
}

function identityText(
  value: unknown,
  reducers: Record<string, (v: unknown) => unknown>,
  get?: (thing: unknown, key: string | number) => unknown,
): string {
  try {
    // Read as encode reads (encoderReads): devalue's own reads took an object that says it
    // is an Array (stored as the object it is) for the array it mimics.
    const reads = get ? { operations: { ...identityReads.operations, get } } : identityReads;
    return escapeLoneSurrogatesInJson(devalue.stringify(value, reducers, reads));
  } catch {
    // encode's verdict, with its message (the same value is refused the same way).
    return encode(value, Number.POSITIVE_INFINITY);
  }
}

const identityReducers = {
  Error: (v: unknown) => isError(v) && [v.name, v.message, (v as { code?: unknown }).code],
  // By its slots: a view's own `buffer` property named other bytes than encode stores.
  PartView: (v: unknown) => {
    const part = partViewBytes(v);
    return (
      part && [
        `[object ${part.kind}]`,
        Buffer.from(part.bytes.buffer, part.bytes.byteOffset, part.bytes.byteLength).toString(
          "base64",
        ),
      ]
    );
  },
};

/** A copy of a value as the codec keeps it, for a call that keeps what it was handed until
 *  its turn comes (a child's input, an approval's request): the workflow may change the
 *  object meanwhile (one object filled in anew on each turn of a loop), and each call must
 *  go on with what it was given. Taken as the stored text, decoded afresh at the call's turn
 *  (takeCopy): what a call's turn does with its copy (a schema that fills defaults in place)
 *  reaches no other call handed the same object. A value the codec refuses is kept as it is:
 *  the call refuses it when its turn comes, naming the path. */
export function copyAsStored(value: unknown, texts?: StoredTexts): StoredCopy {
  let text: string;
  try {
    text = encode(value, Number.POSITIVE_INFINITY);
  } catch {
    return { value };
  }
  // One object handed to many calls unchanged (a shared context for 1,000 children) holds
  // one text until the calls' turns: a copy each multiplied its memory by the calls.
  const key = typeof value === "object" && value !== null ? value : undefined;
  const known = key && texts?.get(key);
  if (known !== undefined && known === text) return { text: known };
  if (key) texts?.set(key, text);
  return { text };
}

/** What copyAsStored took, as a copy of its own (each call's turn gets a fresh one). */
export function takeCopy(copy: StoredCopy): unknown {
  return "text" in copy ? decode(copy.text) : copy.value;
}

/** What copyAsStored took of a value: its stored text, or the value the codec refuses. */
export type StoredCopy = { text: string } | { value: unknown };

/** The last text copyAsStored took of each object. */
export type StoredTexts = WeakMap<object, string>;

/** What the encoder refused, in a user's words: its own say "non-POJOs", or advise its
 *  stringifyAsync, which cairn does not call. */
function refusedWhat(err: devalue.DevalueError): string {
  const said = err.message;
  if (/non-POJOs/.test(said)) return notKeptWhat(err.value) ?? notPlainData(err.value);
  if (/symbolic keys/.test(said)) {
    return "an object with symbol keys (symbols cannot be stored: use string keys)";
  }
  if (/__proto__ keys/.test(said)) {
    // JSON.parse makes one from text; devalue refuses it on any object (a reviver would set
    // the prototype instead).
    return 'an own "__proto__" key (JSON.parse of text holding one makes it: rename the key, or copy the value without it)';
  }
  if (/Promise or thenable/.test(said)) {
    return "a Promise or thenable (await it, and store what it resolves to)";
  }
  return said.replace(/^Cannot stringify /, "");
}

/** A value the encoder calls an "arbitrary non-POJO", as a user knows it: its class's
 *  name (code, never a payload) and what to store instead. */
function notPlainData(value: unknown): string {
  // A proxy of a Map or Date has not their internal slots: named by its target's class, it
  // was taken for a class instance the user never made.
  if (types.isProxy(value)) return "a Proxy (store the value it wraps, or a plain copy)";
  let name: unknown;
  let tag = "";
  try {
    name = Object.getPrototypeOf(value)?.constructor?.name;
    tag = Object.prototype.toString.call(value).slice(8, -1);
  } catch {
    // a proxy whose trap throws: nameless
  }
  if (/^Temporal\.\w{1,40}$/.test(tag)) {
    // A polyfill's (encoder-reads.ts): stored as one, only a global Temporal decodes it.
    return `a ${tag} not made by a global Temporal (store its toString() text)`;
  }
  if (name === "SharedArrayBuffer") return "a SharedArrayBuffer (copy its bytes into a Uint8Array)";
  if (typeof name !== "string" || !/^[\w$]{1,100}$/.test(name))
    return "a value that is not plain data";
  return `an instance of class ${name} (store its data as a plain object)`;
}

/** What a getter threw, as text (it may be anything, and String() itself may throw). */
function thrownText(err: unknown): string {
  try {
    return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  } catch {
    try {
      return Object.prototype.toString.call(err);
    } catch {
      return "a value that cannot be read"; // a proxy whose traps throw
    }
  }
}

export function decode<T = unknown>(text: string): T {
  // Encoded text never begins with a letter: this is a payload of an encrypted store read
  // through a store given no keys. It is refused naming the key (a worker pauses the run),
  // never parsed as data nor taken for a store failure to retry at once.
  const keyId = encryptedTextKeyId(text);
  if (keyId !== undefined) {
    throw new PayloadKeyError(
      `A stored payload is encrypted with key "${keyId}", and this store was given no keys; wrap it in encryptedStore(store, { keys }) (the CLI: CAIRN_ENCRYPTION_KEYS) with key "${keyId}" to read it`,
      { keyId },
    );
  }
  try {
    return devalue.parse(text, revivers) as T;
  } catch (err) {
    // Not the parser's message: it quotes the text, and a reason or log line never shows a
    // payload.
    throw new UndecodableError("cannot be decoded", { cause: err });
  }
}
