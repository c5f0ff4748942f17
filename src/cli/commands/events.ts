// `cairn events <id>`: a run's history in the order it happened (`temporal workflow show`):
// created, each call begun, each attempt that failed (with its error and retry time), each
// call completed, each event sent to the run (with its payload, and the wait that consumed
// it, if one did), and how the run ended. `cairn show` gives the same journal by call
// order, for the state of each call; this is the time line, with the events it received.
// Built from the inspection views (getSteps, listEvents), nothing read twice.

import { runNotFound } from "../../errors.js";
import {
  EncryptedValue,
  type EventView,
  type RunView,
  type StepView,
  UndecodableValue,
} from "../../index.js";
import { defineCommand } from "../command.js";
import { waitText } from "../explain-run.js";
import { formatAmounts, formatError, iso, oneLine, quoted, table, toJson } from "../format.js";
import { withClient } from "../store-spec.js";

export const events = defineCommand({
  name: "events",
  summary: "a run's history, oldest first: calls, attempts, errors, events received",
  help: `Usage: cairn events <id> [--json]

Prints the history of run <id> in the order it happened: the run created; each call (step,
effect, wait, sleep, child, approval, ...) begun and completed with its result, or failed,
with every attempt that failed (its error and when it is tried again); each event sent to
the run (its payload, and the wait that consumed it, or that none has yet); and the run's
end (its output) or its pause. Values are shown on one line, cut at 80 characters (--json
prints them whole). Within one millisecond, events come first, then calls in call order.
"cairn show <id>" gives the same calls by call order, with the run's state.

Options:
  --json            print {"run", "history"} as JSON: each entry {"at", "what", and "key",
                    "kind", "attempt", "error", "retryAt", "result", "spend", "seq",
                    "payload", "consumedBy" where they apply}, every value whole
  -h, --help        show this help`,
  options: {
    json: { type: "boolean" },
  },
  positionals: ["id"],

  async run({ values, positionals: [id] }, ctx) {
    const { run, steps, received } = await withClient(values, ctx, async (engine) => {
      const run = await engine.getRun(id);
      if (!run) throw runNotFound(id);
      return { run, steps: await engine.getSteps(id), received: await engine.listEvents(id) };
    });
    const history = historyOf(run, steps, received);
    if (values.json) {
      const head = { id: run.id, workflow: run.workflow, version: run.version, status: run.status };
      ctx.out(toJson({ run: head, history: history.map(({ text: _, ...entry }) => entry) }, 2));
      return 0;
    }
    ctx.out(`History of run ${quoted(run.id)} (${run.workflow}@${run.version}, ${run.status}):`);
    ctx.out(
      table(
        ["TIME", "WHAT", "KEY", "DETAIL"],
        history.map((e) => [iso(e.at), e.what, e.key ?? "-", e.text]),
      ),
    );
    return 0;
  },
});

interface Entry {
  at: Date;
  what: string;
  key?: string;
  kind?: string;
  attempt?: number;
  error?: StepView["error"];
  retryAt?: Date;
  result?: unknown;
  spend?: Record<string, number>;
  seq?: number;
  payload?: unknown;
  consumedBy?: string;
  /** The DETAIL column. */
  text: string;
}

/** The run's entries, oldest first; ties in the order made (created, events by seq, calls
 *  in call order, the end). */
function historyOf(run: RunView, steps: StepView[], received: EventView[]): Entry[] {
  const entries: Entry[] = [
    { at: run.createdAt, what: "run created", text: `${run.workflow}@${run.version}` },
  ];
  // Events before calls: a wait's record is made as its event arrives, often in the same
  // millisecond, and the event is what came first.
  for (const e of received) entries.push(eventEntry(e));
  for (const s of steps) entries.push(...stepEntries(s));
  const end = endEntry(run);
  if (end) entries.push(end);
  // Array.prototype.sort is stable: same-time entries keep the order above.
  return entries.sort((a, b) => a.at.getTime() - b.at.getTime());
}

/** A call: begun (its intent, when it records one), each failed attempt, its end. */
function stepEntries(s: StepView): Entry[] {
  const out: Entry[] = [];
  const base = { key: s.key, kind: s.kind };
  if (s.intentAt) {
    out.push({ at: s.intentAt, what: `${s.kind} begun`, ...base, text: begunText(s) });
  }
  let reported = false;
  for (const a of s.attempts) {
    if (!a.error) continue;
    reported = true;
    const retry = a.retryAt ? `; tried again at ${iso(a.retryAt)}` : "";
    out.push({
      at: a.endedAt ?? a.startedAt,
      what: "attempt failed",
      ...base,
      attempt: a.attempt,
      error: a.error,
      ...(a.retryAt ? { retryAt: a.retryAt } : {}),
      spend: a.spend,
      text: `attempt ${a.attempt}: ${oneLine(formatError(a.error), 200)}${retry}`,
    });
  }
  if (s.completedAt) {
    const failed = s.status === "failed";
    const how = s.effect ? ` (${s.effect})` : "";
    const spent = Object.keys(s.spend).length > 0 ? `; spend ${formatAmounts(s.spend)}` : "";
    out.push({
      at: s.completedAt,
      what: failed ? `${s.kind} failed` : `${s.kind} completed`,
      ...base,
      ...(failed && s.error ? { error: s.error } : { result: s.result }),
      spend: s.spend,
      text:
        failed && s.error
          ? `${reported ? "gave up: " : ""}${oneLine(formatError(s.error), 200)}${spent}`
          : `${valueText(s.result)}${how}${attemptsText(s)}${spent}`,
    });
  } else if (!s.intentAt) {
    // In flight, never begun durably: its first attempt is when it began.
    out.push({ at: s.startedAt, what: `${s.kind} started`, ...base, text: s.status });
  }
  return out;
}

function begunText(s: StepView): string {
  if (s.kind === "effect") return "intent recorded, before perform";
  if (s.kind === "wait" || s.kind === "approval")
    return `waiting${s.completedAt ? "" : " (still)"}`;
  if (s.kind === "sleep") return `sleeping${s.completedAt ? "" : " (still)"}`;
  if (s.kind === "child") return "child run started";
  return s.status;
}

function attemptsText(s: StepView): string {
  return s.attempts.length > 1 ? `; after ${s.attempts.length} attempts` : "";
}

/** An event sent to the run: what it is (an approval's answer, a child's end, an event by
 *  name), its payload, and whether a wait consumed it. */
function eventEntry(e: EventView): Entry {
  const consumed =
    e.consumedBy === undefined ? "not consumed yet" : `consumed by ${quoted(e.consumedBy)}`;
  // cairn's own events (an approval's answer, a child's end) say what they are.
  const own = waitText(e.name) === quoted(e.name) ? "" : `${waitText(e.name)}, `;
  return {
    at: e.sentAt,
    what: "event received",
    key: e.name,
    seq: e.seq,
    payload: e.payload,
    ...(e.consumedBy !== undefined ? { consumedBy: e.consumedBy } : {}),
    text: `${own}seq ${e.seq}, ${consumed}${e.payload === undefined ? "" : `; payload ${valueText(e.payload)}`}`,
  };
}

/** A value on one line, cut at 80 characters; a placeholder as it reads; "-" for none. */
function valueText(value: unknown): string {
  if (value === undefined) return "-";
  if (value instanceof EncryptedValue || value instanceof UndecodableValue) return String(value);
  return oneLine(toJson(value), 80);
}

/** How the run ended, or why it is paused; nothing for a run still going. */
function endEntry(run: RunView): Entry | undefined {
  const at = run.updatedAt;
  switch (run.status) {
    case "completed":
      return { at, what: "run completed", result: run.output, text: valueText(run.output) };
    case "failed":
      return {
        at,
        what: "run failed",
        ...(run.error ? { error: run.error } : {}),
        text: oneLine(run.error ? formatError(run.error) : (run.reason ?? "-"), 200),
      };
    case "canceled":
      return { at, what: "run canceled", text: oneLine(run.reason ?? "no reason given", 200) };
    case "paused":
      return { at, what: "run paused", text: oneLine(run.reason ?? "-", 200) };
    default:
      return undefined;
  }
}
