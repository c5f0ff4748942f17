// `cairn show <id>`: one run and its steps, with every attempt's error and spend.

import { runNotFound } from "../../errors.js";
import type { ApprovalView, EventView, RunView, StepView } from "../../index.js";
import { defineCommand } from "../command.js";
import { explainNeedsWorkers, explainRun, throttledCall, waitText } from "../explain-run.js";
import {
  cutShown,
  formatAmounts,
  formatBudget,
  formatDuration,
  formatError,
  formatValue,
  iso,
  printable,
  quoted,
  shellArg,
  table,
  toJson,
} from "../format.js";
import { withClient } from "../store-spec.js";

export const show = defineCommand({
  name: "show",
  summary: "show a run and its steps",
  help: `Usage: cairn show <id> [--json]

Shows a run (status, why it is where it is, the worker holding it and its lease end,
the worker a run released while a step body of it still ran there is held for and until
when, input, output or error, budget, what it waits for), the approvals it asked for (request,
status, who answered, when, comment), its steps in call order (key, kind, status,
attempts with their errors, spend, duration from when the call began: a wait's or an
effect's intent; an effect says whether perform made it or reconcile found it:
completed/performed, completed/reconciled), and the events sent to it that no wait has
consumed. A value longer than 4,000 characters is cut there, saying how much more there
is; --json prints every value whole. The run's history in time order, with the events its
waits consumed: cairn events <id>; its output for a script: cairn result <id>.

Options:
  --json            print {"run", "why", "steps", "approvals", "unconsumedEvents"} as JSON
  -h, --help        show this help`,
  options: {
    json: { type: "boolean" },
  },
  positionals: ["id"],

  async run({ values, positionals: [id] }, ctx) {
    const { run, steps, approvals, events, workers } = await withClient(
      values,
      ctx,
      async (engine) => {
        const run = await engine.getRun(id);
        if (!run) throw runNotFound(id);
        return {
          run,
          steps: await engine.getSteps(id),
          approvals: await engine.listApprovals(id),
          events: await engine.listEvents(id),
          // Workers only explain why a pending run is not picked up, and who takes over a
          // running run held by no worker or whose lease ended.
          workers: explainNeedsWorkers(run, new Date()) ? await engine.listWorkers() : [],
        };
      },
    );
    const now = new Date();
    const unconsumed = events.filter((e) => e.consumedBy === undefined);
    const throttled = throttledCall(steps);
    if (values.json) {
      const why = explainRun(run, workers, now, { throttled });
      ctx.out(toJson({ run, why, steps, approvals, unconsumedEvents: unconsumed }, 2));
      return 0;
    }
    ctx.out(
      [
        describeRun(run, explainRun(run, workers, now, { lease: false, throttled }), steps, now),
        ...describeApprovals(approvals),
        ...describeUnconsumed(unconsumed),
      ].join("\n"),
    );
    return 0;
  },
});

/** The run, its steps, and the errors of their attempts. `why` leaves the lease out: the
 *  lease has a line of its own. */
function describeRun(run: RunView, why: string, steps: StepView[], now: Date): string {
  const pad = " ".repeat(14);
  const field = (label: string, value: string) => `  ${label.padEnd(12)}${value}`;
  const lines = [
    `Run ${quoted(run.id)}`,
    field("workflow", printable(`${run.workflow}@${run.version}`)),
    field("status", run.status),
  ];
  const finished = ["completed", "failed", "canceled"].includes(run.status);
  if (finished && run.reason) lines.push(field("reason", printable(run.reason)));
  if (!finished && why) lines.push(field("why", printable(why)));
  if (run.leaseOwner) {
    const until = run.leaseUntil ? ` until ${iso(run.leaseUntil)}` : "";
    const ended =
      run.leaseUntil && run.leaseUntil.getTime() < now.getTime()
        ? " (ended: another worker takes the run over)"
        : "";
    lines.push(field("lease", `${printable(run.leaseOwner)}${until}${ended}`));
  }
  // A hold that ran out says nothing any more (its worker's name stays until a claim).
  if (run.heldBy && run.heldUntil && run.heldUntil.getTime() > now.getTime()) {
    const note = "a step body of it still runs there: no other worker takes the run before then";
    lines.push(field("held", `${printable(run.heldBy)} until ${iso(run.heldUntil)} (${note})`));
  }
  if (run.waitingFor) lines.push(field("waiting for", run.waitingFor.map(waitText).join(", ")));
  if (run.wakeAt) lines.push(field("wakes at", iso(run.wakeAt)));
  if (run.parentId) lines.push(field("parent", quoted(run.parentId)));
  lines.push(field("created", iso(run.createdAt)), field("updated", iso(run.updatedAt)));
  lines.push(field("budget", formatBudget(run.budget)));
  lines.push(field("input", formatValue(run.input, pad)));
  if (run.status === "completed") lines.push(field("output", formatValue(run.output, pad)));
  if (run.error) lines.push(field("error", formatError(run.error)));

  lines.push("", steps.length === 0 ? "No steps recorded." : `Steps (${steps.length}):`);
  if (steps.length === 0) return lines.join("\n");
  // An effect's value was made by perform, or found by reconcile: "completed/reconciled".
  lines.push(
    table(
      ["KEY", "KIND", "STATUS", "ATTEMPTS", "SPEND", "DURATION", "STARTED"],
      steps.map((s) => [
        s.key,
        s.kind,
        s.effect ? `${s.status}/${s.effect}` : s.status,
        String(s.attempts.length),
        formatAmounts(s.spend),
        s.completedAt ? formatDuration(s.completedAt.getTime() - began(s).getTime()) : "-",
        iso(began(s)),
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
      problems.push(
        `  ${printable(s.key)} attempt ${a.attempt}: ${indentRest(formatError(a.error))}${retry}`,
      );
    }
    if (s.error && !reported)
      problems.push(`  ${printable(s.key)}: ${indentRest(formatError(s.error))}`);
  }
  if (problems.length > 0) lines.push("", "Attempt errors:", ...problems);
  return lines.join("\n");
}

/** When a call began: its intent (an effect about to perform, a wait or sleep reached, a
 *  child started) when it recorded one, else its first attempt. A wait's record is made
 *  when its event arrives, so its own start time would show 0 ms. */
function began(s: StepView): Date {
  return s.intentAt && s.intentAt < s.startedAt ? s.intentAt : s.startedAt;
}

/** Events sent to the run that no wait has consumed (yet): a typo in a name shows here. */
function describeUnconsumed(events: EventView[]): string[] {
  if (events.length === 0) return [];
  return [
    "",
    `Events not consumed by any wait (${events.length}):`,
    table(
      ["SEQ", "NAME", "SENT"],
      events.map((e) => [String(e.seq), printable(e.name), iso(e.sentAt)]),
      "  ",
    ),
  ];
}

/** Keeps multi-line error messages under their step. */
function indentRest(text: string): string {
  return text.split("\n").join("\n    ");
}

/** The approvals a run asked for: what, its state, and the answer. */
function describeApprovals(approvals: ApprovalView[]): string[] {
  if (approvals.length === 0) return [];
  const pad = " ".repeat(14);
  const field = (label: string, value: string) => `    ${label.padEnd(10)}${value}`;
  const lines = ["", `Approvals (${approvals.length}):`];
  for (const a of approvals) {
    lines.push(`  ${printable(a.key)}  ${a.status}`);
    lines.push(...describeRequest(a.request));
    lines.push(field("asked", iso(a.requestedAt)));
    if (a.deadline) {
      lines.push(field("deadline", `${iso(a.deadline)} (then: ${a.onTimeout})`));
    }
    if (a.answeredAt) {
      const via = a.via ? ` via ${printable(a.via)}` : "";
      lines.push(
        field(
          "answered",
          `${a.status} by ${a.answeredBy === undefined ? "?" : printable(a.answeredBy)} at ${iso(a.answeredAt)}${via}`,
        ),
      );
    }
    if (a.comment) lines.push(field("comment", printable(a.comment)));
    if (a.answer !== undefined) lines.push(field("answer", formatValue(a.answer, pad)));
    if (a.status === "pending") {
      lines.push(
        field("answer it", `cairn approve ${shellArg(a.runId)} ${shellArg(a.key)} (or reject)`),
      );
    }
  }
  return lines;
}

/** A request for people: each field of an object on its own line, text (a diff) as it
 *  reads, other values as compact JSON. */
function describeRequest(request: unknown): string[] {
  const pad = " ".repeat(18);
  const text = (value: unknown): string =>
    typeof value === "string"
      ? cutShown(value).split("\n").join(`\n${pad}`)
      : formatValue(value, pad);
  // Only a plain object is shown field by field: a request encrypted with a key not given
  // (an EncryptedValue) showed as its fields "keyId k1, encrypted true", and a Map or a
  // Date as no field at all.
  const proto = typeof request === "object" && request !== null && Object.getPrototypeOf(request);
  if (proto !== Object.prototype && proto !== null) {
    return [`    request   ${text(request)}`];
  }
  const lines = ["    request"];
  // A field's name is one line (printable): only its text value (a diff) spans lines, each
  // indented under it, so no name can print a line of its own ("    answer it ...").
  for (const [k, v] of Object.entries(request as Record<string, unknown>)) {
    lines.push(`      ${printable(k).padEnd(10)}  ${text(v)}`);
  }
  return lines;
}
