// ctx.workspace: opening a workspace is a recorded step (src/workspace/workspace.ts); the
// handle then takes part in every new call: before one executes, an open workspace whose
// directory does not hold its current checkpoint (a resume, a failed step) is restored.
// It acts on the run only through CallCore (call-core.ts).

import { LeaseLostError, PayloadKeyError, StoreError, WorkspaceError } from "../errors.js";
import { unknownOptionNames, unknownOptionsText } from "../lib/option-names.js";
import type { Workspace, WorkspaceOptions } from "../workspace/types.js";
import { checkWorkspaceName, WorkspaceHandle, workspaceOverlap } from "../workspace/workspace.js";
import type { CallCore } from "./call-core.js";
import { currentScope } from "./call-scope.js";

const WORKSPACE_OPTIONS = [
  "dir",
  "ignore",
  "defaultIgnore",
  "gitignore",
  "maxFileBytes",
  "maxCheckpointBytes",
];

export class WorkspaceCalls {
  /** Open workspaces by name (ctx.workspace); a name opens once per run. */
  private readonly handles = new Map<string, WorkspaceHandle | undefined>();
  /** Each workspace opened (or being opened), by name: their directories must not overlap. */
  private readonly dirs = new Map<string, WorkspaceHandle>();

  constructor(private readonly core: CallCore) {}

  /** An open workspace's directory does not hold its current checkpoint. */
  get needSync(): boolean {
    if (this.handles.size === 0) return false;
    for (const w of this.handles.values()) if (w?.needsSync) return true;
    return false;
  }

  /** ctx.workspace. */
  async open(name: string, options: WorkspaceOptions = {}): Promise<Workspace> {
    const { host } = this.core;
    checkWorkspaceName(name);
    const unknown = unknownOptionNames(options, WORKSPACE_OPTIONS);
    if (unknown.length > 0) {
      throw new TypeError(
        `ctx.workspace("${name}") in run "${host.runId}": ${unknownOptionsText(unknown, WORKSPACE_OPTIONS)}`,
      );
    }
    if (this.handles.has(name)) {
      throw new TypeError(
        `ctx.workspace("${name}") in run "${host.runId}": this workspace is already open; open it once and pass its handle around`,
      );
    }
    this.handles.set(name, undefined);
    let ws: WorkspaceHandle;
    try {
      ws = new WorkspaceHandle(
        name,
        this.core.api,
        host.workspace,
        options,
        () => currentScope(this.core).bodyOf !== undefined,
      );
      // Two workspaces on one directory (or one inside the other's) would each restore it
      // to their own checkpoint.
      for (const other of this.dirs.values()) {
        const why = workspaceOverlap(other, ws);
        if (why) {
          throw new TypeError(
            `ctx.workspace("${name}") in run "${host.runId}": ${why}; give each workspace a directory of its own`,
          );
        }
      }
    } catch (err) {
      this.handles.delete(name);
      throw err;
    }
    this.dirs.set(name, ws);
    await ws.open();
    this.handles.set(name, ws);
    return ws;
  }

  /** Restores the directories of open workspaces that do not hold their current checkpoint,
   *  before a new call executes. Counted as active work; a failure halts or fails the run. */
  async sync(): Promise<void> {
    const stale = [...this.handles.values()].filter((w) => w?.needsSync);
    if (stale.length === 0) return;
    await this.core.active0(
      Promise.all(stale.map((w) => w?.sync())).then(
        () => {},
        (err: unknown) => this.syncFailed(err),
      ),
    );
  }

  private syncFailed(err: unknown): void {
    const { core } = this;
    if (err instanceof LeaseLostError) core.halt({ kind: "lease-lost" });
    else if (err instanceof StoreError) core.halt({ kind: "interrupted", error: err });
    // An object encrypted with a key this worker was not given: the run is paused naming
    // the key (execution.ts), as any other unreadable payload, not failed.
    else if (err instanceof PayloadKeyError) core.halt({ kind: "interrupted", error: err });
    else if (err instanceof WorkspaceError) core.fail(err);
    else {
      core.fail(
        new WorkspaceError(
          `Run "${core.host.runId}": restoring a workspace directory failed: ${(err as Error)?.message ?? String(err)}; fix the cause and resume the run`,
          { cause: err },
        ),
      );
    }
  }
}
