// The store verbs behind workspace checkpoints (ctx.workspace) and run retention.
//
// A workspace checkpoint is a tree of content-addressed objects: a file's content is a
// "blob", a directory a "tree" listing its entries; a checkpoint is the hash of its root
// tree. Objects are shared by every run and step that holds them and stored once. A run
// holds an object through a ref row (run id, hash), written in the same transaction as the
// objects it puts; deleteRun removes a run's refs with its records, and then every object
// no run refers to any more. The store never looks inside an object: hashing, the tree
// format and compression belong to src/workspace/.
//
// Fencing: putWorkspaceObjects carries the writer's epoch like a journal write, so a worker
// that lost its lease attaches nothing to the run.

/** One stored object. `data` is what the engine stores (it may be compressed; `size` is
 *  the size of the content it holds, for limits and reports). */
export interface WorkspaceObject {
  /** Content address: lowercase hex, at most 128 characters. */
  hash: string;
  kind: "blob" | "tree";
  size: number;
  data: Uint8Array;
}

export type PutWorkspaceOutcome =
  | { ok: true }
  | { ok: false; reason: "lease-lost" }
  /** Objects named in `refs` that are neither stored nor among `objects` (another run's
   *  retention may have deleted them since they were looked up): send them and try again.
   *  Nothing was written. */
  | { ok: false; reason: "missing"; hashes: string[] };

export type DeleteRunOutcome =
  | {
      deleted: true;
      /** Workspace objects deleted because no remaining run refers to them. */
      objects: number;
      /** Their stored bytes (data length). */
      bytes: number;
    }
  | { deleted: false; reason: "not-found" }
  /** Only completed, failed or canceled runs are deleted. */
  | { deleted: false; reason: "not-finished"; status: string }
  /** A run whose child runs remain is kept (as retention keeps it): a child's id is derived
   *  from its parent's, so a run started later under the parent's id would adopt them.
   *  `children` are their ids, sorted: delete them first, or pass the run and its children
   *  together to deleteRuns. */
  | { deleted: false; reason: "has-children"; children: string[] }
  /** A finished child run whose parent run is unfinished is kept (as deleteRuns keeps it):
   *  the parent, resumed, may be about to read its outcome. Delete it after the parent ends. */
  | { deleted: false; reason: "parent-unfinished"; parentId: string; parentStatus: string };

export interface DeleteRunsOutcome {
  /** The runs deleted (each finished when it was deleted), in no particular order. */
  deleted: string[];
  /** Workspace objects deleted because no remaining run refers to them. */
  objects: number;
  /** Their stored bytes (data length). */
  bytes: number;
}

export interface WorkspaceVerbs {
  /** The hashes among `hashes` that are not stored (order kept, duplicates once). */
  missingWorkspaceObjects(hashes: string[]): Promise<string[]>;

  /** Stores `objects` (an object already stored under its hash is left as it is) and records
   *  that run `runId` holds every object in `objects` and in `refs`, in one transaction,
   *  fenced by `epoch`. Idempotent. */
  putWorkspaceObjects(p: {
    runId: string;
    epoch: number;
    objects: WorkspaceObject[];
    refs: string[];
  }): Promise<PutWorkspaceOutcome>;

  /** The stored objects among `hashes` (any order; a hash not stored is left out). */
  getWorkspaceObjects(hashes: string[]): Promise<WorkspaceObject[]>;

  /** The hashes among `hashes` that run `runId` holds (a ref row), in the order given,
   *  duplicates once. Inspection (the HTTP API) reads a run's checkpoints only through
   *  objects the run holds, so no run's view reaches an object only another run holds. */
  heldWorkspaceObjects(runId: string, hashes: string[]): Promise<string[]>;

  /** Deletes one finished run with every record it owns (steps, attempts, intents, events,
   *  approvals, workspace refs), then every workspace object that no remaining run refers
   *  to, in one transaction. Child runs are separate runs and are not touched: a run that
   *  still has any (finished or not) is refused as "has-children", and a child whose parent
   *  is unfinished as "parent-unfinished", as deleteRuns keeps both. */
  deleteRun(runId: string): Promise<DeleteRunOutcome>;

  /** Retention in batches: deleteRun for each of `runIds` that exists and is finished
   *  (others are skipped: a run resumed since it was listed is unfinished again, a run whose
   *  child run stays behind is kept), all in one transaction, the shared objects checked
   *  once. At most 1,000 ids a call. With `finishedBefore` (ms), a run last updated at or
   *  after it is skipped too: one resumed since it was listed that finished again
   *  meanwhile finished just now, not before retention's cutoff. */
  deleteRuns(runIds: string[], options?: DeleteRunsOptions): Promise<DeleteRunsOutcome>;
}

export interface DeleteRunsOptions {
  /** Only runs last updated before this time (ms, the store's clock), as
   *  `listRuns({ finishedBefore })` lists them. */
  finishedBefore?: number;
}

/** The most ids one deleteRuns call takes. */
export const MAX_DELETE_RUNS = 1_000;

/** Refuses a deleteRuns call no backend should run (both backends call it first). */
export function checkDeleteRunsIds(runIds: string[], options?: DeleteRunsOptions): void {
  const before = options?.finishedBefore;
  if (before !== undefined && (typeof before !== "number" || Number.isNaN(before))) {
    throw new TypeError(
      `deleteRuns(): finishedBefore must be a time in ms (got ${String(before).slice(0, 100)})`,
    );
  }
  if (!Array.isArray(runIds) || runIds.some((id) => typeof id !== "string")) {
    throw new TypeError("deleteRuns(): runIds must be an array of run ids");
  }
  if (runIds.length > MAX_DELETE_RUNS) {
    throw new TypeError(
      `deleteRuns(): ${runIds.length} ids; at most ${MAX_DELETE_RUNS} a call (split the batch)`,
    );
  }
}
