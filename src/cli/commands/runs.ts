// `cairn runs`: the most recent runs, newest first, optionally filtered.

import type { RunFilter, RunStatus, RunView } from "../../index.js";
import {
  type CliContext,
  type Command,
  expectPositionals,
  parseCommand,
  parseWholeNumber,
  STORE_HELP,
  STORE_OPTIONS,
  UsageError,
} from "../command.js";
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

export const runs: Command = {
  name: "runs",
  summary: "list runs, newest first",
  help: `Usage: cairn runs [--status S[,S...]] [--workflow NAME[@VERSION]] [--limit N] [--json]

Lists runs, newest first: id, workflow@version, status, reason, created, updated.

Options:
  --status <s>      only runs with this status (comma-separated for several):
                    ${STATUSES.join(", ")}
  --workflow <w>    only runs of this workflow name, or of name@version
  --limit <n>       at most n runs (default ${DEFAULT_LIMIT})
  --json            print a JSON array of runs
  -h, --help        show this help

${STORE_HELP}`,

  async run(args: string[], ctx: CliContext): Promise<number> {
    const { values, positionals } = parseCommand(args, {
      ...STORE_OPTIONS,
      status: { type: "string" },
      workflow: { type: "string" },
      limit: { type: "string" },
      json: { type: "boolean" },
    });
    if (values.help) {
      ctx.out(runs.help);
      return 0;
    }
    expectPositionals(positionals, []);
    const limit =
      values.limit === undefined ? DEFAULT_LIMIT : parseWholeNumber(values.limit, "limit", 1);
    const filter: RunFilter = {};
    if (values.status !== undefined) filter.status = parseStatuses(values.status);
    let version: string | undefined;
    if (values.workflow !== undefined) {
      const at = values.workflow.lastIndexOf("@");
      filter.workflow = at > 0 ? values.workflow.slice(0, at) : values.workflow;
      if (at > 0) version = values.workflow.slice(at + 1);
      if (filter.workflow === "" || version === "") {
        throw new UsageError(`--workflow must be NAME or NAME@VERSION (got "${values.workflow}")`);
      }
    }

    const found = await withClient(values, ctx, (engine) =>
      listMatching(engine.listRuns.bind(engine), filter, version, limit),
    );

    if (values.json) {
      ctx.out(toJson(found, 2));
      return 0;
    }
    if (found.length === 0) {
      ctx.out(Object.keys(filter).length > 0 ? "No runs match." : "No runs.");
      return 0;
    }
    ctx.out(
      table(
        ["ID", "WORKFLOW", "STATUS", "REASON", "CREATED", "UPDATED"],
        found.map((r) => [
          r.id,
          `${r.workflow}@${r.version}`,
          r.status,
          r.reason ? oneLine(r.reason, 60) : "-",
          iso(r.createdAt),
          iso(r.updatedAt),
        ]),
      ),
    );
    if (found.length === limit) {
      ctx.out(`(the ${limit} most recent shown; --limit N shows more)`);
    }
    return 0;
  },
};

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
