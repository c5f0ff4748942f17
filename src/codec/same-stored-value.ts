// Whether two stored texts hold the same value, as the code that stored them sees it: a run
// started again under its id with its input, an event sent again under its idempotency
// key, a replay's output against the recorded one. Equal text is the same value; other text
// may be too, for what the text keeps beyond the value:
// - an Error's stack names the files, lines and callers of the code that made it: the same
//   input made at another call site, or by the same code deployed at another path, is
//   another text. An Error counts by its other parts (as a child's input does, codec.ts
//   encodeIdentity); where one side's Error has no parts beyond its name, message, stack and
//   code (text written before ErrorWithProps dropped them), by its name, message and code;
// - a typed array or DataView showing part of its buffer was stored, before a3199a7, with
//   its whole buffer and an offset; it is now stored as the bytes it shows. Both count by
//   the bytes the view shows.
// Everything else counts as encoded: key order, -0, a Map's order, repeated references.

import * as devalue from "devalue";
import { arrayWithPropsParts } from "./array-parts.js";
import { decode, isError } from "./codec.js";
import { encoderReads } from "./encoder-reads.js";
import { errorPartsWithoutStack, hasExtraErrorParts } from "./error-parts.js";

/** True when `a` and `b`, two texts the codec wrote, hold the same value (see above). Text
 *  that cannot be decoded (damaged, or encrypted under a key not given) is only the same
 *  as equal text. */
export function sameStoredValue(a: string, b: string): boolean {
  if (a === b) return true;
  try {
    const [left, right] = [comparedTexts(decode(a)), comparedTexts(decode(b))];
    if (left.byParts === right.byParts) return true;
    // Text written before ErrorWithProps kept an Error's name, message, stack and code only:
    // an Error with no more parts may be one whose others were dropped. Its parts count only
    // where both sides have some.
    if (left.errorsWithParts && right.errorsWithParts) return false;
    return left.byName === right.byName;
  } catch {
    return false;
  }
}

/** A decoded value's text, with Errors by every part but their stack (`byParts`) and by
 *  name, message and code (`byName`), and views (through encoderReads) by the bytes they
 *  show; `errorsWithParts` when an Error in it has parts beyond those four. */
function comparedTexts(value: unknown): {
  byParts: string;
  byName: string;
  errorsWithParts: boolean;
} {
  let errorsWithParts = false;
  const byPartsReducers = {
    ...comparedReducers,
    Error: (v: unknown) => {
      if (isError(v) && hasExtraErrorParts(v)) errorsWithParts = true;
      return errorPartsWithoutStack(v);
    },
  };
  const byParts = devalue.stringify(value, byPartsReducers, encoderReads);
  return {
    byParts,
    byName: devalue.stringify(value, comparedReducers, encoderReads),
    errorsWithParts,
  };
}

const comparedReducers = {
  Error: (v: unknown) => isError(v) && [v.name, v.message, (v as { code?: unknown }).code],
  // As stored: read by encoderReads alone, it was refused, and so not the same as itself.
  ArrayWithProps: arrayWithPropsParts,
};
