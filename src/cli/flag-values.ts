// Flag values and arguments turned into what the engine takes: whole numbers, durations,
// budgets, JSON (given or read from stdin). Each refuses bad text with a usage error that
// names the flag and shows a value that works. Text a user gives as data (an input, a
// payload) is never echoed back: it may hold secrets.

import { readFileSync } from "node:fs";
import { checkRunId } from "../engine/validate.js";
import { jsonNumberProblem } from "../http/json-numbers.js";
import type { Amounts } from "../index.js";
import { amountNameProblem } from "../lib/amounts.js";
import { toMs } from "../lib/duration.js";
import { UsageError } from "./command.js";

/** A run id given to --name, checked as the engine checks it, before any store is opened:
 *  the engine's refusal named its own call ("start(): run id ..."), not the flag. */
export function parseRunId(value: string, name: string): string {
  try {
    checkRunId(value, `--${name}`);
  } catch (err) {
    throw new UsageError((err as Error).message, { cause: err });
  }
  return value;
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

/** A Duration ("30s", "250ms", or a number of ms) given to --name, at least `minMs`. */
export function parseDuration(text: string, name: string, minMs: number): number {
  let ms: number;
  try {
    ms = toMs(/^\d+$/.test(text.trim()) ? Number(text) : text, `--${name}`);
  } catch (err) {
    // Too long is not too short: toMs's message says so ("longer than 100,000 years").
    // It names the value as given: a number of ms past 2^53 ("99999999999999999999") was
    // named as the number it rounds to (100000000000000000000).
    const message = (err as Error).message;
    if (/ is longer than /.test(message)) {
      throw new UsageError(
        message.replace(
          /^(--\S+): .*? is longer than /s,
          (_, flag: string) => `${flag}: ${JSON.stringify(text)} is longer than `,
        ),
      );
    }
    ms = Number.NaN;
  }
  if (!Number.isFinite(ms) || ms < minMs) {
    // Only examples the flag accepts: "500ms" for --expires (at least 1s) would be refused.
    const examples = ["30s", ...(minMs <= 500 ? ["500ms"] : []), "2m"].join(", ");
    throw new UsageError(
      `--${name} must be a duration of at least ${minMs}ms, e.g. ${examples} or a number of ms (got ${JSON.stringify(text)})`,
    );
  }
  return ms;
}

/** --budget "usd=2,tokens=1000" (repeatable) into { usd: 2, tokens: 1000 }. */
export function parseBudget(texts: string[]): Amounts {
  const budget: Amounts = {};
  for (const part of texts.flatMap((t) => t.split(","))) {
    const eq = part.indexOf("=");
    const name = part.slice(0, eq).trim();
    const raw = part.slice(eq + 1).trim();
    const amount = Number(raw);
    if (eq < 0 || name === "" || raw === "" || !Number.isFinite(amount) || amount < 0) {
      throw new UsageError(
        `--budget expects name=amount pairs with amounts >= 0, e.g. usd=2,tokens=1000 (got ${JSON.stringify(part)})`,
      );
    }
    // budget["__proto__"] = 1 would set nothing: the limit the user asked for would be
    // dropped without a word, and the run started without it.
    const problem = amountNameProblem(name);
    if (problem !== undefined) throw new UsageError(`--budget: ${problem}`);
    // "usd=1,usd=100" (or --budget given twice) is two limits for one name: which one was
    // meant is not for the CLI to guess.
    if (Object.hasOwn(budget, name)) {
      throw new UsageError(`--budget gives "${name}" more than once; give each name once`);
    }
    budget[name] = amount;
  }
  return budget;
}

/** JSON a user gives; `what` names it ("--input") and `examples` shows valid ones. */
export function parseJson(text: string, what: string, examples: string): unknown {
  // Empty stdin (`printf '' | cairn send id go -`) or `--input ''`: "not valid JSON" read as
  // a typo in text that was never there.
  if (text.trim() === "") throw new UsageError(`${what} is empty; give JSON (${examples})`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new UsageError(`${what} is not valid JSON (${examples})`);
  }
  // As the HTTP API: 1e400 would be stored as Infinity (and shown as null), a 64-bit id
  // as another integer. Nothing is stored; the message shows the number, not the value.
  const problem = jsonNumberProblem(text);
  if (problem) throw new UsageError(`${what} holds ${problem}; give it as a string (in quotes)`);
  return value;
}

/** Everything on stdin, for a value given as "-"; `what` names it ("the input"). */
export function readStdin(what: string): string {
  try {
    return readFileSync(0, "utf8");
  } catch (err) {
    throw new UsageError(`cannot read ${what} from stdin: ${(err as Error).message}`);
  }
}
