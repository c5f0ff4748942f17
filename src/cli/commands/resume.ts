// `cairn resume <id>`: a paused (budget) or failed run continues from its first unfinished
// step, optionally with raised budget limits.

import type { Amounts } from "../../index.js";
import {
  type CliContext,
  type Command,
  expectPositionals,
  parseCommand,
  STORE_HELP,
  STORE_OPTIONS,
  UsageError,
} from "../command.js";
import { formatBudget, toJson } from "../format.js";
import { withClient } from "../store-spec.js";

export const resume: Command = {
  name: "resume",
  summary: "resume a paused or failed run",
  help: `Usage: cairn resume <id> [--budget name=amount,...] [--json]

Continues a paused (budget) or failed run from its first unfinished step; a failed step
gets fresh attempts. A worker that has the run's workflow@version executes it.

Options:
  --budget <b>      raise (or set) named limits, e.g. usd=2,tokens=100000;
                    limits not named are unchanged
  --json            print the run afterwards as JSON
  -h, --help        show this help

${STORE_HELP}`,

  async run(args: string[], ctx: CliContext): Promise<number> {
    const { values, positionals } = parseCommand(args, {
      ...STORE_OPTIONS,
      budget: { type: "string", multiple: true },
      json: { type: "boolean" },
    });
    if (values.help) {
      ctx.out(resume.help);
      return 0;
    }
    expectPositionals(positionals, ["id"]);
    const id = positionals[0]!;
    const budget = values.budget === undefined ? undefined : parseBudget(values.budget);
    const run = await withClient(values, ctx, async (engine) => {
      await engine.resume(id, budget ? { budget } : {});
      return engine.getRun(id);
    });
    if (values.json) ctx.out(toJson(run, 2));
    else {
      ctx.out(`Resumed run "${id}" (status ${run?.status ?? "unknown"}).`);
      if (run && budget) ctx.out(`Budget: ${formatBudget(run.budget)}`);
    }
    return 0;
  },
};

/** "usd=2,tokens=1000" (repeatable) into { usd: 2, tokens: 1000 }. */
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
    budget[name] = amount;
  }
  return budget;
}
