// Free text (an error's message and stack) is stored as it is, in the columns where an
// encrypted store keeps `cairn:enc:1:<key id>:<base64>`. A message that begins the same way
// (an error quoting a payload, a model's reply) was read back as an encrypted payload: shown
// as "[encrypted with key ...]", or refused for a missing key by a store that encrypts
// later, and the run paused for ever. So such text is stored escaped, "cairn:enc:0:" (the
// envelope's version 0: plain) before it. Stored text that begins like an envelope of a
// version other than 0 is always one, and version 0 is always followed by the marker again
// (so a 1 flipped to 0 reads as damage, not as plain text). Text a person chooses (a cancel reason, an approval
// comment) is refused instead when it begins so (engine/validate.ts, approval-answer.ts).

/** How every encrypted text payload begins (codec/encryption.ts). */
export const ENVELOPE = "cairn:enc:";
/** How plain text that begins like one is stored. */
export const PLAIN = `${ENVELOPE}0:`;

/** True for text that would read back as an encrypted payload if stored as it is. */
export function looksLikeEnvelope(text: string): boolean {
  return text.startsWith(ENVELOPE);
}

/** `text` as stored: itself, or escaped when it begins like an encrypted payload. */
export function toStoredText(text: string): string {
  return looksLikeEnvelope(text) ? PLAIN + text : text;
}

/** The text `stored` holds (what toStoredText was given). Only PLAIN followed by the
 *  marker again is an escape (toStoredText writes no other): text stored as it was by a
 *  cairn before the escape ("cairn:enc:0:hello", an error of a run recorded then) is
 *  itself, never "hello", or a replay of that run would be handed other text. */
export function fromStoredText(stored: string): string {
  return isEscaped(stored) ? stored.slice(PLAIN.length) : stored;
}

/** True for text toStoredText escaped: PLAIN, then the marker again. */
export function isEscaped(stored: string): boolean {
  return stored.startsWith(PLAIN) && stored.startsWith(ENVELOPE, PLAIN.length);
}
