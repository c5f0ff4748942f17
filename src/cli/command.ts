// What every command shares: the Command shape, the context it runs in (output, env, cwd),
// the two expected kinds of failure — a usage error (exit 2) and a CLI error (exit 1);
// anything else is a bug — and defineCommand, which parses a command line once for every
// command: the store options, --help, unknown flags and the count of positionals.

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
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
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

/** Accepted by every command: every command touches a store. */
const STORE_OPTIONS = {
  store: { type: "string" },
  schema: { type: "string" },
} as const;

export const STORE_HELP = `Store options:
  --store <spec>    sqlite:<path>, a bare path (SQLite), or a postgres:// URL
                    (default: $CAIRN_STORE, else sqlite:.cairn/cairn.db)
  --schema <name>   PostgreSQL schema (default: $CAIRN_PG_SCHEMA, else "cairn")
Encrypted stores: $CAIRN_ENCRYPTION_KEYS="id=base64key[,id2=base64key2]" (the first
encrypts); without the key, a payload shows as [encrypted with key "id"].`;

const COMMON_OPTIONS = { ...STORE_OPTIONS, help: { type: "boolean", short: "h" } } as const;

type OptionsConfig = NonNullable<ParseArgsConfig["options"]>;

type Values<O extends OptionsConfig> = ReturnType<
  typeof parseArgs<{
    args: string[];
    options: typeof COMMON_OPTIONS & O;
    allowPositionals: true;
    strict: true;
  }>
>["values"];

/** The positionals by position: each required one a string, each optional one maybe not. */
type Positionals<R extends readonly string[], P extends readonly string[]> = [
  ...{ -readonly [K in keyof R]: string },
  ...{ -readonly [K in keyof P]: string | undefined },
];

export interface CommandLine<
  O extends OptionsConfig,
  R extends readonly string[],
  P extends readonly string[],
> {
  /** The options given (the store options included; --help never reaches a command). */
  values: Values<O>;
  positionals: Positionals<R, P>;
}

export interface CommandDefinition<
  O extends OptionsConfig,
  R extends readonly string[],
  P extends readonly string[],
> {
  name: string;
  summary: string;
  /** The help text above the store options, which are appended to it. */
  help: string;
  /** The command's own options; --store, --schema and --help are added. */
  options: O;
  /** The names of the required positionals, in order, as the help shows them (<id>). */
  positionals?: R;
  /** Optional positionals after the required ones. */
  optional?: P;
  run(line: CommandLine<O, R, P>, ctx: CliContext): Promise<number>;
}

/** A Command whose `run` gets its command line parsed and checked: `--help` prints the
 *  help (exit 0) without running it; an unknown flag, a missing value or a wrong count of
 *  positionals is a usage error naming it. */
export function defineCommand<
  const O extends OptionsConfig,
  const R extends readonly string[] = [],
  const P extends readonly string[] = [],
>(definition: CommandDefinition<O, R, P>): Command {
  const help = `${definition.help}\n\n${STORE_HELP}`;
  return {
    name: definition.name,
    summary: definition.summary,
    help,
    async run(args, ctx) {
      const { values, positionals } = parseCommandLine(args, definition.options);
      if (values.help) {
        ctx.out(help);
        return 0;
      }
      expectPositionals(positionals, definition.positionals ?? [], definition.optional ?? []);
      return definition.run(
        { values: values as Values<O>, positionals: positionals as Positionals<R, P> },
        ctx,
      );
    },
  };
}

/** parseArgs, strict, with the common options added; its errors become usage errors, and
 *  so does a value flag given twice. */
function parseCommandLine(args: string[], options: OptionsConfig) {
  const all: OptionsConfig = { ...COMMON_OPTIONS, ...options };
  const parsed = parseStrict(args, all);
  // parseArgs keeps the last of a value given twice, silently: "gc --older-than 30d
  // --older-than 1h" (an alias plus a flag; --store before and after the command) would
  // act on a value the user may not have meant. A value flag takes one value, or says so.
  const seen = new Set<string>();
  for (const token of parsed.tokens) {
    if (token.kind !== "option" || token.value === undefined || all[token.name]?.multiple) {
      continue;
    }
    if (seen.has(token.name)) {
      throw new UsageError(`--${token.name} is given more than once; give it once`);
    }
    seen.add(token.name);
  }
  return parsed;
}

function parseStrict(args: string[], options: OptionsConfig) {
  try {
    return parseArgs({ args, options, allowPositionals: true, strict: true, tokens: true });
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (typeof code === "string" && code.startsWith("ERR_PARSE_ARGS")) {
      // Node's first sentence names the option; the rest is advice about "--" that
      // rarely applies: except to a negative number (a JSON payload of -5), the one value
      // that would otherwise be refused with no way around it.
      const message = (err as Error).message;
      const first = message.split(". ")[0]!;
      const negative = /^Unknown option '-\d/.test(first)
        ? args.find((a) => /^-\d/.test(a))
        : undefined;
      throw new UsageError(
        code !== "ERR_PARSE_ARGS_UNKNOWN_OPTION"
          ? message
          : negative !== undefined
            ? `${first}: a value that starts with "-" goes after "--" (e.g. -- ${negative})`
            : first,
      );
    }
    throw err;
  }
}

/** Checks the positional arguments against `names` (required) then `optional`. */
function expectPositionals(
  positionals: string[],
  names: readonly string[],
  optional: readonly string[],
): void {
  const missing = names[positionals.length];
  if (missing !== undefined) throw new UsageError(`missing <${missing}>`);
  const extra = positionals[names.length + optional.length];
  if (extra !== undefined) throw new UsageError(`unexpected argument ${JSON.stringify(extra)}`);
}
