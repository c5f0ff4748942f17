// Reading runs (list, one run, its steps, its events) and starting one.

import { checkBudget, checkRunId } from "../../engine/validate.js";
import { runNotFound } from "../../errors.js";
import { type Engine, RunConflictError, UnknownWorkflowError } from "../../index.js";
import { HttpError, quote } from "../errors.js";
import { eventJson, runJson, stepJson } from "../json.js";
import { runIdFromSegment } from "../run-id-segment.js";
import { s } from "../schema.js";
import { ref } from "./models.js";
import { refusePlainTextStart } from "./plain-text.js";
import { engineCheck, json, type ParamSpec, type Route, route } from "./route.js";
import { listRunPage, RUN_LIST_QUERY, type RunListQuery } from "./run-list.js";

export const RUN_ID_PARAM: Record<string, ParamSpec> = {
  id: {
    schema: s.string({ minLength: 1, maxLength: 256 }),
    description:
      'The run\'s id, percent-encoded. Runs "." and ".." are named with a space before the id ' +
      '("%20.", "%20.."): clients resolve "." and ".." segments away, and no run id starts with a space.',
    fromSegment: runIdFromSegment,
  },
};

/** The run, or a 404 naming the id. */
export async function mustGetRun(engine: Engine, id: string) {
  const run = await engine.getRun(id);
  if (!run) throw runNotFound(id);
  return run;
}

const listRuns = route({
  method: "get",
  path: "/runs",
  operationId: "listRuns",
  summary: "List runs, newest first",
  description:
    "Filters combine. Pages are cursor-based: pass `next` of one page as `before` of the next.",
  tag: "runs",
  access: "read",
  query: RUN_LIST_QUERY,
  responses: {
    200: {
      description: "A page of runs.",
      schema: s.object(
        {
          runs: s.array(ref.RunSummary),
          next: s.string({ description: "Cursor of the next (older) page, if this one is full." }),
        },
        ["runs"],
      ),
    },
  },
  async handle({ c, query, deps }) {
    return json(c, 200, await listRunPage(deps.engine, query as RunListQuery));
  },
});

const getRun = route({
  method: "get",
  path: "/runs/{id}",
  operationId: "getRun",
  summary: "A run, with its input and output",
  tag: "runs",
  access: "read",
  params: RUN_ID_PARAM,
  errors: [404],
  responses: { 200: { description: "The run.", schema: s.object({ run: ref.Run }, ["run"]) } },
  async handle({ c, params, deps }) {
    return json(c, 200, { run: runJson(await mustGetRun(deps.engine, params.id!)) });
  },
});

/** How many steps or events one page holds at most, and by default. */
export const MAX_JOURNAL_PAGE = 1_000;
export const DEFAULT_JOURNAL_PAGE = 500;

const pageLimit = {
  schema: s.integer({ minimum: 1, maximum: MAX_JOURNAL_PAGE }),
  description: `At most this many (default ${DEFAULT_JOURNAL_PAGE}).`,
};

const getSteps = route({
  method: "get",
  path: "/runs/{id}/steps",
  operationId: "getSteps",
  summary: "A run's steps in call order, each with its attempts",
  description:
    "Completed calls first, in call order, then (on the last page) calls begun but not " +
    "completed: failed or retrying steps, effects whose intent is recorded, sleeps and waits " +
    "in progress. Paged by call position: pass `next` of one page as `from` of the next. " +
    "Each page is read from the store alone (a page costs its size, not the run's). A call " +
    "completes at its own position: while the run executes calls side by side, one that " +
    "completes behind the page you read shows on no later page, so read a finished run's " +
    "steps to see each exactly once (a run that makes one call at a time pages exactly).",
  tag: "runs",
  access: "read",
  params: RUN_ID_PARAM,
  query: {
    from: {
      schema: s.integer({ minimum: 0 }),
      description: "The first call position to show (default 0): the `next` of the previous page.",
    },
    offset: {
      schema: s.integer({ minimum: 0 }),
      description: "No longer accepted (a 400): steps are paged by `from`.",
    },
    limit: pageLimit,
  },
  errors: [404],
  responses: {
    200: {
      description: "The steps.",
      schema: s.object(
        {
          steps: s.array(ref.Step),
          next: s.integer({
            minimum: 1,
            description:
              "Present when more completed steps follow: the `from` of the next page. A page " +
              "holds fewer than `limit` when calls share a position (after a resume).",
          }),
        },
        ["steps"],
      ),
    },
  },
  async handle({ c, params, query, deps }) {
    if (query.offset !== undefined) {
      throw new HttpError(
        400,
        "VALIDATION",
        'query parameter "offset" is no longer accepted: steps are paged by call position; ' +
          'pass the "next" of a page as "from" (the first page needs neither)',
      );
    }
    const page = await deps.engine.readSteps(params.id!, {
      from: (query.from as number | undefined) ?? 0,
      limit: (query.limit as number | undefined) ?? DEFAULT_JOURNAL_PAGE,
    });
    return json(c, 200, {
      steps: page.steps.map(stepJson),
      ...(page.next !== undefined ? { next: page.next } : {}),
    });
  },
});

const getEvents = route({
  method: "get",
  path: "/runs/{id}/events",
  operationId: "listEvents",
  summary: "The events sent to a run, consumed or not, in the order sent",
  description:
    "Paged by sequence number: pass `next` of one page as `after` of the next (events sent " +
    "since appear on later pages, never before the page you read). Each page is read from " +
    "the store alone.",
  tag: "runs",
  access: "read",
  params: RUN_ID_PARAM,
  query: {
    after: {
      schema: s.integer({ minimum: 0 }),
      description: "Only events whose `seq` is greater: the `next` of the previous page.",
    },
    limit: pageLimit,
  },
  errors: [404],
  responses: {
    200: {
      description: "The events.",
      schema: s.object(
        {
          events: s.array(ref.Event),
          next: s.integer({
            minimum: 1,
            description: "Present when more events follow: the `after` of the next page.",
          }),
        },
        ["events"],
      ),
    },
  },
  async handle({ c, params, query, deps }) {
    const page = await deps.engine.readEvents(params.id!, {
      after: (query.after as number | undefined) ?? 0,
      limit: (query.limit as number | undefined) ?? DEFAULT_JOURNAL_PAGE,
    });
    return json(c, 200, {
      events: page.events.map(eventJson),
      ...(page.next !== undefined ? { next: page.next } : {}),
    });
  },
});

const StartBody = s.object(
  {
    workflow: s.string({ minLength: 1, maxLength: 128, description: "The workflow's name." }),
    version: s.string({
      minLength: 1,
      maxLength: 128,
      description: "Required when several versions of the workflow are registered.",
    }),
    input: s.any({ description: "The run's input (any JSON)." }),
    id: s.string({
      minLength: 1,
      maxLength: 256,
      description:
        "The run's id (default: a new run_... id). Starting an existing id again returns that run.",
    }),
    budget: s.record(s.number({ minimum: 0 }), {
      description: 'Budget limits, e.g. {"usd": 5}.',
      maxProperties: 50,
    }),
  },
  ["workflow"],
);

const startRun = route({
  method: "post",
  path: "/runs",
  operationId: "startRun",
  summary: "Start a run of a workflow registered with this server",
  description:
    "Only workflows registered with the engine the server was given can be started " +
    "(`cairn ui --module <file>`). A worker that has the workflow@version executes the run.",
  tag: "runs",
  access: "act",
  body: { schema: StartBody, required: true, description: "What to start." },
  errors: [404, 409],
  responses: {
    201: {
      description: "The run was created.",
      schema: s.object({ run: ref.Run, created: s.boolean() }, ["run", "created"]),
    },
    200: {
      description:
        "A run with this id and the same input existed already: it is returned and nothing is created (another input, or another workflow, is a 409).",
      schema: s.object({ run: ref.Run, created: s.boolean() }, ["run", "created"]),
    },
  },
  async handle({ c, body, deps }) {
    const b = body!;
    const registered = deps.engine.workflows;
    if (registered.length === 0) {
      throw new UnknownWorkflowError(
        "This server has no workflows registered, so it cannot start runs. Start `cairn ui` " +
          "with --module <file that exports your workflows>, or give createHttpApp an engine " +
          "created with your workflows.",
      );
    }
    const named = registered.filter((w) => w.name === b.workflow);
    const ids = registered.map((w) => w.id).join(", ");
    if (named.length === 0) {
      throw new UnknownWorkflowError(
        `No workflow ${quote(b.workflow)} is registered with this server; registered: ${ids}`,
      );
    }
    const wf =
      b.version === undefined
        ? named.length === 1
          ? named[0]
          : undefined
        : named.find((w) => w.version === b.version);
    if (!wf) {
      if (b.version === undefined) {
        throw new HttpError(
          400,
          "VALIDATION",
          `Workflow ${quote(b.workflow)} has several versions registered (${named.map((w) => w.version).join(", ")}); say which one with "version"`,
        );
      }
      throw new UnknownWorkflowError(
        `Version ${quote(b.version)} of workflow ${quote(b.workflow)} is not registered with this server; registered: ${ids}`,
      );
    }
    engineCheck(() => {
      if (b.id !== undefined) checkRunId(b.id, "start()");
      checkBudget(b.budget, "start()");
    });
    if (b.input !== undefined) await refusePlainTextStart(deps.engine);
    const handle = await deps.engine
      .start(wf, b.input, {
        ...(b.id !== undefined ? { id: b.id } : {}),
        ...(b.budget !== undefined ? { budget: b.budget } : {}),
      })
      .catch(async (err: unknown) => {
        // The engine's advice for another input under the id is for code (engine.handle).
        const taken = b.id !== undefined ? await deps.engine.getRun(b.id) : undefined;
        if (err instanceof RunConflictError && taken && taken.workflow === wf.name) {
          throw new HttpError(
            409,
            "RUN_CONFLICT",
            `Run ${quote(taken.id)} already exists with a different input, and a run's input never changes: nothing was started. Choose another id, or read that run (GET /api/runs/{id})`,
          );
        }
        throw err;
      });
    const run = await mustGetRun(deps.engine, handle.id);
    return json(c, handle.created ? 201 : 200, { run: runJson(run), created: handle.created });
  },
});

export const runRoutes: Route[] = [listRuns, getRun, getSteps, getEvents, startRun];
