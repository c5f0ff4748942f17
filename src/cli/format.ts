// Human and machine output: aligned tables, ISO dates, durations, amounts, and JSON that
// survives the values the codec stores (bigint, Map, Set) instead of throwing on them.

import { withheldFields } from "../engine/views.js";
import { toJsonValue } from "../http/json.js";
import { type Amounts, EncryptedValue, UndecodableValue } from "../index.js";
import { amountOf, formatAmount } from "../lib/amounts.js";
import { leadingText } from "../lib/text.js";

export function iso(date: Date | undefined): string {
  return date ? date.toISOString() : "-";
}

/** 850ms, 1.2s, 3m 20s, 2h 5m, 2d 3h. */
export function formatDuration(ms: number): string {
  if (ms < 1_000) return `${Math.max(0, Math.round(ms))}ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(1).replace(/\.0$/, "")}s`;
  const s = Math.floor(ms / 1_000);
  if (s < 3_600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86_400) return `${Math.floor(s / 3_600)}h ${Math.floor((s % 3_600) / 60)}m`;
  return `${Math.floor(s / 86_400)}d ${Math.floor((s % 86_400) / 3_600)}h`;
}

/** "tokens=1200 usd=0.03" (names sorted), or "-" when empty. */
export function formatAmounts(amounts: Amounts): string {
  const entries = Object.entries(amounts).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (entries.length === 0) return "-";
  return entries.map(([k, v]) => `${k}=${formatAmount(v)}`).join(" ");
}

/** "tokens 1200 (no limit), usd 1.2 of 5" (names sorted), or "no limit, nothing spent". A
 *  view made without the workflow's code (`defaultsUnknown`) cannot tell "no limit" from a
 *  limit of the workflow's default budget, and says so, once. `otherNames`: also say that
 *  names not shown may have the workflow's default limits (`cairn start`), unless that
 *  sentence says it already. */
export function formatBudget(
  budget: {
    limit: Amounts;
    spent: Amounts;
    defaultsUnknown?: boolean;
  },
  o: { otherNames?: boolean } = {},
): string {
  const names = [...new Set([...Object.keys(budget.limit), ...Object.keys(budget.spent)])].sort();
  const unknown = budget.defaultsUnknown === true;
  // Said once, after the amounts: the names with no limit given may have the workflow's.
  const defaults =
    "; where the run was given no limit, the workflow's default budget, if any, applies";
  if (names.length === 0) {
    return unknown ? `nothing spent${defaults}` : "no limit, nothing spent";
  }
  let unlimited = false;
  const amounts = names
    .map((name) => {
      const spent = formatAmount(amountOf(budget.spent, name));
      const limit = budget.limit[name];
      if (limit !== undefined) return `${name} ${spent} of ${formatAmount(limit)}`;
      unlimited = true;
      return unknown ? `${name} ${spent} (no limit given)` : `${name} ${spent} (no limit)`;
    })
    .join(", ");
  if (unknown && unlimited) return `${amounts}${defaults}`;
  return o.otherNames ? `${amounts} (the workflow's defaults apply to other names)` : amounts;
}

export function formatError(e: {
  name: string;
  code?: string | undefined;
  message: string;
}): string {
  return `${e.name}${e.code ? ` [${e.code}]` : ""}: ${e.message}`;
}

/** One line: whitespace runs (newlines included) become one space; cut at `max`. */
export function oneLine(text: string, max = Number.POSITIVE_INFINITY): string {
  const flat = text.replace(/\s+/g, " ").trim();
  // Never inside a surrogate pair: half an emoji prints as U+FFFD.
  return flat.length > max ? `${leadingText(flat, max - 1)}…` : flat;
}

/** `text` on one line: line breaks shown escaped, as in JSON (unlike oneLine, which folds
 *  them into spaces: an id "a\nb" must not read as another id "a b"). */
export function escapeLineBreaks(text: string): string {
  return text.replaceAll("\n", "\\n").replaceAll("\r", "\\r");
}

/** Columns padded to their widest cell; the last column is not padded. A line break in a
 *  cell (an id is any text) is shown escaped, as in JSON: a row is one line, never two; so
 *  is another control character, here rather than only on output (main.ts), so that the
 *  widths are those of the text shown ("\u001b" takes six columns, not one). */
export function table(headers: string[], given: string[][], indent = ""): string {
  const rows = given.map((r) => r.map((cell) => terminalText(escapeLineBreaks(cell))));
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) =>
    indent +
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join("  ")
      .trimEnd();
  return [line(headers), ...rows.map(line)].join("\n");
}

/** A record (a run, a step, an event, an approval) with `withheld: { field: why }` naming
 *  its values that are placeholders: their JSON text (`[encrypted with key "k1"]`) could be
 *  a user's string. Only inspection's records hold such values, never a decoded one. */
function withWithheld(record: Record<string, unknown>): Record<string, unknown> {
  const withheld = withheldFields(record);
  if (!withheld) return record;
  // A view names its placeholder text (a reason, a comment) in its own `withheld` field.
  // Only a view holds a withheld value, so a user's object is never merged with.
  return { ...record, withheld: { ...(record.withheld as object | undefined), ...withheld } };
}

/** JSON for anything a run may hold, as the HTTP API writes it (toJsonValue): Dates as ISO
 *  strings, bigints as strings, Maps as objects (or [key, value] pairs), Sets and typed
 *  arrays as arrays, NaN and ±Infinity as strings, a value met again inside itself as
 *  "[Circular]". JSON.stringify would throw on a cycle (a run's output that holds itself
 *  made `cairn show` an unexpected error) and write NaN, Infinity and bytes as what they
 *  are not (null, an object of indices). */
export function toJson(value: unknown, indent?: number): string {
  return JSON.stringify(toJsonValue(value, { record: withWithheld }), null, indent) ?? "undefined";
}

/** A stored value for humans: compact JSON, or indented (by `indent`) when long. */
export function formatValue(value: unknown, indent: string): string {
  if (value === undefined) return "(none)";
  // Placeholders (a value encrypted with a key not given, one that cannot be decoded) read
  // as what they say, not as a quoted string.
  if (value instanceof EncryptedValue || value instanceof UndecodableValue) return String(value);
  const compact = toJson(value);
  if (compact.length <= 80) return compact;
  return cutShown(toJson(value, 2)).split("\n").join(`\n${indent}`);
}

/** The most of one value `cairn show` prints: a run's 1 MB input printed whole buried the
 *  rest of the run. `--json` prints every value whole. */
export const SHOWN_VALUE_CHARS = 4_000;

/** `text` cut at SHOWN_VALUE_CHARS (never inside a surrogate pair), saying how much more
 *  there is and where to see it. */
export function cutShown(text: string): string {
  if (text.length <= SHOWN_VALUE_CHARS) return text;
  let end = SHOWN_VALUE_CHARS;
  const last = text.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--;
  const more = (text.length - end).toLocaleString("en-US");
  return `${text.slice(0, end)}… (${more} more characters: cairn show --json prints it whole)`;
}

/** Text from a user (an event name) safe to print on a terminal: control characters and
 *  lone surrogates as JSON escapes (\u001b, \n, \ud83d), the rest as it is. */
export function printable(text: string): string {
  return JSON.stringify(text).slice(1, -1).replaceAll('\\"', '"').replaceAll("\\\\", "\\");
}

/** `printable` in double quotes. */
export function quoted(text: string): string {
  return `"${printable(text)}"`;
}

/** `text` as one shell word (bash, zsh) to paste into a command: as it is when it is only
 *  safe characters, else in single quotes, or as $'...' with escapes when it holds a line
 *  break or another control character (in single quotes it would still break the line). */
export function shellArg(text: string): string {
  if (/^[\w@%+=:,./-]+$/.test(text)) return text;
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is escaped
  if (!/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/.test(text)) {
    return `'${text.replaceAll("'", "'\\''")}'`;
  }
  return `$'${JSON.stringify(text).slice(1, -1).replaceAll("'", "\\'")}'`;
}

/** Characters a terminal acts on instead of showing: C0 controls but tab and newline (ESC
 *  starts sequences that clear the screen, retitle the window, hide or fake text; CR and
 *  backspace overwrite what was printed), DEL, C1 controls (U+009B is CSI), and the bidi
 *  overrides and isolates that make text read in another order than it is. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is escaped
const TERMINAL_CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/** Text for a terminal: each such character as a visible JSON escape ("\u001b"). JSON
 *  output stays valid and reads back the same: outside strings JSON has none of them. */
export function terminalText(text: string): string {
  return text.replace(
    TERMINAL_CONTROLS,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}
