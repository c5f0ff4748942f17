// `cairn fork <id> --from <step>`: a new run that reuses the old run's records before a
// step and executes from there, optionally on another version. The old run is untouched.

import { defineCommand, UsageError } from "../command.js";
import { unservedWarning } from "../explain-run.js";
import { parseRunId } from "../flag-values.js";
import { printable, quoted, toJson } from "../format.js";
import { withClient } from "../store-spec.js";

export const fork = defineCommand({
  name: "fork",
  summary: "fork a run from one of its steps",
  help: `Usage: cairn fork <id> --from <step> [--version V] [--id NEWID] [--json]

Creates a new run that reuses the records of run <id> before step <step> (a step key,
as \`cairn show\` lists them) and executes from there. Spend before <step> is carried
over. Run <id> is not touched.

Options:
  --from <step>     the key of the first step to execute again (required)
  --version <v>     run the fork on this version of the workflow (default: the same)
  --id <newid>      the new run's id (default: a fresh run_... id)
  --json            print the new run as JSON
  -h, --help        show this help`,
  options: {
    from: { type: "string" },
    version: { type: "string" },
    id: { type: "string" },
    json: { type: "boolean" },
  },
  positionals: ["id"],

  async run({ values, positionals: [id] }, ctx) {
    const fromStep = values.from;
    if (fromStep === undefined || fromStep === "") {
      throw new UsageError("missing --from <step>: the key of the step to fork from");
    }
    if (values.id !== undefined) parseRunId(values.id, "id");
    const { run, unserved } = await withClient(values, ctx, async (engine) => {
      const handle = await engine.fork(id, {
        fromStep,
        ...(values.version !== undefined ? { version: values.version } : {}),
        ...(values.id !== undefined ? { id: values.id } : {}),
      });
      const run = (await engine.getRun(handle.id))!;
      // A fork onto a version no live worker serves (--version typo) stays pending.
      return { run, unserved: unservedWarning(run, await engine.listWorkers()) };
    });
    if (unserved) ctx.err(unserved);
    if (values.json) ctx.out(toJson(run, 2));
    else {
      ctx.out(
        // Every value here is text from a user or a run (an id may hold a line break):
        // quoted, so the line stays one line and says what it holds.
        `Forked run ${quoted(id)} from step ${quoted(fromStep)} as ${quoted(run.id)} (${printable(`${run.workflow}@${run.version}`)}, status ${run.status}).`,
      );
    }
    return 0;
  },
});
