// `cairn cancel <id>`: stops a run. A run executing in another process stops within one
// heartbeat of its worker; the command says which of the two happened. A run canceled
// already, or whose cancel was requested already, keeps its first reason: the command says
// so (when, which reason), and a new --reason it did not record fails it (exit 1).

import {
  cancelTooLate,
  earlierCancelAround,
  type MessageQuoting,
  reasonNotRecorded,
} from "../../engine/run-after.js";
import { CliError, defineCommand } from "../command.js";
import { printable, quoted, toJson } from "../format.js";
import { refusePlainTextInto, runAfter, withClient } from "../store-spec.js";

export const cancel = defineCommand({
  name: "cancel",
  summary: "cancel a run",
  help: `Usage: cairn cancel <id> [--reason R] [--json]

Cancels run <id>: its running step's signal aborts, no further step starts, and its
status becomes canceled. A finished run cannot be canceled (exit code 1). A run canceled
already (or whose cancel is requested already) keeps the reason it was first given: the
command says so, and fails (exit code 1) when --reason gives another one, which is not
recorded. Canceling a canceled run again cancels its child runs left unfinished.

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
    const { before, run } = await withClient(values, ctx, async (engine) => {
      if (values.reason !== undefined) {
        await refusePlainTextInto(engine, id, ctx.env, "the reason");
      }
      // Read first: the store keeps the first reason of a run canceled (or asked to be)
      // already, and answers a repeat as it answered the first.
      const before = await runAfter(engine, id);
      await engine.cancel(id, values.reason);
      const after = await runAfter(engine, id);
      // Requested, but its worker ended the run otherwise before it heard: not canceled.
      const tooLate = cancelTooLate(after, id);
      if (tooLate) throw tooLate;
      return { before, run: after };
    });
    const earlier = earlierCancelAround(before, run, values.reason, QUOTING);
    const refused = reasonNotRecorded(earlier, values.reason, QUOTING);
    if (refused !== undefined) throw new CliError(refused);
    if (values.json) ctx.out(toJson(run, 2));
    else if (earlier !== undefined) ctx.out(`${earlier.text}; nothing changed.`);
    else if (run?.status === "canceled") ctx.out(`Canceled run ${quoted(id)}.`);
    else
      ctx.out(`Cancel of run ${quoted(id)} requested; the worker executing it stops it shortly.`);
    return 0;
  },
});

const QUOTING: MessageQuoting = { quote: quoted, worker: printable };
