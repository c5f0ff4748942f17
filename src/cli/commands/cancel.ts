// `cairn cancel <id>`: stops a run. A run executing in another process stops within one
// heartbeat of its worker; the command says which of the two happened.

import { cancelTooLate } from "../../engine/run-after.js";
import { defineCommand } from "../command.js";
import { quoted, toJson } from "../format.js";
import { refusePlainTextInto, runAfter, withClient } from "../store-spec.js";

export const cancel = defineCommand({
  name: "cancel",
  summary: "cancel a run",
  help: `Usage: cairn cancel <id> [--reason R] [--json]

Cancels run <id>: its running step's signal aborts, no further step starts, and its
status becomes canceled. A finished run cannot be canceled (exit code 1).

Options:
  --reason <r>      recorded as the run's reason (default "canceled by request")
  --json            print the run afterwards as JSON
  -h, --help        show this help`,
  options: {
    reason: { type: "string" },
    json: { type: "boolean" },
  },
  positionals: ["id"],

  async run({ values, positionals: [id] }, ctx) {
    const run = await withClient(values, ctx, async (engine) => {
      if (values.reason !== undefined) {
        await refusePlainTextInto(engine, id, ctx.env, "the reason");
      }
      await engine.cancel(id, values.reason);
      const after = await runAfter(engine, id);
      // Requested, but its worker ended the run otherwise before it heard: not canceled.
      const tooLate = cancelTooLate(after, id);
      if (tooLate) throw tooLate;
      return after;
    });
    if (values.json) ctx.out(toJson(run, 2));
    else if (run?.status === "canceled") ctx.out(`Canceled run ${quoted(id)}.`);
    else
      ctx.out(`Cancel of run ${quoted(id)} requested; the worker executing it stops it shortly.`);
    return 0;
  },
});
