// Retention: deletes finished runs older than a cutoff, with every record they own and the
// workspace objects only they held (Store.deleteRuns). It works in small batches, each one
// short transaction, and yields between them, so workers on the same store keep claiming
// and committing while millions of rows go. Never an unfinished run: the store checks each
// run's status inside the deleting transaction, so a run resumed after it was listed stays;
// so does a finished child whose parent is unfinished (resumed, it may read the child's run).
//
// Idempotency of `start` by id ends with retention: once a run is deleted, starting its id
// again creates a new run.

import { deletableWithChildren } from "../store/retention-families.js";
import { type Store, TERMINAL_STATUSES } from "../store/store.js";
import { runCursorWalk } from "./run-cursor.js";

export const DEFAULT_GC_BATCH = 500;

export interface CollectOptions {
  /** Runs that finished more than this long ago (ms before the store's now) go. */
  olderThanMs: number;
  /** Runs per transaction. Default 500 (at most 1,000). */
  batchSize?: number;
  /** Count what would go; delete nothing. */
  dryRun?: boolean;
  /** Stops between batches when aborted (what is deleted stays deleted). */
  signal?: AbortSignal;
  /** After each batch: the totals so far. */
  onBatch?: (progress: CollectResult) => void;
}

export interface CollectResult {
  /** Runs deleted (or, with dryRun, that would be). */
  runs: number;
  /** Workspace objects deleted, and their stored bytes (0 with dryRun: not computed). */
  objects: number;
  bytes: number;
  batches: number;
  /** The cutoff used: runs finished before this time. */
  finishedBefore: Date;
}

/** Refuses a batch size a collection cannot use (`what` names the option). */
export function checkBatchSize(batchSize: unknown, what: string): void {
  if (!Number.isInteger(batchSize) || (batchSize as number) < 1 || (batchSize as number) > 1_000) {
    throw new TypeError(`${what} must be a whole number 1-1000 (got ${String(batchSize)})`);
  }
}

/** The ids of `runs` whose parent, if any, is finished (deleteRuns keeps a child whose
 *  parent is unfinished: the parent may be about to read its outcome). */
async function withFinishedParents(
  store: Store,
  runs: ReadonlyArray<{ id: string; parentId: string | null }>,
): Promise<string[]> {
  const parentIds = [...new Set(runs.flatMap((r) => (r.parentId ? [r.parentId] : [])))];
  const parents = await Promise.all(parentIds.map((id) => store.getRun(id)));
  const unfinished = new Set(
    parents.filter((p) => p && !TERMINAL_STATUSES.has(p.status)).map((p) => p!.id),
  );
  return runs.filter((r) => !r.parentId || !unfinished.has(r.parentId)).map((r) => r.id);
}

/** Deletes (or counts) the finished runs older than `olderThanMs`; see the file header. */
export async function collectFinishedRuns(
  store: Store,
  options: CollectOptions,
): Promise<CollectResult> {
  const batchSize = options.batchSize ?? DEFAULT_GC_BATCH;
  checkBatchSize(batchSize, "retention: batchSize");
  if (!Number.isFinite(options.olderThanMs) || options.olderThanMs < 0) {
    throw new TypeError(
      `retention: olderThan must be a non-negative duration (got ${options.olderThanMs} ms)`,
    );
  }
  const finishedBefore = (await store.now()) - options.olderThanMs;
  const result: CollectResult = {
    runs: 0,
    objects: 0,
    bytes: 0,
    batches: 0,
    finishedBefore: new Date(finishedBefore),
  };
  // A page that does not move the cursor on is a StoreError, not a walk for ever
  // (run-cursor.ts: an id that does not read back as stored).
  const cursor = runCursorWalk("retention");
  const wouldGo = new Set<string>(); // dryRun: the runs counted so far
  for (;;) {
    if (options.signal?.aborted) break;
    const before = cursor.before;
    const runs = await store.listRuns({
      finishedBefore,
      limit: batchSize,
      ...(before && { before }),
    });
    if (runs.length === 0) break;
    const last = runs[runs.length - 1]!;
    result.batches++;
    if (options.dryRun) {
      // Counted as deleteRuns would delete: not a child whose parent is unfinished, nor a run
      // whose child run would stay behind (children counted in an earlier batch would be
      // gone by then).
      const ids = await withFinishedParents(store, runs);
      const children = (await Promise.all(ids.map((id) => store.listRuns({ parentId: id }))))
        .flat()
        .filter((c) => !wouldGo.has(c.id))
        .map((c) => ({ id: c.id, parentId: c.parentId as string }));
      const going = deletableWithChildren(ids, children);
      for (const id of going) wouldGo.add(id);
      result.runs += going.length;
      cursor.advance(last);
    } else {
      // The cutoff again, in the deleting transaction: a run resumed and finished again since
      // it was listed finished after it, and stays.
      const res = await store.deleteRuns(
        runs.map((r) => r.id),
        { finishedBefore },
      );
      result.runs += res.deleted.length;
      result.objects += res.objects;
      result.bytes += res.bytes;
      // Deleted runs leave the listing, so the next page starts from the top again (a cheap
      // index walk); only when some stayed (resumed since listed) is a cursor needed.
      if (res.deleted.length < runs.length) cursor.advance(last);
    }
    options.onBatch?.({ ...result });
    if (runs.length < batchSize) break;
    // Let the workers of this process claim and commit between two batches.
    await new Promise((r) => setImmediate(r));
  }
  return result;
}
