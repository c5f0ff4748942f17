#!/usr/bin/env node
// The `cairn` command: picks the command, runs it, and turns expected failures into one
// line `cairn: <message>` and an exit code (1 error, 2 usage error) — never a stack trace.
// Unexpected errors (bugs) print their stack only with CAIRN_DEBUG=1.

import { readFileSync } from "node:fs";
import { CairnError } from "../index.js";
import { type CliContext, CliError, STORE_HELP, UsageError } from "./command.js";
import { COMMANDS } from "./commands/all.js";
import { terminalText } from "./format.js";

/** Options every command accepts, which may also come before the command name. */
const GLOBAL_WITH_VALUE = new Set(["--store", "--schema"]);

function overallHelp(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return `Usage: cairn <command> [options]

Inspect and control cairn runs, run workers, and serve the web dashboard.

Commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join("\n")}

Run "cairn <command> --help" for a command's options.

${STORE_HELP}

Other:
  -h, --help        show this help
  --version         print cairn's version
  CAIRN_DEBUG=1     print stack traces of unexpected errors`;
}

function version(): string {
  // src/cli/main.ts and dist/cli/main.js both sit two levels below package.json.
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"));
  return String(pkg.version);
}

async function main(argv: string[], ctx: CliContext): Promise<number> {
  const globals: string[] = [];
  let i = 0;
  while (i < argv.length) {
    const arg = argv[i]!;
    if (GLOBAL_WITH_VALUE.has(arg)) {
      // "cairn --store" alone was "unknown command \"--store\"": the option is known, its
      // value is what is missing.
      if (i + 1 >= argv.length) throw new UsageError(`${arg} needs a value (see "cairn --help")`);
      globals.push(arg, argv[i + 1]!);
      i += 2;
    } else if ([...GLOBAL_WITH_VALUE].some((g) => arg.startsWith(`${g}=`))) {
      globals.push(arg);
      i += 1;
    } else break;
  }
  const name = argv[i];
  const rest = argv.slice(i + 1);
  if (name === undefined) {
    ctx.err(overallHelp());
    return 2;
  }
  if (name === "-h" || name === "--help" || name === "help") {
    const topic = rest[0];
    const cmd = COMMANDS.find((c) => c.name === topic);
    if (topic !== undefined && !cmd) throw new UsageError(unknownCommand(topic));
    ctx.out(cmd ? cmd.help : overallHelp());
    return 0;
  }
  if (name === "--version" || name === "-v") {
    ctx.out(version());
    return 0;
  }
  const cmd = COMMANDS.find((c) => c.name === name);
  if (!cmd) throw new UsageError(unknownCommand(name));
  try {
    return await cmd.run([...globals, ...rest], ctx);
  } catch (err) {
    if (err instanceof UsageError) {
      throw new UsageError(`${err.message}\nRun "cairn ${cmd.name} --help" for usage.`, {
        cause: err.cause,
      });
    }
    throw err;
  }
}

function unknownCommand(name: string): string {
  return `unknown command ${JSON.stringify(name)}; commands: ${COMMANDS.map((c) => c.name).join(", ")} (see "cairn --help")`;
}

/** The exit code for an error, after printing it. */
function report(err: unknown, ctx: CliContext): number {
  const debug = Boolean(ctx.env.CAIRN_DEBUG);
  if (err instanceof UsageError || err instanceof CairnError || err instanceof CliError) {
    ctx.err(`cairn: ${err.message}`);
    if (debug && err.cause instanceof Error) ctx.err(err.cause.stack ?? String(err.cause));
    return err instanceof UsageError ? 2 : 1;
  }
  const message = err instanceof Error ? err.message : String(err);
  ctx.err(`cairn: unexpected error: ${message}`);
  ctx.err(
    debug && err instanceof Error
      ? (err.stack ?? "")
      : "(set CAIRN_DEBUG=1 to see the stack trace; please report it)",
  );
  return 1;
}

/** Exits once everything written has been handed to the OS. */
function exit(code: number): void {
  let pending = 2;
  const done = () => {
    if (--pending === 0) process.exit(code);
  };
  process.stdout.write("", done);
  process.stderr.write("", done);
}

// `cairn runs | head` closes the pipe early: that is not an error. A reader that goes
// away (either stream) only means nobody reads what follows: the command goes on, and a
// worker still stops gracefully when told to. An unheard 'error' would kill the process.
const gone = { out: false, err: false };
process.stdout.on("error", () => {
  gone.out = true;
});
process.stderr.on("error", () => {
  gone.err = true;
});

const ctx: CliContext = {
  env: process.env,
  cwd: process.cwd(),
  // Whatever a command prints may hold text from runs (ids, step keys, errors, comments
  // written through an approval link): none of it may drive the terminal.
  out: (text) => {
    if (!gone.out) process.stdout.write(`${terminalText(text)}\n`);
  },
  err: (text) => {
    if (!gone.err) process.stderr.write(`${terminalText(text)}\n`);
  },
};

main(process.argv.slice(2), ctx).then(exit, (err: unknown) => exit(report(err, ctx)));
