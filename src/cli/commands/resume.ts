// `cairn resume <id>`: a paused (budget) or failed run continues from its first unfinished
// step, optionally with raised budget limits.

import { defineCommand } from "../command.js";
import { parseBudget } from "../flag-values.js";
import { formatBudget, quoted, toJson } from "../format.js";
import { runAfter, withClient } from "../store-spec.js";

export const resume = defineCommand({
  name: "resume",
  summary: "resume a paused or failed run",
  help: `Usage: cairn resume <id> [--budget name=amount,...] [--json]

Continues a paused (budget) or failed run from its first unfinished step; a failed step
gets fresh attempts. A worker that has the run's workflow@version executes it. A child
whose parent run was canceled is not resumed (exit code 1): it would work for nobody.

Options:
  --budget <b>      raise (or set) named limits, e.g. usd=2,tokens=100000;
                    limits not named are unchanged
  --json            print the run afterwards as JSON
  -h, --help        show this help`,
  options: {
    budget: { type: "string", multiple: true },
    json: { type: "boolean" },
  },
  positionals: ["id"],

  async run({ values, positionals: [id] }, ctx) {
    const budget = values.budget === undefined ? undefined : parseBudget(values.budget);
    const run = await withClient(values, ctx, async (engine) => {
      await engine.resume(id, budget ? { budget } : {});
      return runAfter(engine, id);
    });
    if (values.json) ctx.out(toJson(run, 2));
    else {
      ctx.out(`Resumed run ${quoted(id)} (status ${run?.status ?? "unknown"}).`);
      if (run && budget) ctx.out(`Budget: ${formatBudget(run.budget)}`);
    }
    return 0;
  },
});
