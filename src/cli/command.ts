// What every command shares: the Command shape, the context it runs in (output, env, cwd),
// argument parsing with the options every command accepts, and the two expected kinds of
// failure — a usage error (exit 2) and a CLI error (exit 1). Anything else is a bug.

import { type ParseArgsConfig, parseArgs } from "node:util";

export interface CliContext {
  /** Environment variables: read here and nowhere else in cairn. */
  readonly env: NodeJS.ProcessEnv;
  readonly cwd: string;
  /** Writes a line (or lines) to stdout. */
  out(text: string): void;
  /** Writes a line (or lines) to stderr. */
  err(text: string): void;
}

export interface Command {
  readonly name: string;
  /** One line for the overall help. */
  readonly summary: string;
  /** The full `cairn <name> --help` text. */
  readonly help: string;
  /** Resolves with the exit code. Throws UsageError or CliError for expected failures. */
  run(args: string[], ctx: CliContext): Promise<number>;
}

/** The command line is wrong: exit code 2, with a pointer to --help. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** An expected failure of the CLI itself (a module that cannot be loaded, ...): exit 1. */
export class CliError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "CliError";
  }
}

/** Accepted by every command that touches a store. */
export const STORE_OPTIONS = {
  store: { type: "string" },
  schema: { type: "string" },
} as const;

export const STORE_HELP = `Store options:
  --store <spec>    sqlite:<path>, a bare path (SQLite), or a postgres:// URL
                    (default: $CAIRN_STORE, else sqlite:.cairn/cairn.db)
  --schema <name>   PostgreSQL schema (default: $CAIRN_PG_SCHEMA, else "cairn")`;

const HELP_OPTION = { help: { type: "boolean", short: "h" } } as const;

type OptionsConfig = NonNullable<ParseArgsConfig["options"]>;

type Parsed<O extends OptionsConfig> = ReturnType<
  typeof parseArgs<{
    args: string[];
    options: typeof HELP_OPTION & O;
    allowPositionals: true;
    strict: true;
  }>
>;

/** parseArgs, strict, with --help added; its errors become usage errors. */
export function parseCommand<const O extends OptionsConfig>(args: string[], options: O): Parsed<O> {
  try {
    return parseArgs({
      args,
      options: { ...HELP_OPTION, ...options },
      allowPositionals: true,
      strict: true,
    });
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (typeof code === "string" && code.startsWith("ERR_PARSE_ARGS")) {
      // Node's first sentence names the option; the rest is advice about "--" that
      // rarely applies.
      const message = (err as Error).message;
      throw new UsageError(
        code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" ? message.split(". ")[0]! : message,
      );
    }
    throw err;
  }
}

/** Checks the positional arguments against `names` (required) then `optional`. */
export function expectPositionals(
  positionals: string[],
  names: string[],
  optional: string[] = [],
): void {
  const missing = names[positionals.length];
  if (missing !== undefined) throw new UsageError(`missing <${missing}>`);
  const extra = positionals[names.length + optional.length];
  if (extra !== undefined) throw new UsageError(`unexpected argument ${JSON.stringify(extra)}`);
}

/** A whole number >= min given to --name. */
export function parseWholeNumber(value: string, name: string, min: number): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min) {
    throw new UsageError(
      `--${name} must be a whole number >= ${min} (got ${JSON.stringify(value)})`,
    );
  }
  return n;
}
