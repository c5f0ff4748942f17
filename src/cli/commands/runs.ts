// `cairn runs`: the most recent runs, newest first, optionally filtered.

import { cursorFor, decodeRunCursor } from "../../http/api/run-list.js";
import {
  APPROVAL_EVENT_PREFIX,
  type RunFilter,
  type RunStatus,
  type RunView,
} from "../../index.js";
import { approvalKeys } from "../../workflow/approval-calls.js";
import { isWorkflowName } from "../../workflow/define.js";
import { defineCommand, UsageError } from "../command.js";
import { explainNeedsWorkers, explainRun, sleepingThrottle } from "../explain-run.js";
import { parseRunId, parseWholeNumber } from "../flag-values.js";
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
  help: `Usage: cairn runs [--status S[,S...]] [--waiting-approval] [--workflow NAME[@VERSION]] [--id-contains TEXT] [--parent ID] [--limit N] [--cursor C] [--json]

Lists runs, newest first: id, workflow@version, status, reason, created, updated. Every
run not finished says why it is where it is: what it waits for and until when, the worker
running it, "pending: no worker is running", "pending: no live worker serves name@1", or
what paused it. A run released while a step body of it still ran in its worker says
"held by WORKER until TIME": no other worker takes it before then.

When more runs match than --limit shows, the last line gives the cursor of the next page
(older runs): run the same command with --cursor C. With --json each run carries its
"cursor": the one of the last run is the next page's (a page shorter than --limit is the
last). A cursor of the HTTP API (GET /api/runs's "next") pages here too.

Options:
  --status <s>      only runs with this status (comma-separated for several):
                    ${STATUSES.join(", ")}
  --waiting-approval
                    only runs waiting for an approval (ctx.approval), with its name;
                    answer with "cairn approve" or "cairn reject"
  --workflow <w>    only runs of this workflow name, or of name@version
  --id-contains <t> only runs whose id contains this text (case-sensitive, literal)
  --parent <id>     only the child runs of this run (ctx.child)
  --limit <n>       at most n runs (default ${DEFAULT_LIMIT})
  --cursor <c>      the page after the run this cursor names (printed by a page before)
  --json            print a JSON array of runs (each with "why", the REASON column, and
                    "cursor")
  -h, --help        show this help`,
  options: {
    status: { type: "string" },
    workflow: { type: "string" },
    limit: { type: "string" },
    cursor: { type: "string" },
    "id-contains": { type: "string" },
    parent: { type: "string" },
    json: { type: "boolean" },
    "waiting-approval": { type: "boolean" },
  },

  async run({ values }, ctx) {
    const limit =
      values.limit === undefined ? DEFAULT_LIMIT : parseWholeNumber(values.limit, "limit", 1);
    const approvals = values["waiting-approval"] === true;
    const filter = parseFilter(values, approvals);
    const { found, more, workers, throttles } = await withClient(values, ctx, async (engine) => {
      // One more than shown: whether more match is known, not guessed from a full page.
      const matched = await engine.listRuns({ ...filter, limit: limit + 1 });
      const found = matched.slice(0, limit);
      const more = matched.length > limit;
      // Workers only explain why a pending run is not picked up, and who takes over a
      // running run held by no worker or whose lease ended.
      const asked = new Date();
      const needed = found.some((r) => explainNeedsWorkers(r, asked));
      // A sleeping run may wait for cairn/ai's rate limiter: its open calls say (one read
      // of the calls begun and not completed per sleeping run shown, none for the others).
      const throttles = new Map<string, string>();
      for (const r of found) {
        const call = await sleepingThrottle(engine, r);
        if (call !== undefined) throttles.set(r.id, call);
      }
      return {
        found,
        more,
        workers: needed ? await engine.listWorkers() : [],
        throttles,
      };
    });
    const now = new Date();
    const why = (r: RunView) => explainRun(r, workers, now, { throttled: throttles.get(r.id) });

    if (values.json) {
      ctx.out(
        toJson(
          found.map((r) => ({ ...r, why: why(r), cursor: cursorFor(r) })),
          2,
        ),
      );
      return 0;
    }
    if (found.length === 0) {
      const filtered = Object.keys(filter).some((k) => k !== "before");
      ctx.out(filter.before ? "No more runs match." : filtered ? "No runs match." : "No runs.");
      return 0;
    }
    ctx.out(approvals ? approvalsTable(found) : runsTable(found, why));
    const last = found[found.length - 1];
    if (more && last) {
      ctx.out(
        `(${limit} shown, more match: the next page is --cursor ${cursorFor(last)}; --limit N shows more at once)`,
      );
    }
    return 0;
  },
});

/** The store's filter of the command line's: --status, --waiting-approval, --workflow,
 *  --id-contains, --parent and --cursor (the page after the run it names). */
function parseFilter(
  values: {
    status?: string | undefined;
    workflow?: string | undefined;
    "id-contains"?: string | undefined;
    parent?: string | undefined;
    cursor?: string | undefined;
  },
  approvals: boolean,
): RunFilter {
  const filter: RunFilter = {};
  if (values.status !== undefined) filter.status = parseStatuses(values.status);
  if (approvals) {
    if (values.status !== undefined) {
      throw new UsageError("--waiting-approval lists waiting runs; leave out --status");
    }
    filter.status = "waiting";
    filter.waitingForEventPrefix = APPROVAL_EVENT_PREFIX;
  }
  if (values.workflow !== undefined) {
    const at = values.workflow.lastIndexOf("@");
    filter.workflow = at > 0 ? values.workflow.slice(0, at) : values.workflow;
    if (at > 0) filter.version = values.workflow.slice(at + 1);
    // A name no workflow can have ("@1", "a b") matches no run: "No runs match." would
    // read as an answer about a workflow that exists.
    if (
      !isWorkflowName(filter.workflow) ||
      (filter.version !== undefined && !isWorkflowName(filter.version))
    ) {
      throw new UsageError(
        `--workflow must be NAME or NAME@VERSION, each 1-128 letters, digits and . _ : / - (not starting with a symbol; got ${JSON.stringify(values.workflow)})`,
      );
    }
  }
  const contains = values["id-contains"];
  if (contains !== undefined) {
    // Every id contains "": that filter would read as one that matched.
    if (contains === "") throw new UsageError("--id-contains is empty; give part of a run id");
    filter.idContains = contains;
  }
  if (values.parent !== undefined) filter.parentId = parseRunId(values.parent, "parent");
  if (values.cursor !== undefined) {
    const before = decodeRunCursor(values.cursor);
    // A NUL inside (PostgreSQL refuses it) would be answered as the store failing.
    if (!before || before.id.includes("\u0000")) {
      throw new UsageError(
        `--cursor ${JSON.stringify(values.cursor)} is not a page cursor; give the one a page printed (its last line, or a run's "cursor" in --json)`,
      );
    }
    filter.before = before;
  }
  return filter;
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
