// `cairn start <workflow>[@version]`: starts a run without importing the workflow's code.
// Without @version the run is pinned to the newest version a live worker serves. Starting
// an id again is idempotent for the same input (said so, nothing created) and refused for
// another input (RunConflictError), so a retried script never runs the work twice.

import { RunConflictError, type RunView } from "../../index.js";
import { CliError, defineCommand, UsageError } from "../command.js";
import { unservedWarning } from "../explain-run.js";
import { parseBudget, parseJson, parseRunId, readStdin } from "../flag-values.js";
import { formatBudget, printable, quoted, shellArg, toJson } from "../format.js";
import {
  NOT_FINISHED_EXIT,
  printOutcome,
  runOutcome,
  STOPPED_EXIT,
  waitOption,
} from "../run-result.js";
import { refusePlainTextStart, withClient } from "../store-spec.js";

export const start = defineCommand({
  name: "start",
  summary: "start a run of a workflow by name",
  help: `Usage: cairn start <workflow>[@<version>] [--input <json>] [--id <id>] [--budget name=amount,...] [--wait [--timeout <d>]] [--json]

Starts a run of <workflow> and prints its id; a worker serving the workflow executes it.
Without @<version> the run is pinned to the newest version a live worker serves (start a
worker first, or give the version). This command does not load the workflow's code, so
its input schema is not checked here: start from code (engine.start(workflow, input))
for that.

Starting an id that exists already with the same input starts nothing and says so; with
another input it is refused (exit 1): a run's input never changes. A run no live worker
serves (a version typo, no worker running) is started all the same, with a warning.

--wait starts the run and waits for it to finish, then prints as "cairn result" does: its
output as JSON on stdout (what this command says of the start goes to stderr), or its
error on stderr; the exit code is cairn result's. Stopping the wait (Ctrl+C) does nothing to
the run: it says so, exit ${STOPPED_EXIT}. Without --wait it ends with how to follow the run
(cairn show) and wait for its output (cairn result --wait).

Examples:
  cairn start triage --input '{"issue": 42}' --id triage-42
  cairn start triage@2 --input - --budget usd=2 < input.json
  cairn start triage --input '{"issue": 42}' --wait --timeout 10m

Options:
  --input <json>    the run's input as JSON ("-" reads it from stdin); default: none
  --id <id>         the run's id (default: a new run_... id)
  --budget <b>      the run's limits, e.g. usd=2,tokens=100000; they replace the
                    workflow's default limits of the same names
  --wait            wait for the run to finish and print its output (see cairn result)
  --timeout <d>     with --wait: give up after d (e.g. 30s, 10m; then exit ${NOT_FINISHED_EXIT}); default:
                    no limit
  --json            print {"created", "run"} as JSON; with --wait, cairn result's JSON
                    and "created"
  -h, --help        show this help`,
  options: {
    input: { type: "string" },
    id: { type: "string" },
    budget: { type: "string", multiple: true },
    json: { type: "boolean" },
    wait: { type: "boolean" },
    timeout: { type: "string" },
  },
  positionals: ["workflow"],

  async run({ values, positionals: [ref] }, ctx) {
    if (ref === "" || ref.startsWith("@") || ref.endsWith("@")) {
      throw new UsageError(`<workflow> must be NAME or NAME@VERSION (got ${JSON.stringify(ref)})`);
    }
    const input =
      values.input === undefined
        ? undefined
        : parseJson(
            values.input === "-" ? readStdin("the input") : values.input,
            "--input",
            `quote strings: '"text"'; objects: '{"issue": 42}'`,
          );
    const budget = values.budget === undefined ? undefined : parseBudget(values.budget);
    if (values.id !== undefined) parseRunId(values.id, "id");
    const wait = waitOption(values);
    const { started, run, unserved, outcome } = await withClient(
      values,
      ctx,
      async (engine) => {
        if (input !== undefined) await refusePlainTextStart(engine, ctx.env);
        const started = await engine
          .start(ref, input, {
            ...(values.id !== undefined ? { id: values.id } : {}),
            ...(budget ? { budget } : {}),
          })
          .catch(async (err: unknown) => {
            // The engine's advice for another input under the id is for code
            // (engine.handle); here the run is followed with cairn show.
            const taken = values.id !== undefined ? await engine.getRun(values.id) : undefined;
            if (err instanceof RunConflictError && taken && taken.workflow === ref.split("@")[0]) {
              throw new CliError(
                `Run ${quoted(taken.id)} already exists with a different input, and a run's input never changes: nothing was started. Choose another --id, or follow that run with: cairn show ${shellArg(taken.id)}`,
                { cause: err },
              );
            }
            throw err;
          });
        const run = await started.info();
        // A version no live worker serves (a typo: triage@3 for triage@2) made a run that
        // stays pending, with nothing said: it is started all the same, and said so.
        const unserved =
          started.created && run ? unservedWarning(run, await engine.listWorkers()) : undefined;
        if (!wait) return { started, run, unserved, outcome: undefined };
        // Said before the wait, which may be long: what was started, and why it may not end.
        if (unserved) ctx.err(unserved);
        if (!values.json) describeStart(started, run, ref, ctx.err);
        // A run found under the id (nothing started) was not warned of above.
        const outcome = await runOutcome(engine, started.id, wait, ctx, {
          warnUnserved: !started.created,
          sayWaiting: !values.json,
        });
        return { started, run, unserved: undefined, outcome };
      },
      { refused: "nothing was started" },
    );
    if (outcome) {
      return printOutcome(outcome, ctx, {
        json: values.json === true,
        extra: { created: started.created },
      });
    }
    if (unserved) ctx.err(unserved);
    if (values.json) {
      ctx.out(toJson({ created: started.created, run }, 2));
      return 0;
    }
    describeStart(started, run, ref, ctx.out);
    ctx.out(
      `Follow it with: cairn show ${shellArg(started.id)}; wait for its output: cairn result ${shellArg(started.id)} --wait`,
    );
    return 0;
  },
});

/** What was started (or found under the id), and its budget, through `say`. */
function describeStart(
  started: { id: string; created: boolean },
  run: RunView | undefined,
  ref: string,
  say: (text: string) => void,
): void {
  const at = run ? `${run.workflow}@${run.version}` : ref;
  say(
    started.created
      ? `Started run ${quoted(started.id)} of ${printable(at)}.`
      : `Run ${quoted(started.id)} of ${printable(at)} already exists with this input (status ${run?.status ?? "unknown"}); nothing new was started.`,
  );
  if (run && Object.keys(run.budget.limit).length > 0) {
    say(`Budget: ${formatBudget(run.budget, { otherNames: true })}`);
  } else if (started.created) {
    say("Budget: the workflow's default limits, applied by the worker that executes it");
  }
}
