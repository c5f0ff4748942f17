// `cairn show <id>`: one run and its steps, with every attempt's error and spend.

import { RunNotFoundError, type RunView, type StepView } from "../../index.js";
import {
  type CliContext,
  type Command,
  expectPositionals,
  parseCommand,
  STORE_HELP,
  STORE_OPTIONS,
} from "../command.js";
import {
  formatAmounts,
  formatBudget,
  formatDuration,
  formatError,
  formatValue,
  iso,
  table,
  toJson,
} from "../format.js";
import { withClient } from "../store-spec.js";

export const show: Command = {
  name: "show",
  summary: "show a run and its steps",
  help: `Usage: cairn show <id> [--json]

Shows a run (status, reason, input, output or error, budget, what it waits for) and its
steps in call order (key, kind, status, attempts with their errors, spend, duration).

Options:
  --json            print {"run": ..., "steps": [...]} as JSON
  -h, --help        show this help

${STORE_HELP}`,

  async run(args: string[], ctx: CliContext): Promise<number> {
    const { values, positionals } = parseCommand(args, {
      ...STORE_OPTIONS,
      json: { type: "boolean" },
    });
    if (values.help) {
      ctx.out(show.help);
      return 0;
    }
    expectPositionals(positionals, ["id"]);
    const id = positionals[0]!;
    const { run, steps } = await withClient(values, ctx, async (engine) => {
      const run = await engine.getRun(id);
      if (!run) throw new RunNotFoundError(`Run "${id}" does not exist`);
      return { run, steps: await engine.getSteps(id) };
    });
    ctx.out(values.json ? toJson({ run, steps }, 2) : describeRun(run, steps));
    return 0;
  },
};

function describeRun(run: RunView, steps: StepView[]): string {
  const pad = " ".repeat(14);
  const field = (label: string, value: string) => `  ${label.padEnd(12)}${value}`;
  const lines = [
    `Run "${run.id}"`,
    field("workflow", `${run.workflow}@${run.version}`),
    field("status", run.status),
  ];
  if (run.reason) lines.push(field("reason", run.reason));
  if (run.waitingFor)
    lines.push(field("waiting for", run.waitingFor.map((e) => `"${e}"`).join(", ")));
  if (run.wakeAt) lines.push(field("wakes at", iso(run.wakeAt)));
  if (run.parentId) lines.push(field("parent", run.parentId));
  lines.push(field("created", iso(run.createdAt)), field("updated", iso(run.updatedAt)));
  lines.push(field("budget", formatBudget(run.budget)));
  lines.push(field("input", formatValue(run.input, pad)));
  if (run.status === "completed") lines.push(field("output", formatValue(run.output, pad)));
  if (run.error) lines.push(field("error", formatError(run.error)));

  lines.push("", steps.length === 0 ? "No steps recorded." : `Steps (${steps.length}):`);
  if (steps.length === 0) return lines.join("\n");
  lines.push(
    table(
      ["KEY", "KIND", "STATUS", "ATTEMPTS", "SPEND", "DURATION", "STARTED"],
      steps.map((s) => [
        s.key,
        s.kind,
        s.status,
        String(s.attempts.length),
        formatAmounts(s.spend),
        s.completedAt ? formatDuration(s.completedAt.getTime() - s.startedAt.getTime()) : "-",
        iso(s.startedAt),
      ]),
      "  ",
    ),
  );

  const problems: string[] = [];
  for (const s of steps) {
    let reported = false;
    for (const a of s.attempts) {
      if (!a.error) continue;
      reported = true;
      const retry = a.retryAt ? ` (retry at ${iso(a.retryAt)})` : "";
      problems.push(`  ${s.key} attempt ${a.attempt}: ${indentRest(formatError(a.error))}${retry}`);
    }
    if (s.error && !reported) problems.push(`  ${s.key}: ${indentRest(formatError(s.error))}`);
  }
  if (problems.length > 0) lines.push("", "Attempt errors:", ...problems);
  return lines.join("\n");
}

/** Keeps multi-line error messages under their step. */
function indentRest(text: string): string {
  return text.split("\n").join("\n    ");
}
