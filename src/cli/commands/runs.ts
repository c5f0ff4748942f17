// `cairn runs`: the most recent runs, newest first, optionally filtered.

import {
  APPROVAL_EVENT_PREFIX,
  type RunFilter,
  type RunStatus,
  type RunView,
} from "../../index.js";
import { approvalKeys } from "../../workflow/approval-calls.js";
import { isWorkflowName } from "../../workflow/define.js";
import { defineCommand, UsageError } from "../command.js";
import { explainNeedsWorkers, explainRun } from "../explain-run.js";
import { parseWholeNumber } from "../flag-values.js";
import { iso, oneLine, table, toJson } from "../format.js";
import { withClient } from "../store-spec.js";

const STATUSES: readonly RunStatus[] = [
  "pending",
  "running",
  "waiting",
  "paused",
  "completed",
  "failed",
  "canceled",
];

const DEFAULT_LIMIT = 50;

export const runs = defineCommand({
  name: "runs",
  summary: "list runs, newest first",
  help: `Usage: cairn runs [--status S[,S...]] [--waiting-approval] [--workflow NAME[@VERSION]] [--limit N] [--json]

Lists runs, newest first: id, workflow@version, status, reason, created, updated. Every
run not finished says why it is where it is: what it waits for and until when, the worker
running it, "pending: no worker is running", "pending: no live worker serves name@1", or
what paused it. A run released while a step body of it still ran in its worker says
"held by WORKER until TIME": no other worker takes it before then.

Options:
  --status <s>      only runs with this status (comma-separated for several):
                    ${STATUSES.join(", ")}
  --waiting-approval
                    only runs waiting for an approval (ctx.approval), with its name;
                    answer with "cairn approve" or "cairn reject"
  --workflow <w>    only runs of this workflow name, or of name@version
  --limit <n>       at most n runs (default ${DEFAULT_LIMIT})
  --json            print a JSON array of runs (each with "why", the REASON column)
  -h, --help        show this help`,
  options: {
    status: { type: "string" },
    workflow: { type: "string" },
    limit: { type: "string" },
    json: { type: "boolean" },
    "waiting-approval": { type: "boolean" },
  },

  async run({ values }, ctx) {
    const limit =
      values.limit === undefined ? DEFAULT_LIMIT : parseWholeNumber(values.limit, "limit", 1);
    const approvals = values["waiting-approval"] === true;
    const { filter, version } = parseFilter(values, approvals);
    const { found, more, workers } = await withClient(values, ctx, async (engine) => {
      // One more than shown: whether more match is known, not guessed from a full page.
      const matched = await listMatching(engine.listRuns.bind(engine), filter, version, limit + 1);
      const found = matched.slice(0, limit);
      const more = matched.length > limit;
      // Workers only explain why a pending run is not picked up, and who takes over a
      // running run held by no worker or whose lease ended.
      const asked = new Date();
      const needed = found.some((r) => explainNeedsWorkers(r, asked));
      return { found, more, workers: needed ? await engine.listWorkers() : [] };
    });
    const now = new Date();
    const why = (r: RunView) => explainRun(r, workers, now);

    if (values.json) {
      ctx.out(
        toJson(
          found.map((r) => ({ ...r, why: why(r) })),
          2,
        ),
      );
      return 0;
    }
    if (found.length === 0) {
      ctx.out(Object.keys(filter).length > 0 ? "No runs match." : "No runs.");
      return 0;
    }
    ctx.out(approvals ? approvalsTable(found) : runsTable(found, why));
    if (more) {
      ctx.out(`(the ${limit} most recent shown; --limit N shows more)`);
    }
    return 0;
  },
});

/** The filter of --status, --waiting-approval and --workflow; a version is filtered here,
 *  as the store filters by name only. */
function parseFilter(
  values: { status?: string | undefined; workflow?: string | undefined },
  approvals: boolean,
): { filter: RunFilter; version: string | undefined } {
  const filter: RunFilter = {};
  if (values.status !== undefined) filter.status = parseStatuses(values.status);
  if (approvals) {
    if (values.status !== undefined) {
      throw new UsageError("--waiting-approval lists waiting runs; leave out --status");
    }
    filter.status = "waiting";
    filter.waitingForEventPrefix = APPROVAL_EVENT_PREFIX;
  }
  let version: string | undefined;
  if (values.workflow !== undefined) {
    const at = values.workflow.lastIndexOf("@");
    filter.workflow = at > 0 ? values.workflow.slice(0, at) : values.workflow;
    if (at > 0) version = values.workflow.slice(at + 1);
    // A name no workflow can have ("@1", "a b") matches no run: "No runs match." would
    // read as an answer about a workflow that exists.
    if (!isWorkflowName(filter.workflow) || (version !== undefined && !isWorkflowName(version))) {
      throw new UsageError(
        `--workflow must be NAME or NAME@VERSION, each 1-128 letters, digits and . _ : / - (not starting with a symbol; got ${JSON.stringify(values.workflow)})`,
      );
    }
  }
  return { filter, version };
}

function runsTable(found: RunView[], why: (r: RunView) => string): string {
  return table(
    ["ID", "WORKFLOW", "STATUS", "REASON", "CREATED", "UPDATED"],
    found.map((r) => [
      r.id,
      `${r.workflow}@${r.version}`,
      r.status,
      oneLine(why(r), 100) || "-",
      iso(r.createdAt),
      iso(r.updatedAt),
    ]),
  );
}

/** Runs waiting for approvals, with the approvals' names and deadline. */
function approvalsTable(found: RunView[]): string {
  return table(
    ["ID", "WORKFLOW", "APPROVAL", "DEADLINE", "CREATED"],
    found.map((r) => [
      r.id,
      `${r.workflow}@${r.version}`,
      approvalKeys(r.waitingFor ?? []).join(", "),
      iso(r.wakeAt),
      iso(r.createdAt),
    ]),
  );
}

function parseStatuses(text: string): RunStatus[] {
  const list = text.split(",").map((s) => s.trim());
  for (const s of list) {
    if (!(STATUSES as readonly string[]).includes(s)) {
      throw new UsageError(`unknown status "${s}"; use one of: ${STATUSES.join(", ")}`);
    }
  }
  return list as RunStatus[];
}

/** Runs of `filter` (and of `version`, when given), newest first, at most `limit`. The
 *  store filters by name only, so a version filter pages until it has enough. */
async function listMatching(
  listRuns: (filter: RunFilter) => Promise<RunView[]>,
  filter: RunFilter,
  version: string | undefined,
  limit: number,
): Promise<RunView[]> {
  if (version === undefined) return listRuns({ ...filter, limit });
  const page = Math.max(limit, 200);
  const found: RunView[] = [];
  let before: RunFilter["before"];
  for (;;) {
    const batch = await listRuns({ ...filter, limit: page, ...(before ? { before } : {}) });
    for (const r of batch) {
      if (r.version === version) found.push(r);
      if (found.length === limit) return found;
    }
    const last = batch[batch.length - 1];
    if (batch.length < page || !last) return found;
    before = { createdAt: last.createdAt.getTime(), id: last.id };
  }
}
