// `cairn resume <id>`: a paused (budget) or failed run continues from its first unfinished
// step, optionally with raised budget limits.

import type { Amounts, RunView } from "../../index.js";
import { amountOf, formatAmount } from "../../lib/amounts.js";
import { defineCommand } from "../command.js";
import { unservedWarning } from "../explain-run.js";
import { parseBudget } from "../flag-values.js";
import { formatBudget, printable, quoted, toJson } from "../format.js";
import { runAfter, withClient } from "../store-spec.js";

export const resume = defineCommand({
  name: "resume",
  summary: "resume a paused or failed run",
  help: `Usage: cairn resume <id> [--budget name=amount,...] [--json]

Continues a paused (budget) or failed run from its first unfinished step; a failed step
gets fresh attempts. A worker that has the run's workflow@version executes it. A child
whose parent run was canceled is not resumed (exit code 1): it would work for nobody.
A run paused for budget is paused again once its spend reaches a limit: resumed without
--budget, or with a limit not above what was spent, it is resumed with a warning. So is
a run no live worker serves (its workflow@version): it waits for a worker that does.

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
    const { run, before, unserved } = await withClient(values, ctx, async (engine) => {
      const before = await engine.getRun(id);
      await engine.resume(id, budget ? { budget } : {});
      const run = await runAfter(engine, id);
      // A run no live worker serves (paused for its version, or failed on a version since
      // retired) read as resumed, and a worker paused it again moments later.
      const unserved =
        run && !finished(run) ? unservedWarning(run, await engine.listWorkers()) : undefined;
      return { run, before, unserved };
    });
    if (unserved) ctx.err(unserved);
    // "Resumed" of a run paused for budget whose limits still hold it (no --budget, or one
    // not above what was spent: a run pauses once spent reaches a limit) read as done; the
    // run paused again at once.
    const warning =
      before?.pausedFor === "budget" && run ? budgetWarning(id, before, run, budget) : undefined;
    if (warning) ctx.err(warning);
    if (values.json) ctx.out(toJson(run, 2));
    else {
      ctx.out(`Resumed run ${quoted(id)} (status ${run?.status ?? "unknown"}).`);
      if (run && budget) ctx.out(`Budget: ${formatBudget(run.budget)}`);
    }
    return 0;
  },
});

function finished(run: RunView): boolean {
  return run.status === "completed" || run.status === "failed" || run.status === "canceled";
}

/** A warning for a run resumed from a budget pause that will pause again: resumed without
 *  --budget (its limits unchanged; the workflow's default limits, which the worker applies,
 *  are not in the run's view), or with limits spent has already reached. */
function budgetWarning(
  id: string,
  before: RunView,
  after: RunView,
  given: Amounts | undefined,
): string | undefined {
  if (given === undefined) {
    const why = (before.reason ?? "").replace(/^budget: /, "");
    return `cairn: warning: run ${quoted(id)} was paused for budget${why ? ` (${printable(why)})` : ""} and is resumed with its limits unchanged: it pauses again before its next attempt if they still hold it; raise them with --budget name=amount`;
  }
  const over = Object.entries(after.budget.limit)
    .filter(([name, limit]) => amountOf(after.budget.spent, name) >= limit)
    .map(
      ([name, limit]) =>
        `${name} ${formatAmount(amountOf(after.budget.spent, name))} of ${formatAmount(limit)}`,
    );
  if (over.length === 0) return undefined;
  return `cairn: warning: run ${quoted(id)} has spent what its budget allows (${over.join(", ")}): it pauses again before its next attempt; a limit must be above what was spent`;
}
