// Inspecting a run's workspaces (ctx.workspace) from outside the run: the checkpoints its
// journal names (one per workspace step, in call order), the files of a checkpoint, one
// file's content, and what changed between two checkpoints. Read-only, for dashboards and
// the HTTP API.
//
// A run can only be asked about checkpoints its own journal names, a file is found through
// that checkpoint's trees (never by a hash a caller hands in), and every object is read
// only if the run holds it (its refs in the store: heldWorkspaceObjects). So one run's view
// never serves an object that only another run holds, even if a step's recorded value
// mimics a workspace record. Every object read back is hashed again (tree.ts).

import { runNotFound, WorkspaceNotFoundError } from "../errors.js";
import type { Store } from "../store/store.js";
import { type Entry, fromObject, readTrees, type Snapshot, sameEntry } from "../workspace/tree.js";
import { WORKSPACE_MARK } from "../workspace/workspace.js";
import { stepViews } from "./step-views.js";
import type { StepView } from "./views.js";

export interface CheckpointView {
  /** The workspace's name (ctx.workspace(name)). */
  workspace: string;
  /** The key of the step that recorded it: "workspace:<name>" for the base (the directory
   *  as first opened), else the workspace step's key. */
  step: string;
  /** The checkpoint: the content hash of its root directory. */
  checkpoint: string;
  /** The checkpoint this step started from (the workspace's previous step); none for the base. */
  previous?: string;
  /** Files added, modified and deleted by this step; none for the base. */
  changes?: { added: number; modified: number; deleted: number };
  /** Files in the base checkpoint. */
  files?: number;
  /** Bytes of content this checkpoint added to the store for this run. */
  bytes: number;
  recordedAt: Date;
}

export interface WorkspaceView {
  name: string;
  /** Its checkpoints in call order, the base first. */
  checkpoints: CheckpointView[];
}

export type CheckpointEntry =
  | { path: string; type: "file"; mode: number; size: number; hash: string }
  | { path: string; type: "symlink"; target: string }
  | { path: string; type: "dir"; mode: number };

export interface WorkspaceFileView {
  path: string;
  mode: number;
  size: number;
  hash: string;
  content: Uint8Array;
}

export interface CheckpointChange {
  path: string;
  change: "added" | "modified" | "deleted";
  before?: CheckpointEntry;
  after?: CheckpointEntry;
}

export interface CheckpointDiff {
  from: string;
  to: string;
  /** Files and symlinks that differ (directories only when one took a file's place), by path. */
  changes: CheckpointChange[];
}

/** What the engine offers (engine.ts spreads these into the Engine). */
export interface WorkspaceViewsApi {
  /** A run's workspaces and their checkpoints, from its journal. */
  listWorkspaces(runId: string): Promise<WorkspaceView[]>;
  /** Every entry of one of the run's checkpoints, by path. */
  readCheckpoint(runId: string, checkpoint: string): Promise<CheckpointEntry[]>;
  /** One file of one of the run's checkpoints, with its content. */
  readWorkspaceFile(runId: string, checkpoint: string, path: string): Promise<WorkspaceFileView>;
  /** What changed from one of the run's checkpoints to another. */
  diffCheckpoints(runId: string, from: string, to: string): Promise<CheckpointDiff>;
}

const GET_CHUNK = 500;
const NAMED_CACHE = 1_000;
const HASH_RE = /^[0-9a-f]{64}$/;

export function createWorkspaceViews(deps: {
  store: Store;
  ready: () => Promise<void>;
}): WorkspaceViewsApi {
  const reader = new CheckpointReader(deps.store, deps.ready);
  return {
    listWorkspaces: (runId) => reader.workspaces(runId),
    async readCheckpoint(runId, checkpoint) {
      const snapshot = await reader.snapshot(runId, checkpoint);
      return [...snapshot.entries()]
        .sort(([a], [b]) => byPath(a, b))
        .map(([path, e]) => entryOf(path, e));
    },
    readWorkspaceFile: (runId, checkpoint, path) => reader.file(runId, checkpoint, path),
    async diffCheckpoints(runId, from, to) {
      const before = await reader.snapshot(runId, from);
      const after = await reader.snapshot(runId, to);
      return { from, to, changes: diffSnapshots(before, after) };
    },
  };
}

/** Reads a run's checkpoints, only those its journal names and only objects it holds. */
class CheckpointReader {
  // Checkpoints found named in a run's journal. A journal is insert-only, so a name found
  // stays true while the run lives; a deleted run's refs are gone, and load() checks those
  // on every read. Spares a journal read per file of a diff.
  private readonly named = new Map<string, true>();

  constructor(
    private readonly store: Store,
    private readonly ready: () => Promise<void>,
  ) {}

  /** A run's workspaces and their checkpoints, from its journal. */
  async workspaces(runId: string): Promise<WorkspaceView[]> {
    await this.ready();
    const run = await this.store.getRun(runId);
    if (!run) throw runNotFound(runId);
    const byName = new Map<string, WorkspaceView>();
    for (const step of stepViews(
      await this.store.loadJournal(runId, {
        eventPayloads: false,
        pendingEvents: false,
      }),
    )) {
      const recorded = workspaceRecord(step);
      if (!recorded) continue;
      let ws = byName.get(recorded.name);
      if (!ws) {
        ws = { name: recorded.name, checkpoints: [] };
        byName.set(recorded.name, ws);
      }
      ws.checkpoints.push(checkpointView(step, recorded, ws.checkpoints.at(-1)?.checkpoint));
    }
    return [...byName.values()];
  }

  /** The tree of one of the run's checkpoints, by path. Asks `ready` itself: a checkpoint
   *  found named before skips the journal read (workspaces()) that would otherwise. */
  async snapshot(runId: string, checkpoint: string): Promise<Snapshot> {
    await this.ready();
    await this.mustName(runId, checkpoint);
    return (await readTrees(checkpoint, (hashes) => this.load(runId, hashes))).snapshot;
  }

  /** One file of one of the run's checkpoints, with its content. */
  async file(runId: string, checkpoint: string, path: string): Promise<WorkspaceFileView> {
    const snapshot = await this.snapshot(runId, checkpoint);
    const e = snapshot.get(path);
    if (e?.type !== "file") {
      throw new WorkspaceNotFoundError(
        `Checkpoint "${checkpoint.slice(0, 16)}…" of run "${runId}" has no file ${JSON.stringify(path.slice(0, 200))}${e ? ` (it is a ${e.type === "dir" ? "directory" : "symlink"})` : ""}`,
      );
    }
    const content = (await this.load(runId, [e.hash])).get(e.hash);
    if (!content) {
      throw new WorkspaceNotFoundError(
        `The content of ${JSON.stringify(path.slice(0, 200))} in run "${runId}" is no longer stored (deleted with the runs that held it?)`,
      );
    }
    return { path, mode: e.mode, size: e.size, hash: e.hash, content: new Uint8Array(content) };
  }

  /** Returns if the run's journal names the checkpoint; otherwise a WorkspaceNotFoundError. */
  private async mustName(runId: string, checkpoint: string): Promise<void> {
    const key = `${runId}\u0000${checkpoint}`;
    if (this.named.has(key)) return;
    const all = await this.workspaces(runId);
    if (!all.some((w) => w.checkpoints.some((c) => c.checkpoint === checkpoint))) {
      throw new WorkspaceNotFoundError(
        `Run "${runId}" has no workspace checkpoint "${checkpoint.slice(0, 80)}"; its checkpoints are listed by listWorkspaces (GET /api/runs/{id}/workspaces)`,
      );
    }
    if (this.named.size >= NAMED_CACHE) this.named.delete(this.named.keys().next().value as string);
    this.named.set(key, true);
  }

  /** The objects' contents, read only if the run holds every one of them (its refs). */
  private async load(runId: string, hashes: string[]): Promise<Map<string, Buffer>> {
    const out = new Map<string, Buffer>();
    for (let i = 0; i < hashes.length; i += GET_CHUNK) {
      const chunk = hashes.slice(i, i + GET_CHUNK);
      const held = new Set(await this.store.heldWorkspaceObjects(runId, chunk));
      const stranger = chunk.find((h) => !held.has(h));
      if (stranger !== undefined) {
        throw new WorkspaceNotFoundError(
          `Run "${runId}" does not hold workspace object ${stranger.slice(0, 16)}… (a checkpoint of another run; a deleted run's are gone)`,
        );
      }
      for (const obj of await this.store.getWorkspaceObjects(chunk)) {
        out.set(obj.hash, fromObject(obj));
      }
    }
    return out;
  }
}

/** What a completed workspace step recorded (the value workspace.ts returns), if `step` is
 *  one: the workspace's name, the checkpoint, and the rest of the value. */
function workspaceRecord(
  step: StepView,
): { name: string; checkpoint: string; value: Record<string, unknown> } | undefined {
  if (step.status !== "completed" || step.kind !== "step") return undefined;
  const value = step.result as Record<string, unknown> | null | undefined;
  if (!value || typeof value !== "object") return undefined;
  const name = value[WORKSPACE_MARK];
  const checkpoint = value.checkpoint;
  if (typeof name !== "string" || typeof checkpoint !== "string") return undefined;
  if (!HASH_RE.test(checkpoint)) return undefined;
  return { name, checkpoint, value };
}

/** The checkpoint a workspace step recorded; `previous` is its workspace's last one. */
function checkpointView(
  step: StepView,
  recorded: { name: string; checkpoint: string; value: Record<string, unknown> },
  previous: string | undefined,
): CheckpointView {
  const { name, checkpoint, value } = recorded;
  const base = step.key === `workspace:${name}`;
  const changes = value.changes as CheckpointView["changes"] | undefined;
  return {
    workspace: name,
    step: step.key,
    checkpoint,
    ...(!base && previous !== undefined ? { previous } : {}),
    ...(!base && changes && typeof changes === "object"
      ? {
          changes: {
            added: changes.added,
            modified: changes.modified,
            deleted: changes.deleted,
          },
        }
      : {}),
    ...(base && typeof value.files === "number" ? { files: value.files } : {}),
    bytes: typeof value.bytes === "number" ? value.bytes : 0,
    recordedAt: step.completedAt ?? step.startedAt,
  };
}

/** Files and symlinks that differ between two trees, by path. A directory is not a change
 *  of its own; a file it replaced is listed as deleted, one that replaced it as added. */
function diffSnapshots(before: Snapshot, after: Snapshot): CheckpointChange[] {
  const changes: CheckpointChange[] = [];
  for (const [path, now] of after) {
    const was = before.get(path);
    if (now.type === "dir") continue;
    if (!was || was.type === "dir") {
      changes.push({ path, change: "added", after: entryOf(path, now) });
    } else if (!sameEntry(was, now)) {
      changes.push({
        path,
        change: "modified",
        before: entryOf(path, was),
        after: entryOf(path, now),
      });
    }
  }
  for (const [path, was] of before) {
    if (was.type === "dir") continue;
    const now = after.get(path);
    if (!now || now.type === "dir") {
      changes.push({ path, change: "deleted", before: entryOf(path, was) });
    }
  }
  return changes.sort((x, y) => byPath(x.path, y.path));
}

function entryOf(path: string, e: Entry): CheckpointEntry {
  if (e.type === "file") return { path, type: "file", mode: e.mode, size: e.size, hash: e.hash };
  if (e.type === "symlink") return { path, type: "symlink", target: e.target };
  return { path, type: "dir", mode: e.mode };
}

function byPath(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
