// A run's workspaces (ctx.workspace) as recorded: its checkpoints per step, the files of a
// checkpoint, one file's content, and what changed between two checkpoints (or in one
// step), with a line diff of one file. Only checkpoints the run's own journal names are
// served, and content only through their paths (engine/workspace-views.ts), so one run's
// URL never reaches a blob that only another run holds.

import { structuredPatch } from "diff";
import type { CheckpointChange, CheckpointEntry, CheckpointView, Engine } from "../../index.js";
import { HttpError, quote } from "../errors.js";
import { s } from "../schema.js";
import { ref } from "./models.js";
import { json, type ParamSpec, type Route, route } from "./route.js";
import { mustGetRun, RUN_ID_PARAM } from "./runs.js";

const HASH = /^[0-9a-f]{64}$/;
/** Files larger than this get no line diff (the changes list still names them). */
const LINE_DIFF_MAX_BYTES = 1024 * 1024;
/** Beyond this many edits a line diff is given up (jsdiff's maxEditLength). */
const LINE_DIFF_MAX_EDITS = 20_000;

const checkpointSchema = (description: string) =>
  s.string({ minLength: 64, maxLength: 64, description });

const CHECKPOINT_PARAM: Record<string, ParamSpec> = {
  ...RUN_ID_PARAM,
  checkpoint: {
    schema: checkpointSchema("A checkpoint of the run (GET /api/runs/{id}/workspaces)."),
    description: "A checkpoint the run's journal names (64 hex digits).",
  },
};

const PATH_QUERY: ParamSpec = {
  schema: s.string({ minLength: 1, maxLength: 4_096 }),
  description: 'A file\'s path in the workspace, "/"-separated ("src/a.ts").',
};

function mustBeHash(value: string | undefined, what: string): string | undefined {
  if (value !== undefined && !HASH.test(value)) {
    throw new HttpError(
      400,
      "VALIDATION",
      `${what} must be a checkpoint hash (64 lowercase hex digits), as listed by GET /api/runs/{id}/workspaces`,
    );
  }
  return value;
}

function checkpointJson(c: CheckpointView): Record<string, unknown> {
  return { ...c, recordedAt: c.recordedAt.toISOString() };
}

/** Text when the bytes are UTF-8 without NUL (git's test for "binary"). */
export function asText(bytes: Uint8Array): string | undefined {
  if (bytes.includes(0)) return undefined;
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return undefined;
  }
}

const listWorkspaces = route({
  method: "get",
  path: "/runs/{id}/workspaces",
  operationId: "listWorkspaces",
  summary: "A run's workspaces and their checkpoints, one per workspace step",
  description:
    "From the run's journal: each workspace's base (the directory as first opened) and every " +
    "completed workspace step's checkpoint with the checkpoint it started from and what it changed.",
  tag: "workspaces",
  access: "read",
  params: RUN_ID_PARAM,
  errors: [404],
  responses: {
    200: {
      description: "The workspaces, in the order they were opened.",
      schema: s.object({ workspaces: s.array(ref.Workspace) }, ["workspaces"]),
    },
  },
  async handle({ c, params, deps }) {
    const list = await deps.engine.listWorkspaces(params.id!);
    return json(c, 200, {
      workspaces: list.map((w) => ({
        name: w.name,
        checkpoints: w.checkpoints.map(checkpointJson),
      })),
    });
  },
});

const readCheckpoint = route({
  method: "get",
  path: "/runs/{id}/checkpoints/{checkpoint}",
  operationId: "readCheckpoint",
  summary: "The files and directories of one of a run's checkpoints",
  tag: "workspaces",
  access: "read",
  params: CHECKPOINT_PARAM,
  errors: [404, 410],
  responses: {
    200: {
      description: "Every entry, sorted by path.",
      schema: s.object({ checkpoint: s.string(), entries: s.array(ref.CheckpointEntry) }, [
        "checkpoint",
        "entries",
      ]),
    },
  },
  async handle({ c, params, deps }) {
    const checkpoint = mustBeHash(params.checkpoint, "The checkpoint")!;
    const entries = await deps.engine.readCheckpoint(params.id!, checkpoint);
    return json(c, 200, { checkpoint, entries });
  },
});

const readFile = route({
  method: "get",
  path: "/runs/{id}/checkpoints/{checkpoint}/file",
  operationId: "readWorkspaceFile",
  summary: "One file of one of a run's checkpoints, with its content",
  description:
    "UTF-8 text comes as text (encoding utf8); any other content as base64. The content is " +
    "hashed again when read and must match the checkpoint's record of it.",
  tag: "workspaces",
  access: "read",
  params: CHECKPOINT_PARAM,
  query: { path: { ...PATH_QUERY, required: true } },
  errors: [404, 410],
  responses: {
    200: { description: "The file.", schema: s.object({ file: ref.WorkspaceFile }, ["file"]) },
  },
  async handle({ c, params, query, deps }) {
    const checkpoint = mustBeHash(params.checkpoint, "The checkpoint")!;
    const f = await deps.engine.readWorkspaceFile(params.id!, checkpoint, query.path as string);
    const text = asText(f.content);
    return json(c, 200, {
      file: {
        path: f.path,
        mode: f.mode,
        size: f.size,
        hash: f.hash,
        encoding: text === undefined ? "base64" : "utf8",
        content: text ?? Buffer.from(f.content).toString("base64"),
      },
    });
  },
});

export interface WorkspaceDiff {
  from: string;
  to: string;
  step?: string;
  changes: CheckpointChange[];
  file?: FileDiffJson;
}

interface FileDiffJson {
  path: string;
  binary: boolean;
  tooLarge: boolean;
  hunks: Array<{
    oldStart: number;
    oldLines: number;
    newStart: number;
    newLines: number;
    lines: string[];
  }>;
}

/** The step's checkpoint and the one it started from, by the step's key. */
async function stepCheckpoints(
  engine: Engine,
  id: string,
  step: string,
): Promise<{ from: string; to: string }> {
  const all = (await engine.listWorkspaces(id)).flatMap((w) => w.checkpoints);
  const found = all.find((c) => c.step === step);
  if (!found) {
    throw new HttpError(
      404,
      "WORKSPACE_NOT_FOUND",
      `Run ${quote(id)} has no workspace step ${quote(step)}; workspace steps: ${
        all
          .map((c) => quote(c.step, 60))
          .slice(0, 30)
          .join(", ") || "(none)"
      }`,
    );
  }
  return { from: found.previous ?? found.checkpoint, to: found.checkpoint };
}

/** One file's line diff within a diff already made (`d`). */
export async function lineDiff(
  engine: Engine,
  id: string,
  d: { from: string; to: string; changes: CheckpointChange[] },
  path: string,
): Promise<FileDiffJson> {
  const change = d.changes.find((ch) => ch.path === path);
  type Side = { kind: "text"; text: string } | { kind: "binary" } | { kind: "too-large" };
  const side = async (cp: string, e: CheckpointEntry | undefined): Promise<Side> => {
    if (!e) return { kind: "text", text: "" };
    if (e.type === "symlink") return { kind: "text", text: `symlink to ${e.target}\n` };
    if (e.type === "dir") return { kind: "text", text: "" };
    if (e.size > LINE_DIFF_MAX_BYTES) return { kind: "too-large" };
    const text = asText((await engine.readWorkspaceFile(id, cp, path)).content);
    return text === undefined ? { kind: "binary" } : { kind: "text", text };
  };
  if (!change) {
    // Unchanged: it must exist in the checkpoint to be a path at all (404 otherwise).
    await engine.readWorkspaceFile(id, d.to, path);
    return { path, binary: false, tooLarge: false, hunks: [] };
  }
  const { before, after } = change;
  // A change of mode only: one content, read once.
  const sameContent =
    before?.type === "file" && after?.type === "file" && before.hash === after.hash;
  const [a, b] = sameContent
    ? await side(d.to, after).then((one): [Side, Side] => [one, one])
    : await Promise.all([side(d.from, before), side(d.to, after)]);
  if (a.kind === "binary" || b.kind === "binary") {
    return { path, binary: true, tooLarge: false, hunks: [] };
  }
  if (a.kind !== "text" || b.kind !== "text") {
    return { path, binary: false, tooLarge: true, hunks: [] };
  }
  const patch = structuredPatch(path, path, a.text, b.text, "", "", {
    context: 3,
    maxEditLength: LINE_DIFF_MAX_EDITS,
  });
  if (!patch) return { path, binary: false, tooLarge: true, hunks: [] };
  return {
    path,
    binary: false,
    tooLarge: false,
    hunks: patch.hunks.map((h) => ({
      oldStart: h.oldStart,
      oldLines: h.oldLines,
      newStart: h.newStart,
      newLines: h.newLines,
      lines: h.lines,
    })),
  };
}

/** The diff a request asks for: of a step, or between two checkpoints; with one file's lines. */
export async function workspaceDiff(
  engine: Engine,
  id: string,
  q: { step?: string; from?: string; to?: string; path?: string },
): Promise<WorkspaceDiff> {
  let from = mustBeHash(q.from, 'Query parameter "from"');
  let to = mustBeHash(q.to, 'Query parameter "to"');
  if (q.step !== undefined) {
    if (from !== undefined || to !== undefined) {
      throw new HttpError(400, "VALIDATION", 'Give either "step", or "from" and "to"; not both');
    }
    ({ from, to } = await stepCheckpoints(engine, id, q.step));
  } else if (from === undefined || to === undefined) {
    throw new HttpError(
      400,
      "VALIDATION",
      'Say what to compare: "step" (a workspace step\'s key), or "from" and "to" (two checkpoints of the run)',
    );
  }
  const d = await engine.diffCheckpoints(id, from, to);
  const out: WorkspaceDiff = {
    from: d.from,
    to: d.to,
    ...(q.step !== undefined ? { step: q.step } : {}),
    changes: d.changes,
  };
  if (q.path !== undefined) out.file = await lineDiff(engine, id, d, q.path);
  return out;
}

const diffRoute = route({
  method: "get",
  path: "/runs/{id}/workspace-diff",
  operationId: "diffCheckpoints",
  summary: "What changed in a workspace step, or between two of a run's checkpoints",
  description:
    "Either `step` (a workspace step's key: from the checkpoint it started from to its own) " +
    "or `from` and `to`. With `path`, also that file's line diff (UTF-8 text up to 1 MiB).",
  tag: "workspaces",
  access: "read",
  params: RUN_ID_PARAM,
  query: {
    step: {
      schema: s.string({ minLength: 1, maxLength: 300 }),
      description: "A workspace step's key.",
    },
    from: { schema: checkpointSchema("The older checkpoint."), description: "A checkpoint." },
    to: { schema: checkpointSchema("The newer checkpoint."), description: "A checkpoint." },
    path: { ...PATH_QUERY, description: "A file whose line diff to include." },
  },
  errors: [404, 410],
  responses: {
    200: {
      description: "The changes, by path.",
      schema: s.object(
        {
          from: s.string(),
          to: s.string(),
          step: s.string(),
          changes: s.array(ref.CheckpointChange),
          file: ref.FileDiff,
        },
        ["from", "to", "changes"],
      ),
    },
  },
  async handle({ c, params, query, deps }) {
    await mustGetRun(deps.engine, params.id!);
    return json(
      c,
      200,
      await workspaceDiff(deps.engine, params.id!, query as Parameters<typeof workspaceDiff>[2]),
    );
  },
});

export const workspaceRoutes: Route[] = [listWorkspaces, readCheckpoint, readFile, diffRoute];
