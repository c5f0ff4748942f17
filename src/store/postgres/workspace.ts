// Workspace objects and run retention on PostgreSQL (see ../workspace-records.ts).
//
// Races with retention: a ref row must name a stored object (foreign key), so a put that
// refers to an object while deleteRun deletes it cannot both commit. Whichever loses gets
// SQLSTATE 23503: a put answers "missing" (the engine sends the content again), a
// deletion runs again and now sees the new ref. Objects are immutable and content-addressed,
// so putting one twice is a no-op and every verb here may be retried after a lost commit.

import { deletableWithChildren } from "../retention-families.js";
import { TERMINAL_STATUS_LIST } from "../status-sql.js";
import { type RunStatus, TERMINAL_STATUSES } from "../store.js";
import type {
  DeleteRunOutcome,
  DeleteRunsOptions,
  DeleteRunsOutcome,
  PutWorkspaceOutcome,
  WorkspaceObject,
} from "../workspace-records.js";
import { Rollback, type Tx } from "./connection.js";
import { type FeatureTables, featureTables } from "./feature-tables.js";
import { nowSql, type StoreContext } from "./sql.js";
import { sqlState } from "./sql-state.js";

interface ObjectRow {
  hash: string;
  kind: "blob" | "tree";
  size: string | number;
  data: Buffer;
}

const unique = (xs: string[]) => [...new Set(xs)];

/** A foreign-key violation: an object was deleted under a concurrent reference. */
function isForeignKeyRace(err: unknown): boolean {
  return sqlState(err) === "23503";
}

async function missingIn(tx: Tx, ctx: StoreContext, hashes: string[]): Promise<string[]> {
  if (hashes.length === 0) return [];
  const f = featureTables(ctx.t);
  const r = await tx.query<{ hash: string }>(
    `SELECT h.hash FROM unnest($1::text[]) WITH ORDINALITY AS h(hash, ord)
      WHERE NOT EXISTS (SELECT 1 FROM ${f.workspaceObjects} o WHERE o.hash = h.hash)
      ORDER BY h.ord`,
    [hashes],
  );
  return r.rows.map((row) => row.hash);
}

export function missingObjects(ctx: StoreContext, hashes: string[]): Promise<string[]> {
  const wanted = unique(hashes);
  if (wanted.length === 0) return Promise.resolve([]);
  return ctx.db.statements("missingWorkspaceObjects", "idempotent", (tx) =>
    missingIn(tx, ctx, wanted),
  );
}

export async function putObjects(
  ctx: StoreContext,
  p: { runId: string; epoch: number; objects: WorkspaceObject[]; refs: string[] },
): Promise<PutWorkspaceOutcome> {
  const f = featureTables(ctx.t);
  const sent = new Set(p.objects.map((o) => o.hash));
  const refs = unique([...sent, ...p.refs]);
  const put = () =>
    ctx.db.transaction("putWorkspaceObjects", "idempotent", async (tx) => {
      // FOR SHARE: a claim (which moves the epoch) waits for this write, or this write
      // sees the new epoch.
      const run = await tx.query<{ epoch: string }>(
        `SELECT epoch FROM ${ctx.t.runs} WHERE id = $1 FOR SHARE`,
        [p.runId],
      );
      const epoch = run.rows[0]?.epoch;
      if (epoch === undefined || Number(epoch) !== p.epoch) {
        throw new Rollback<PutWorkspaceOutcome>({ ok: false, reason: "lease-lost" });
      }
      const missing = await missingIn(
        tx,
        ctx,
        refs.filter((h) => !sent.has(h)),
      );
      if (missing.length > 0) {
        throw new Rollback<PutWorkspaceOutcome>({ ok: false, reason: "missing", hashes: missing });
      }
      if (p.objects.length > 0) {
        await tx.query(
          `INSERT INTO ${f.workspaceObjects} (hash, kind, size, data, created_at)
            SELECT o.hash, o.kind, o.size, o.data, c.now
              FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bytea[]) AS o(hash, kind, size, data),
                (SELECT ${nowSql(1)} AS now) c
            ON CONFLICT (hash) DO NOTHING`,
          [
            ctx.clockParam(),
            p.objects.map((o) => o.hash),
            p.objects.map((o) => o.kind),
            p.objects.map((o) => o.size),
            p.objects.map((o) => Buffer.from(o.data.buffer, o.data.byteOffset, o.data.byteLength)),
          ],
        );
      }
      await tx.query(
        `INSERT INTO ${f.workspaceRefs} (run_id, hash)
          SELECT $1, h FROM unnest($2::text[]) AS h
          ON CONFLICT DO NOTHING`,
        [p.runId, refs],
      );
      return { ok: true } as PutWorkspaceOutcome;
    });
  try {
    return await put();
  } catch (err) {
    if (!isForeignKeyRace(err)) throw err;
    // An object named only in refs was deleted by a concurrent deleteRun: the next try
    // finds it missing, inside its transaction, and says so.
    return put();
  }
}

export async function heldObjects(
  ctx: StoreContext,
  runId: string,
  hashes: string[],
): Promise<string[]> {
  const wanted = unique(hashes);
  if (wanted.length === 0) return [];
  const f = featureTables(ctx.t);
  const r = await ctx.db.statement<{ hash: string }>(
    "heldWorkspaceObjects",
    "idempotent",
    `SELECT h.hash FROM unnest($2::text[]) WITH ORDINALITY AS h(hash, ord)
      WHERE EXISTS (SELECT 1 FROM ${f.workspaceRefs} r WHERE r.run_id = $1 AND r.hash = h.hash)
      ORDER BY h.ord`,
    [runId, wanted],
  );
  return r.rows.map((row) => row.hash);
}

export async function getObjects(ctx: StoreContext, hashes: string[]): Promise<WorkspaceObject[]> {
  const wanted = unique(hashes);
  if (wanted.length === 0) return [];
  const f = featureTables(ctx.t);
  const r = await ctx.db.statement<ObjectRow>(
    "getWorkspaceObjects",
    "idempotent",
    `SELECT hash, kind, size, data FROM ${f.workspaceObjects} WHERE hash = ANY($1::text[])`,
    [wanted],
  );
  return r.rows.map((row) => ({
    hash: row.hash,
    kind: row.kind,
    size: Number(row.size),
    data: new Uint8Array(row.data.buffer, row.data.byteOffset, row.data.byteLength),
  }));
}

/** Deletes the finished runs among `runIds` (and their rows: deleteRunRows) and then the
 *  objects only they held, in one transaction. */
export function deleteRuns(
  ctx: StoreContext,
  runIds: string[],
  options: DeleteRunsOptions = {},
): Promise<DeleteRunsOutcome> {
  const f = featureTables(ctx.t);
  // A run updated since retention listed it (resumed, finished again) is not yet old enough:
  // it finished after the cutoff. Every stored time is a Date's, so a bound past 2^53 is one.
  const before =
    options.finishedBefore === undefined
      ? null
      : Math.max(
          -Number.MAX_SAFE_INTEGER,
          Math.min(Number.MAX_SAFE_INTEGER, Math.round(options.finishedBefore)),
        );
  return retriedOnForeignKeyRace(() =>
    ctx.db.transaction("deleteRuns", "idempotent", async (tx): Promise<DeleteRunsOutcome> => {
      const finished = await tx.query<{ id: string; parent_id: string | null }>(
        `SELECT id, parent_id FROM ${ctx.t.runs} WHERE id = ANY($1::text[])
            AND status IN (${TERMINAL_STATUS_LIST})
            AND ($2::bigint IS NULL OR updated_at < $2::bigint)
          ORDER BY id FOR UPDATE`,
        [runIds, before],
      );
      const candidates = await withoutChildrenOfUnfinished(ctx, tx, finished.rows);
      const children = await tx.query<{ id: string; parent_id: string }>(
        `SELECT id, parent_id FROM ${ctx.t.runs} WHERE parent_id = ANY($1::text[])`,
        [candidates],
      );
      const ids = deletableWithChildren(
        candidates,
        children.rows.map((c) => ({ id: c.id, parentId: c.parent_id })),
      );
      // A lost commit of an earlier try deleted the ids asked for that are gone now (as
      // deleteRun answers): without them a retry answered [] for runs it had deleted.
      const gone = tx.mayHaveCommitted ? await absentIds(ctx, tx, runIds) : [];
      if (ids.length === 0) return { deleted: gone, objects: 0, bytes: 0 };
      const deleted = gone.length === 0 ? ids : [...gone, ...ids].sort();
      const held = await tx.query<{ hash: string }>(
        `DELETE FROM ${f.workspaceRefs} WHERE run_id = ANY($1::text[]) RETURNING hash`,
        [ids],
      );
      await deleteRunRows(ctx, tx, ids);
      const hashes = [...new Set(held.rows.map((r) => r.hash))];
      if (hashes.length === 0) return { deleted, objects: 0, bytes: 0 };
      return { deleted, ...(await deleteOrphans(tx, f, hashes)) };
    }),
  );
}

/** The ids of `runs` whose parent, if any, is finished: an unfinished parent may be about
 *  to read its child's outcome (a resumed parent whose child ended while it was failed).
 *  Every parent is locked (FOR SHARE, whatever its status): a resume of one waits for this
 *  transaction, and one that committed first is seen. */
async function withoutChildrenOfUnfinished(
  ctx: StoreContext,
  tx: Tx,
  runs: ReadonlyArray<{ id: string; parent_id: string | null }>,
): Promise<string[]> {
  const parentIds = [...new Set(runs.flatMap((r) => (r.parent_id === null ? [] : [r.parent_id])))];
  if (parentIds.length === 0) return runs.map((r) => r.id);
  const parents = await tx.query<{ id: string; status: string }>(
    `SELECT id, status FROM ${ctx.t.runs} WHERE id = ANY($1::text[]) ORDER BY id FOR SHARE`,
    [parentIds],
  );
  const unfinished = new Set(
    parents.rows.filter((p) => !TERMINAL_STATUSES.has(p.status as RunStatus)).map((p) => p.id),
  );
  return runs.filter((r) => r.parent_id === null || !unfinished.has(r.parent_id)).map((r) => r.id);
}

/** The ids among `runIds` that no run has (each once, sorted). */
async function absentIds(ctx: StoreContext, tx: Tx, runIds: string[]): Promise<string[]> {
  const present = await tx.query<{ id: string }>(
    `SELECT id FROM ${ctx.t.runs} WHERE id = ANY($1::text[])`,
    [runIds],
  );
  const there = new Set(present.rows.map((r) => r.id));
  return [...new Set(runIds)].filter((id) => !there.has(id)).sort();
}

/** Deletes a finished run (and its journal rows: deleteRunRows) and the objects
 *  only it held; a run whose child runs remain is kept (retention-families.ts), and so is a
 *  child whose parent is unfinished. Retried when a concurrent put refers to an object it
 *  was deleting. */
export function deleteRun(ctx: StoreContext, runId: string): Promise<DeleteRunOutcome> {
  const f = featureTables(ctx.t);
  return retriedOnForeignKeyRace(() =>
    ctx.db.transaction("deleteRun", "idempotent", async (tx): Promise<DeleteRunOutcome> => {
      const run = await tx.query<{ status: string; parent_id: string | null }>(
        `SELECT status, parent_id FROM ${ctx.t.runs} WHERE id = $1 FOR UPDATE`,
        [runId],
      );
      const status = run.rows[0]?.status;
      if (status === undefined) {
        // A lost commit of an earlier try already deleted it.
        return tx.mayHaveCommitted
          ? { deleted: true, objects: 0, bytes: 0 }
          : { deleted: false, reason: "not-found" };
      }
      if (!TERMINAL_STATUSES.has(status as RunStatus)) {
        return { deleted: false, reason: "not-finished", status };
      }
      const parentId = run.rows[0]?.parent_id ?? null;
      if (parentId !== null) {
        // Locked FOR SHARE as deleteRuns locks it: a resume of the parent waits for this
        // transaction, and one that committed first is seen.
        const parent = await tx.query<{ status: string }>(
          `SELECT status FROM ${ctx.t.runs} WHERE id = $1 FOR SHARE`,
          [parentId],
        );
        const parentStatus = parent.rows[0]?.status;
        if (parentStatus !== undefined && !TERMINAL_STATUSES.has(parentStatus as RunStatus)) {
          return { deleted: false, reason: "parent-unfinished", parentId, parentStatus };
        }
      }
      const children = await tx.query<{ id: string }>(
        `SELECT id FROM ${ctx.t.runs} WHERE parent_id = $1`,
        [runId],
      );
      if (children.rows.length > 0) {
        // Sorted here, not by the database's collation: the same order on both backends.
        const ids = children.rows.map((c) => c.id).sort();
        return { deleted: false, reason: "has-children", children: ids };
      }
      const held = await tx.query<{ hash: string }>(
        `DELETE FROM ${f.workspaceRefs} WHERE run_id = $1 RETURNING hash`,
        [runId],
      );
      await deleteRunRows(ctx, tx, [runId]);
      if (held.rows.length === 0) return { deleted: true, objects: 0, bytes: 0 };
      const hashes = held.rows.map((r) => r.hash);
      return { deleted: true, ...(await deleteOrphans(tx, f, hashes)) };
    }),
  );
}

/** Deletes the runs' rows and their steps (their other rows go with them: ON DELETE
 *  CASCADE) and raises the epoch floor to their largest epoch: a run created later under
 *  one of their ids starts above it, so a stalled worker's write fenced with an old epoch
 *  cannot land in it. */
async function deleteRunRows(ctx: StoreContext, tx: Tx, ids: string[]): Promise<void> {
  // The floor is locked before any run row goes: a createRun reads it with FOR KEY SHARE
  // (sql.ts, runs.ts), so one that would wait for a row deleted here waits for the floor
  // first and then reads the raised one. Read without a lock, its snapshot could predate
  // this commit while its INSERT, after waiting for the deleted row, lands: a new run under
  // the id at the old floor, below the deleted run's epoch.
  await tx.query(`SELECT epoch FROM ${ctx.t.epochFloor} WHERE id = 1 FOR UPDATE`);
  await tx.query(
    `WITH gone AS (DELETE FROM ${ctx.t.runs} WHERE id = ANY($1::text[]) RETURNING epoch)
     UPDATE ${ctx.t.epochFloor}
        SET epoch = greatest(epoch, (SELECT coalesce(max(epoch), 0) FROM gone))
      WHERE id = 1`,
    [ids],
  );
  // Steps have no foreign key (migration 27): every insert of one holds its run's row, so
  // once the statement above has deleted (and so locked) the runs, no step of theirs can be
  // inserted any more, and this later statement (a snapshot of its own) sees every step
  // committed before. In the statement above, as a CTE, it would read that statement's
  // snapshot, taken before a step insert it waited for committed: that step would stay.
  await tx.query(`DELETE FROM ${ctx.t.steps} WHERE run_id = ANY($1::text[])`, [ids]);
}

/** Deletes the objects among `hashes` that no run refers to any more: what was freed. */
async function deleteOrphans(
  tx: Tx,
  f: FeatureTables,
  hashes: string[],
): Promise<{ objects: number; bytes: number }> {
  const freed = await tx.query<{ n: string; bytes: string }>(
    `WITH gone AS (
           DELETE FROM ${f.workspaceObjects} o
            WHERE o.hash = ANY($1::text[])
              AND NOT EXISTS (SELECT 1 FROM ${f.workspaceRefs} r WHERE r.hash = o.hash)
            RETURNING octet_length(o.data) AS bytes)
         SELECT count(*) AS n, coalesce(sum(bytes), 0) AS bytes FROM gone`,
    [hashes],
  );
  return { objects: Number(freed.rows[0]?.n ?? 0), bytes: Number(freed.rows[0]?.bytes ?? 0) };
}

/** A deletion tried again (up to 5 tries) when a concurrent put referred to an object it
 *  was deleting: the next try sees that reference and keeps the object. */
async function retriedOnForeignKeyRace<T>(once: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await once();
    } catch (err) {
      if (!isForeignKeyRace(err) || attempt >= 5) throw err;
    }
  }
}
