// Listing runs: the query parameters (filters, named views, paging) and the page they
// select. Shared by GET /api/runs, its live stream, and the dashboard's runs page, so all
// three always show the same runs for the same URL.
//
// Named views are filters with a name and a label: the dashboard shows each as a tab and
// the API accepts `view=<name>`. A feature that adds a queue of runs someone must act on
// adds its view to RUN_LIST_VIEWS, and nothing else changes.

import { APPROVAL_EVENT_PREFIX, type Engine, type RunFilter, type RunStatus } from "../../index.js";
import { HttpError } from "../errors.js";
import { runSummaryJson } from "../json.js";
import { s } from "../schema.js";
import { RUN_STATUSES } from "./models.js";
import { checkText, type ParamSpec } from "./route.js";

export interface RunListView {
  label: string;
  description: string;
  filter: RunFilter;
}

export const RUN_LIST_VIEWS: Record<string, RunListView> = {
  "waiting-for-event": {
    label: "Waiting for input",
    description: "waiting runs that wait for an event (an approval, a webhook, a human)",
    filter: { status: "waiting", waitingForEvent: true },
  },
  "waiting-approval": {
    label: "Waiting for approval",
    description: "waiting runs that wait for an approval (ctx.approval)",
    filter: { status: "waiting", waitingForEventPrefix: APPROVAL_EVENT_PREFIX },
  },
};

export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 200;

export const RUN_LIST_QUERY: Record<string, ParamSpec> = {
  status: {
    schema: s.array(s.enum(RUN_STATUSES)),
    description: "Only runs with one of these statuses (comma-separated).",
  },
  view: {
    schema: s.enum(Object.keys(RUN_LIST_VIEWS) as [string, ...string[]]),
    description: `A named view: ${Object.entries(RUN_LIST_VIEWS)
      .map(([k, v]) => `"${k}" (${v.description})`)
      .join(", ")}.`,
  },
  workflow: { schema: s.string({ maxLength: 128 }), description: "Only runs of this workflow." },
  version: { schema: s.string({ maxLength: 128 }), description: "Only runs of this version." },
  q: {
    schema: s.string({ maxLength: 256 }),
    description: "Only runs whose id contains this text (case-sensitive, literal).",
  },
  limit: {
    schema: s.integer({ minimum: 1, maximum: MAX_PAGE_SIZE }),
    description: `At most this many runs (default ${DEFAULT_PAGE_SIZE}).`,
  },
  before: {
    schema: s.string({ maxLength: 400 }),
    description: "A page cursor: the `next` of the previous page.",
  },
};

export interface RunListQuery {
  status?: RunStatus[];
  view?: string;
  workflow?: string;
  version?: string;
  q?: string;
  limit?: number;
  before?: string;
}

export function cursorFor(run: { createdAt: Date; id: string }): string {
  return Buffer.from(`${run.createdAt.getTime()}:${run.id}`, "utf8").toString("base64url");
}

/** The run a page cursor (cursorFor) names, or undefined for text that is not one. Shared
 *  with `cairn runs --cursor`, so a `next` of the API pages the CLI's list, and back. */
export function decodeRunCursor(cursor: string): { createdAt: number; id: string } | undefined {
  const text = Buffer.from(cursor, "base64url").toString("utf8");
  const colon = text.indexOf(":");
  const createdAt = Number(text.slice(0, colon));
  const id = text.slice(colon + 1);
  if (colon < 1 || !Number.isSafeInteger(createdAt) || id.length === 0 || id.length > 256) {
    return undefined;
  }
  return { createdAt, id };
}

function parseCursor(cursor: string): { createdAt: number; id: string } {
  const decoded = decodeRunCursor(cursor);
  if (!decoded) {
    throw new HttpError(400, "VALIDATION", 'query parameter "before" is not a page cursor');
  }
  // The id inside is a value from the client like any other: no NUL (PostgreSQL refuses
  // it, which would be answered as the store failing).
  checkText(decoded.id, 'query parameter "before" (the run id in the cursor)', 256);
  return decoded;
}

export function filterFor(q: RunListQuery): RunFilter {
  const filter: RunFilter = { ...(q.view ? RUN_LIST_VIEWS[q.view]?.filter : {}) };
  if (q.status !== undefined) {
    const fromView = filter.status === undefined ? undefined : [filter.status].flat();
    filter.status = fromView ? q.status.filter((st) => fromView.includes(st)) : q.status;
  }
  if (q.workflow !== undefined) filter.workflow = q.workflow;
  if (q.version !== undefined) filter.version = q.version;
  if (q.q !== undefined && q.q !== "") filter.idContains = q.q;
  filter.limit = q.limit ?? DEFAULT_PAGE_SIZE;
  if (q.before !== undefined) filter.before = parseCursor(q.before);
  return filter;
}

export interface RunPage {
  runs: Array<Record<string, unknown>>;
  /** The cursor of the next (older) page, when this one is full. */
  next?: string;
}

export async function listRunPage(engine: Engine, q: RunListQuery): Promise<RunPage> {
  const filter = filterFor(q);
  const runs = await engine.listRuns(filter);
  const page: RunPage = { runs: runs.map(runSummaryJson) };
  const last = runs[runs.length - 1];
  if (last && runs.length === filter.limit) page.next = cursorFor(last);
  return page;
}

/** A stable key for a query (the live stream of a page is shared by equal queries). */
export function queryKey(q: RunListQuery): string {
  return JSON.stringify([q.status, q.view, q.workflow, q.version, q.q, q.limit, q.before]);
}
