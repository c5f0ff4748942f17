// `cairn send <id> <event> [json]`: delivers an event (an approval, a webhook) to a run.

import { readFileSync } from "node:fs";
import {
  type CliContext,
  type Command,
  expectPositionals,
  parseCommand,
  STORE_HELP,
  STORE_OPTIONS,
  UsageError,
} from "../command.js";
import { toJson } from "../format.js";
import { withClient } from "../store-spec.js";

export const send: Command = {
  name: "send",
  summary: "send an event to a run",
  help: `Usage: cairn send <id> <event> [json] [--json]

Delivers event <event> to run <id>, with an optional JSON payload ("-" reads it from
stdin). An event sent before the run waits for it is kept and delivered then.

Examples:
  cairn send fix-42 approval '{"ok": true}'
  echo '{"ok": false}' | cairn send fix-42 approval -

Options:
  --json            print the run afterwards as JSON
  -h, --help        show this help

${STORE_HELP}`,

  async run(args: string[], ctx: CliContext): Promise<number> {
    const { values, positionals } = parseCommand(args, {
      ...STORE_OPTIONS,
      json: { type: "boolean" },
    });
    if (values.help) {
      ctx.out(send.help);
      return 0;
    }
    expectPositionals(positionals, ["id", "event"], ["json"]);
    const [id, event, text] = positionals as [string, string, string | undefined];
    if (event.length === 0 || event.length > 200 || event.startsWith("cairn.")) {
      throw new UsageError(
        `event name ${JSON.stringify(event.slice(0, 40))} is invalid; use 1-200 characters not starting with "cairn."`,
      );
    }
    const payload =
      text === undefined ? undefined : parsePayload(text === "-" ? readStdin() : text, event);
    const run = await withClient(values, ctx, async (engine) => {
      await engine.sendEvent(id, event, payload);
      return engine.getRun(id);
    });
    ctx.out(values.json ? toJson(run, 2) : `Sent event "${event}" to run "${id}".`);
    return 0;
  },
};

function readStdin(): string {
  try {
    return readFileSync(0, "utf8");
  } catch (err) {
    throw new UsageError(`cannot read the payload from stdin: ${(err as Error).message}`);
  }
}

/** The payload's text is never echoed back: it may hold secrets. */
function parsePayload(text: string, event: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new UsageError(
      `the payload of event "${event}" is not valid JSON (quote strings: '"text"'; objects: '{"ok": true}')`,
    );
  }
}
