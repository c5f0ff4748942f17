// The public shapes of ctx.workspace(): its options and the handle a workflow gets.

import type { StepContext, StepOptions } from "../workflow/context-types.js";

export interface WorkspaceOptions {
  /** The directory. Default: <engine workspaceRoot>/<run id>/<name>. It may differ between
   *  machines and executions: only its contents are part of the run's state. */
  dir?: string;
  /** Patterns to ignore (.gitignore syntax, relative to the directory), besides the
   *  defaults and the directory's own .gitignore files. */
  ignore?: readonly string[];
  /** Ignore node_modules and .git wherever they are (default true). `.cairn` (cairn's own
   *  store and workspaces) is ignored either way. */
  defaultIgnore?: boolean;
  /** Honour .gitignore files in the directory (default true). */
  gitignore?: boolean;
  /** Largest file a checkpoint keeps, in bytes (default 16 MiB). A larger one fails the
   *  step with a WorkspaceError: ignore it, or raise this. */
  maxFileBytes?: number;
  /** Most new content one checkpoint may add, in bytes (default 256 MiB; the first
   *  checkpoint holds the whole directory). */
  maxCheckpointBytes?: number;
}

/** A directory that is part of a run's durable state (ctx.workspace). */
export interface Workspace {
  readonly name: string;
  /** The directory on this machine, in this execution. */
  readonly dir: string;
  /** The checkpoint the directory holds as of this point of the run (a content hash). */
  readonly checkpoint: string;
  /**
   * A step that may change the directory: like ctx.step, and what it changed is
   * checkpointed before its result is recorded. It starts from the checkpoint of the
   * workspace's previous step (the directory is restored to it if needed: on another
   * machine, after a crash, after a failed attempt); if it fails, the directory goes back
   * to that checkpoint. Steps of one workspace run one at a time, in call order.
   */
  step<T>(name: string, fn: (s: StepContext) => Promise<T> | T, options?: StepOptions): Promise<T>;
}

export const WORKSPACE_DEFAULTS = {
  maxFileBytes: 16 * 1024 * 1024,
  maxCheckpointBytes: 256 * 1024 * 1024,
} as const;
