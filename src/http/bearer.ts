// What a token must be to travel as "Authorization: Bearer <token>": checked where tokens
// are configured (createHttpApp, cairn ui). No hono here: the CLI loads it without the app.

/** Why a token cannot be sent as "Authorization: Bearer <token>", or undefined when it can.
 *  A space, a line break (a secret file's trailing newline) or a character outside ASCII
 *  (a header carries bytes, read as Latin-1) would let the login form sign in while every
 *  API client got a 401 with the very same token. */
export function bearerProblem(token: string): string | undefined {
  if (/^[\x21-\x7e]+$/.test(token)) return undefined;
  const what = /[\r\n]/.test(token)
    ? "a line break (a trailing newline from a file?)"
    : /\s/.test(token)
      ? "a space"
      : // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is named
        /[\x00-\x1f\x7f]/.test(token)
        ? "a control character"
        : "a character outside ASCII";
  return `holds ${what}; it must be printable ASCII without spaces, as it is sent in an "Authorization: Bearer" header`;
}
