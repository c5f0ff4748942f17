// What the server knows besides runs: the workflows it can start, and the workers in the
// store with the runs no live worker can execute.

import type { Engine } from "../../index.js";
import { runSummaryJson, workerJson, workflowJson } from "../json.js";
import { s } from "../schema.js";
import { ref } from "./models.js";
import { json, type Route, route } from "./route.js";

/** Paused runs read to find those paused for their version (paused runs are few). */
const UNSERVED_SCAN = 1_000;

export async function workersState(engine: Engine): Promise<Record<string, unknown>> {
  const [workers, paused] = await Promise.all([
    engine.listWorkers(),
    engine.listRuns({ status: "paused", limit: UNSERVED_SCAN }),
  ]);
  return {
    workers: workers.map(workerJson),
    unserved: paused.filter((r) => r.pausedFor === "version").map(runSummaryJson),
  };
}

export const WorkersBody = s.object(
  {
    workers: s.array(ref.Worker),
    unserved: s.array(ref.RunSummary, {
      description: "Runs paused because no live worker has their workflow@version.",
    }),
  },
  ["workers", "unserved"],
);

const listWorkflows = route({
  method: "get",
  path: "/workflows",
  operationId: "listWorkflows",
  summary: "The workflows this server can start runs of",
  description: "Empty when the server was given none (`cairn ui` without --module).",
  tag: "system",
  access: "read",
  responses: {
    200: {
      description: "The registered workflows.",
      schema: s.object({ workflows: s.array(ref.WorkflowInfo) }, ["workflows"]),
    },
  },
  handle({ c, deps }) {
    return json(c, 200, { workflows: deps.engine.workflows.map(workflowJson) });
  },
});

const listWorkers = route({
  method: "get",
  path: "/workers",
  operationId: "listWorkers",
  summary: "Workers, the name@version pairs they serve, and runs no live worker serves",
  tag: "system",
  access: "read",
  responses: { 200: { description: "Workers and unserved runs.", schema: WorkersBody } },
  async handle({ c, deps }) {
    return json(c, 200, await workersState(deps.engine));
  },
});

export const systemRoutes: Route[] = [listWorkflows, listWorkers];
