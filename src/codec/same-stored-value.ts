// Whether two stored texts hold the same value, as the code that stored them sees it: a run
// started again under its id with its input, an event sent again under its idempotency
// key, a replay's output against the recorded one. Equal text is the same value; other text
// may be too, for what the text keeps beyond the value:
// - an Error's stack names the files, lines and callers of the code that made it: the same
//   input made at another call site, or by the same code deployed at another path, is
//   another text. An Error counts by its name, message and code (as a child's input does,
//   codec.ts encodeIdentity);
// - a typed array or DataView showing part of its buffer was stored, before a3199a7, with
//   its whole buffer and an offset; it is now stored as the bytes it shows. Both count by
//   the bytes the view shows.
// Everything else counts as encoded: key order, -0, a Map's order, repeated references.

import * as devalue from "devalue";
import { arrayWithPropsParts } from "./array-parts.js";
import { decode, isError } from "./codec.js";
import { encoderReads } from "./encoder-reads.js";

/** True when `a` and `b`, two texts the codec wrote, hold the same value (see above). Text
 *  that cannot be decoded (damaged, or encrypted under a key not given) is only the same
 *  as equal text. */
export function sameStoredValue(a: string, b: string): boolean {
  if (a === b) return true;
  try {
    return comparedText(decode(a)) === comparedText(decode(b));
  } catch {
    return false;
  }
}

/** A decoded value's text, with Errors by name, message and code, and views (through
 *  encoderReads) by the bytes they show. */
function comparedText(value: unknown): string {
  return devalue.stringify(value, comparedReducers, encoderReads);
}

const comparedReducers = {
  Error: (v: unknown) => isError(v) && [v.name, v.message, (v as { code?: unknown }).code],
  // As stored: read by encoderReads alone, it was refused, and so not the same as itself.
  ArrayWithProps: arrayWithPropsParts,
};
