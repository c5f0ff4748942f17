// `cairn result <id>`: a run's output, for a script (`temporal workflow result`): the output
// as JSON on stdout once it completed, a failed or canceled run's error on stderr, a run
// not finished said so with its own exit code; --wait waits for it to finish.

import { defineCommand } from "../command.js";
import {
  NOT_FINISHED_EXIT,
  printOutcome,
  RESULT_EXIT_CODES,
  runOutcome,
  STOPPED_EXIT,
  waitOption,
} from "../run-result.js";
import { withClient } from "../store-spec.js";

export const result = defineCommand({
  name: "result",
  summary: "print a run's output (or its error); --wait for it to finish",
  help: `Usage: cairn result <id> [--wait [--timeout <duration>]] [--json]

Prints the output of run <id> as JSON on stdout once it has completed (a run that returned
nothing prints null). A run that failed prints its error on stderr, one that was canceled
its reason. A run not finished yet (pending, running, waiting, paused) is said so on
stderr, with why it is where it is; --wait waits for it to finish instead (through
waiting and paused: a run paused for budget finishes once resumed), at most --timeout.
When no live worker serves the run's workflow@version, --wait warns so on stderr and waits
all the same. Stopping the wait (Ctrl+C) does nothing to the run: it says so, exit ${STOPPED_EXIT}.

${RESULT_EXIT_CODES}

Examples:
  cairn result triage-42
  cairn result triage-42 --wait --timeout 10m | jq .label

Options:
  --wait            wait for the run to finish
  --timeout <d>     with --wait: give up after d (e.g. 30s, 10m; then exit ${NOT_FINISHED_EXIT});
                    default: no limit
  --json            print {"id", "status", and "output", or "error" and "reason", or "why"}
                    on stdout whatever the outcome (the exit code as above)
  -h, --help        show this help`,
  options: {
    wait: { type: "boolean" },
    timeout: { type: "string" },
    json: { type: "boolean" },
  },
  positionals: ["id"],

  async run({ values, positionals: [id] }, ctx) {
    const wait = waitOption(values);
    const outcome = await withClient(values, ctx, (engine) =>
      runOutcome(engine, id, wait, ctx, { warnUnserved: true }),
    );
    return printOutcome(outcome, ctx, { json: values.json === true });
  },
});
