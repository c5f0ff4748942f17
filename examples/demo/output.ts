// The demo's terminal output: colors when stdout is a terminal (and NO_COLOR is unset),
// one line at a time, columns padded by visible width.

const useColor = process.stdout.isTTY === true && !("NO_COLOR" in process.env);
const paint = (code: string) => (s: string) => (useColor ? `\x1b[${code}m${s}\x1b[0m` : s);
export const bold = paint("1");
export const dim = paint("2");
export const red = paint("31");
export const green = paint("32");
export const yellow = paint("33");
export const cyan = paint("36");

export function say(line = ""): void {
  process.stdout.write(`${line}\n`);
}

function visible(s: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: strips ANSI colors
  return s.replace(/\x1b\[[0-9;]*m/g, "");
}

export function pad(s: string, width: number): string {
  return s + " ".repeat(Math.max(0, width - visible(s).length));
}

export function padStart(s: string, width: number): string {
  return " ".repeat(Math.max(0, width - visible(s).length)) + s;
}

/** "12,345" */
export const count = (n: number) => n.toLocaleString("en-US");
