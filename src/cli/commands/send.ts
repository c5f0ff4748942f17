// `cairn send <id> <event> [json]`: delivers an event (an approval, a webhook) to a run.

import {
  APPROVAL_EVENT_PREFIX,
  type EventView,
  PayloadKeyError,
  type RunView,
} from "../../index.js";
import { leadingText } from "../../lib/text.js";
import { CHILD_EVENT_PREFIX } from "../../workflow/child-calls.js";
import { defineCommand, UsageError } from "../command.js";
import { waitText } from "../explain-run.js";
import { parseJson, readStdin } from "../flag-values.js";
import { iso, printable, quoted, table, toJson } from "../format.js";
import { refusePlainTextInto, runAfter, withClient } from "../store-spec.js";

export const send = defineCommand({
  name: "send",
  summary: "send an event to a run",
  help: `Usage: cairn send <id> <event> [json] [--json]

Delivers event <event> to run <id>, with an optional JSON payload ("-" reads it from
stdin). An event sent before the run waits for it is kept and delivered then. When the run
is waiting for other names (a typo?), the event is still stored, and a warning names what
the run waits for and lists the events no wait has consumed.

Examples:
  cairn send fix-42 approval '{"ok": true}'
  echo '{"ok": false}' | cairn send fix-42 approval -

Options:
  --json            print the run afterwards as JSON
  -h, --help        show this help`,
  options: {
    json: { type: "boolean" },
  },
  positionals: ["id", "event"],
  optional: ["json"],

  async run({ values, positionals: [id, event, text] }, ctx) {
    if (event.length === 0 || event.length > 200 || event.startsWith("cairn.")) {
      throw new UsageError(
        `event name ${JSON.stringify(leadingText(event, 40))} is invalid; use 1-200 characters not starting with "cairn."`,
      );
    }
    const payload =
      text === undefined
        ? undefined
        : parseJson(
            text === "-" ? readStdin("the payload") : text,
            `the payload of event "${event}"`,
            `quote strings: '"text"'; objects: '{"ok": true}'`,
          );
    const { run, waits, events } = await withClient(values, ctx, async (engine) => {
      if (payload !== undefined) {
        await refusePlainTextInto(engine, id, ctx.env, `the payload of event "${event}"`);
      }
      await engine.sendEvent(id, event, payload);
      const run = await runAfter(engine, id);
      const waits = waitsForOthers(run, event);
      // The events are read only for the warning; one under a key this process lacks
      // leaves the list out, not the event sent reported as failed.
      const events =
        waits.length === 0
          ? []
          : await engine.listEvents(id).catch((err: unknown) => {
              if (err instanceof PayloadKeyError) return undefined;
              throw err;
            });
      return { run, waits, events };
    });
    ctx.out(values.json ? toJson(run, 2) : `Sent event ${quoted(event)} to run ${quoted(id)}.`);
    if (waits.length > 0) ctx.err(notAwaited(id, waits, event, events));
    return 0;
  },
});

/** What the run waits for when that is not `event`; else nothing. */
function waitsForOthers(run: RunView | undefined, event: string): string[] {
  const waits = run?.status === "waiting" ? (run.waitingFor ?? []) : [];
  return waits.includes(event) ? [] : waits;
}

/** A warning: the run waits, but not for this name; the event stays stored, and only a
 *  wait for its name would consume it. */
function notAwaited(
  id: string,
  waits: string[],
  event: string,
  events: EventView[] | undefined,
): string {
  const names = waits.map((n) =>
    n.startsWith(APPROVAL_EVENT_PREFIX)
      ? `${waitText(n)} (answer it with cairn approve / cairn reject)`
      : n.startsWith(CHILD_EVENT_PREFIX)
        ? `${waitText(n)} (it goes on when that run finishes)`
        : waitText(n),
  );
  const warning = `cairn: warning: run ${quoted(id)} is waiting for ${names.join(", ")}, not ${quoted(event)}; the event is stored, and only a wait for ${quoted(event)} will consume it.`;
  if (events === undefined) return warning;
  const unconsumed = events.filter((e) => e.consumedBy === undefined);
  return [
    warning,
    `Events not consumed by any wait (${unconsumed.length}):`,
    table(
      ["SEQ", "NAME", "SENT"],
      unconsumed.map((e) => [String(e.seq), printable(e.name), iso(e.sentAt)]),
      "  ",
    ),
  ].join("\n");
}
