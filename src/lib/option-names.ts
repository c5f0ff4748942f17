// Options handed to a call whose names it does not take: a misspelling (`timeOut`, `retries`,
// `ignores`) that the call would otherwise drop silently, running without what was meant (an
// approval with no deadline, a workspace storing what it should ignore). TypeScript checks
// excess properties of object literals only; an options object built elsewhere, or plain
// JavaScript, reaches the call as it is.

/** The own enumerable keys of `options` that are not in `known` (none for a non-object). */
export function unknownOptionNames(options: unknown, known: readonly string[]): string[] {
  if (typeof options !== "object" || options === null) return [];
  return Object.keys(options).filter((k) => !known.includes(k));
}

/** `unknown option "x"; the options are a, b, c` (for a TypeError's message). */
export function unknownOptionsText(names: readonly string[], known: readonly string[]): string {
  const s = names.length > 1 ? "s" : "";
  return `unknown option${s} ${names.map((n) => JSON.stringify(n)).join(", ")}; the options are ${known.join(", ")}`;
}
