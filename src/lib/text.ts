// Text every backend stores exactly. Two kinds of string cannot be stored as they are:
// - NUL (U+0000): PostgreSQL text refuses it, and jsonb refuses the escape "\u0000";
// - a lone UTF-16 surrogate (half of a pair, e.g. an emoji cut in two by `slice`): it has no
//   UTF-8 form, so drivers silently write U+FFFD instead (SQLite, and PostgreSQL text), and
//   jsonb refuses its escape. First run and replay would then see different strings.
// So: values go through the codec, which escapes both (codec.ts); identifiers a user
// chooses are refused up front with a TypeError naming the field (checkText); and words
// cairn builds for people (a run's reason, a worker's host) are made storable (displayText).

// No `u` flag: the pattern must see the UTF-16 code units themselves.
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
// NUL is matched on purpose: it is one of the two things this file exists to find.
// biome-ignore lint/suspicious/noControlCharactersInRegex: NUL is what is being escaped
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** The first `n` code units of `s`, never ending in half a surrogate pair (what `slice`
 *  leaves when it cuts an emoji in two: a lone surrogate, shown as U+FFFD). */
export function leadingText(s: string, n: number): string {
  const cut = s.slice(0, n);
  const last = cut.charCodeAt(cut.length - 1);
  return last >= 0xd800 && last <= 0xdbff ? cut.slice(0, -1) : cut;
}

/** True when `s` has no lone surrogate (String.prototype.isWellFormed where it exists). */
export function isWellFormed(s: string): boolean {
  const native = (s as { isWellFormed?: () => boolean }).isWellFormed;
  if (native) return native.call(s);
  LONE_SURROGATE.lastIndex = 0;
  return !LONE_SURROGATE.test(s);
}

/** Why `s` cannot be stored exactly, or undefined when it can. */
export function unstorableText(s: string): string | undefined {
  if (s.includes("\u0000")) return "contains a NUL character (U+0000)";
  if (!isWellFormed(s)) {
    return "contains a lone surrogate (half of a UTF-16 pair, e.g. an emoji cut in two)";
  }
  return undefined;
}

/**
 * Refuses a user-chosen identifier (a run id, an event name, a step name, a cancel reason)
 * that no backend could store exactly: a TypeError naming `field`, e.g.
 * `checkText(name, 'ctx.step() name')`. Non-strings are left to the caller's own checks.
 */
export function checkText(value: unknown, field: string): void {
  if (typeof value !== "string") return;
  const why = unstorableText(value);
  if (why) {
    throw new TypeError(
      `${field} ${JSON.stringify(value.slice(0, 80))} ${why}; use text without NUL characters or broken UTF-16, which no store can hold exactly`,
    );
  }
}

/** `s` made storable for display: each NUL or lone surrogate becomes the visible escape
 *  "\u0000" / "\ud83d". For words meant for people (reasons, hosts), never for values. */
export function displayText(s: string): string {
  if (!s.includes("\u0000") && isWellFormed(s)) return s;
  return s.replace(UNSTORABLE, escapeUnit);
}

/** Escapes the lone surrogates of JSON text as JSON "\uXXXX" escapes: the text becomes
 *  well-formed and JSON.parse still reads back the very same string. A raw surrogate in
 *  JSON text can only stand inside a string literal, where such an escape is valid. */
export function escapeLoneSurrogatesInJson(json: string): string {
  if (isWellFormed(json)) return json;
  return json.replace(LONE_SURROGATE, escapeUnit);
}

function escapeUnit(c: string): string {
  return `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;
}

/** A value given where another kind was expected, as words for an error message: "an
 *  object with keys url, schema", "a number (5)", "undefined". */
export function describeArgument(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (typeof value === "object") {
    const keys = Object.keys(value).slice(0, 5);
    return keys.length === 0 ? "an empty object" : `an object with keys ${keys.join(", ")}`;
  }
  return `a ${typeof value} (${String(value).slice(0, 40)})`;
}

/** A name a caller gave, quoted for the message refusing it: at most 300 characters of a
 *  string (a name refused for its length may be megabytes long, and the message of an error
 *  that fails a run is stored with it, twice), and the type of anything else (JSON.stringify
 *  throws on a BigInt or a cycle, and says nothing of a symbol or a function). */
export function quoteGiven(value: unknown): string {
  if (typeof value !== "string") {
    const plain =
      value === null || value === undefined || ["number", "boolean"].includes(typeof value);
    return plain ? String(value) : `(a ${typeof value})`;
  }
  if (value.length <= 300) return JSON.stringify(value);
  // Whole code points: JSON.stringify escapes a lone half, but the cut must not make one.
  let cut = 300;
  const last = value.charCodeAt(cut - 1);
  if (last >= 0xd800 && last <= 0xdbff) cut--;
  return `${JSON.stringify(value.slice(0, cut))}… (${value.length} characters)`;
}
