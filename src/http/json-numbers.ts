// Numbers in JSON text that JSON.parse would turn into other numbers. A body sent to the
// HTTP API and a value given to the CLI (--input, an event's payload, --answer) are both
// refused with the same words: recorded, such a number would be a value nobody sent.

const JSON_NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;

/** An integer as JSON.stringify writes it, without an exponent ("1e+22" is
 *  "10000000000000000000000"): what an integer literal reads back as. */
function integerText(value: number): string {
  const text = String(value);
  const m = /^(-?)(\d)(?:\.(\d+))?e\+(\d+)$/.exec(text);
  if (!m) return text;
  const digits = `${m[2]}${m[3] ?? ""}`;
  return `${m[1]}${digits.padEnd(Number(m[4]) + 1, "0")}`;
}

/** "the number <literal>, which cannot be stored as sent: <why>" for the first number in
 *  JSON text that JSON.parse would turn into another one: an integer beyond 2^53 that reads
 *  back as another integer (a 64-bit id rounded), a number out of range made Infinity or 0.
 *  An integer that reads back as written (12345678901234567000, what JSON.stringify writes
 *  for that double) is kept, and numbers with a fraction or an exponent are read as the
 *  nearest double, as JSON senders expect. Undefined when there is none. `text` is valid
 *  JSON. */
export function jsonNumberProblem(text: string): string | undefined {
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const ch = text.charCodeAt(i);
    if (ch === 0x22) {
      // A string: skip to its closing quote (past escapes).
      for (i++; i < n; i++) {
        const d = text.charCodeAt(i);
        if (d === 0x5c) i++;
        else if (d === 0x22) break;
      }
      continue;
    }
    if (ch !== 0x2d && (ch < 0x30 || ch > 0x39)) continue;
    JSON_NUMBER.lastIndex = i;
    const m = JSON_NUMBER.exec(text);
    if (!m) continue;
    const literal = m[0];
    i += literal.length - 1;
    const value = Number(literal);
    const mantissa = literal.split(/[eE]/)[0]!;
    const changed = !Number.isFinite(value)
      ? "it is out of range (it would become Infinity)"
      : value === 0 && /[1-9]/.test(mantissa)
        ? "it is too small (it would become 0)"
        : m[1] === undefined && m[2] === undefined && !Number.isSafeInteger(value)
          ? integerText(value) === literal
            ? undefined
            : `integers are exact only up to 2^53 - 1 (it would become ${integerText(value)})`
          : undefined;
    if (changed) {
      const shown = literal.length > 40 ? `${literal.slice(0, 40)}…` : literal;
      return `the number ${shown}, which cannot be stored as sent: ${changed}`;
    }
  }
  return undefined;
}
