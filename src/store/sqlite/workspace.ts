// Workspace objects and run retention on SQLite (see ../workspace-records.ts). Each verb is
// one transaction; SQLite has one writer at a time, so "check that an object is stored,
// then refer to it" cannot race with a deletion.

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
import { findRow, type Prepare, type StoreContext } from "./sql.js";

interface ObjectRow {
  hash: string;
  kind: "blob" | "tree";
  size: number;
  data: Buffer;
}

const unique = (xs: string[]) => [...new Set(xs)];

export function missingObjects(ctx: StoreContext, hashes: string[]): Promise<string[]> {
  return ctx.read("missingWorkspaceObjects", (tx) => missingIn(tx.prepare, hashes));
}

function missingIn(prepare: Prepare, hashes: string[]): string[] {
  const wanted = unique(hashes);
  if (wanted.length === 0) return [];
  const found = new Set(
    (
      prepare(
        "SELECT hash FROM workspace_objects WHERE hash IN (SELECT value FROM json_each(?))",
      ).all(JSON.stringify(wanted)) as Array<{ hash: string }>
    ).map((r) => r.hash),
  );
  return wanted.filter((h) => !found.has(h));
}

export function putObjects(
  ctx: StoreContext,
  p: { runId: string; epoch: number; objects: WorkspaceObject[]; refs: string[] },
): Promise<PutWorkspaceOutcome> {
  return ctx.write("putWorkspaceObjects", ({ prepare, now }) => putIn(prepare, now, p));
}

function putIn(
  prepare: Prepare,
  now: number,
  p: { runId: string; epoch: number; objects: WorkspaceObject[]; refs: string[] },
): PutWorkspaceOutcome {
  const run = prepare("SELECT epoch FROM runs WHERE id = ?").get(p.runId) as
    | { epoch: number }
    | undefined;
  if (!run || run.epoch !== p.epoch) return { ok: false, reason: "lease-lost" };
  const sent = new Set(p.objects.map((o) => o.hash));
  const missing = missingIn(
    prepare,
    p.refs.filter((h) => !sent.has(h)),
  );
  if (missing.length > 0) return { ok: false, reason: "missing", hashes: missing };
  const insert = prepare(
    `INSERT INTO workspace_objects (hash, kind, size, data, created_at) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT (hash) DO NOTHING`,
  );
  for (const o of p.objects) {
    insert.run(
      o.hash,
      o.kind,
      o.size,
      Buffer.from(o.data.buffer, o.data.byteOffset, o.data.byteLength),
      now,
    );
  }
  const ref = prepare(
    "INSERT INTO workspace_refs (run_id, hash) VALUES (?, ?) ON CONFLICT DO NOTHING",
  );
  for (const h of unique([...sent, ...p.refs])) ref.run(p.runId, h);
  return { ok: true };
}

export function getObjects(ctx: StoreContext, hashes: string[]): Promise<WorkspaceObject[]> {
  return ctx.read("getWorkspaceObjects", ({ prepare }) => {
    const wanted = unique(hashes);
    if (wanted.length === 0) return [];
    const rows = prepare(
      `SELECT hash, kind, size, data FROM workspace_objects
     WHERE hash IN (SELECT value FROM json_each(?))`,
    ).all(JSON.stringify(wanted)) as ObjectRow[];
    return rows.map((r) => ({
      hash: r.hash,
      kind: r.kind,
      size: r.size,
      data: new Uint8Array(r.data.buffer, r.data.byteOffset, r.data.byteLength),
    }));
  });
}

export function heldObjects(ctx: StoreContext, runId: string, hashes: string[]): Promise<string[]> {
  return ctx.read("heldWorkspaceObjects", ({ prepare }) => {
    const wanted = unique(hashes);
    if (wanted.length === 0) return [];
    const held = new Set(
      (
        prepare(
          "SELECT hash FROM workspace_refs WHERE run_id = ? AND hash IN (SELECT value FROM json_each(?))",
        ).all(runId, JSON.stringify(wanted)) as Array<{ hash: string }>
      ).map((r) => r.hash),
    );
    return wanted.filter((h) => held.has(h));
  });
}

/** Deletes a finished run's records and the objects only it held; a run whose child runs
 *  remain is kept (retention-families.ts), and so is a child whose parent is unfinished. */
export function deleteRun(ctx: StoreContext, runId: string): Promise<DeleteRunOutcome> {
  return ctx.write("deleteRun", (tx): DeleteRunOutcome => {
    const row = findRow(tx, runId);
    if (!row) return { deleted: false, reason: "not-found" };
    if (!TERMINAL_STATUSES.has(row.status)) {
      return { deleted: false, reason: "not-finished", status: row.status };
    }
    const { prepare } = tx;
    const id = row.id;
    const parent = prepare(
      "SELECT p.id, p.status FROM runs c JOIN runs p ON p.id = c.parent_id WHERE c.id = ?",
    ).get(id) as { id: string; status: RunStatus } | undefined;
    if (parent && !TERMINAL_STATUSES.has(parent.status)) {
      return {
        deleted: false,
        reason: "parent-unfinished",
        parentId: parent.id,
        parentStatus: parent.status,
      };
    }
    const children = (
      prepare("SELECT id FROM runs WHERE parent_id = ?").all(id) as Array<{ id: string }>
    )
      .map((c) => c.id)
      .sort();
    if (children.length > 0) return { deleted: false, reason: "has-children", children };
    const held = (
      prepare("SELECT hash FROM workspace_refs WHERE run_id = ?").all(id) as Array<{
        hash: string;
      }>
    ).map((r) => r.hash);
    for (const table of RUN_TABLES) prepare(`DELETE FROM ${table} WHERE run_id = ?`).run(id);
    deleteRunRows(prepare, [id]);
    return { deleted: true, ...deleteOrphans(prepare, held) };
  });
}

/** Every table whose rows belong to one run (by run_id). */
const RUN_TABLES = [
  "workspace_refs",
  "approvals",
  "steps",
  "attempts",
  "intents",
  "events",
  "run_streams",
] as const;

/** Deletes the finished runs among `ids` with their records, then the objects only they held. */
export function deleteRuns(
  ctx: StoreContext,
  ids: string[],
  options: DeleteRunsOptions = {},
): Promise<DeleteRunsOutcome> {
  return ctx.write("deleteRuns", ({ prepare }): DeleteRunsOutcome => {
    const all = JSON.stringify(ids);
    // A run updated since retention listed it (resumed, finished again) is not yet old
    // enough: it finished after the cutoff.
    const before = options.finishedBefore ?? null;
    // Not a child whose parent is unfinished: the parent may be about to read its outcome
    // (a resumed parent whose child ended while it was failed).
    const candidates = (
      prepare(
        `SELECT id FROM runs c WHERE id IN (SELECT value FROM json_each(?))
         AND status IN (${TERMINAL_STATUS_LIST})
         AND (? IS NULL OR updated_at < ?)
         AND NOT EXISTS (SELECT 1 FROM runs p WHERE p.id = c.parent_id
                           AND p.status NOT IN (${TERMINAL_STATUS_LIST}))`,
      ).all(all, before, before) as Array<{ id: string }>
    ).map((r) => r.id);
    const children = prepare(
      `SELECT id, parent_id AS parentId FROM runs
       WHERE parent_id IN (SELECT value FROM json_each(?))`,
    ).all(JSON.stringify(candidates)) as Array<{ id: string; parentId: string }>;
    const finished = deletableWithChildren(candidates, children);
    if (finished.length === 0) return { deleted: [], objects: 0, bytes: 0 };
    const gone = JSON.stringify(finished);
    const held = (
      prepare(
        "SELECT DISTINCT hash FROM workspace_refs WHERE run_id IN (SELECT value FROM json_each(?))",
      ).all(gone) as Array<{ hash: string }>
    ).map((r) => r.hash);
    for (const table of RUN_TABLES) {
      prepare(`DELETE FROM ${table} WHERE run_id IN (SELECT value FROM json_each(?))`).run(gone);
    }
    deleteRunRows(prepare, finished);
    return { deleted: finished, ...deleteOrphans(prepare, held) };
  });
}

/** Deletes the runs' rows and raises the epoch floor to their largest epoch: a run created
 *  later under one of their ids starts above it, so a stalled worker's write fenced with an
 *  old epoch cannot land in it. */
function deleteRunRows(prepare: Prepare, ids: string[]): void {
  const all = JSON.stringify(ids);
  prepare(
    `UPDATE epoch_floor SET epoch = max(epoch, coalesce(
       (SELECT max(epoch) FROM runs WHERE id IN (SELECT value FROM json_each(?))), 0))
     WHERE id = 1`,
  ).run(all);
  prepare("DELETE FROM runs WHERE id IN (SELECT value FROM json_each(?))").run(all);
}

function deleteOrphans(prepare: Prepare, held: string[]): { objects: number; bytes: number } {
  if (held.length === 0) return { objects: 0, bytes: 0 };
  const orphans = JSON.stringify(held);
  const freed = prepare(
    `SELECT count(*) AS n, coalesce(sum(length(data)), 0) AS bytes FROM workspace_objects o
     WHERE o.hash IN (SELECT value FROM json_each(?))
       AND NOT EXISTS (SELECT 1 FROM workspace_refs r WHERE r.hash = o.hash)`,
  ).get(orphans) as { n: number; bytes: number };
  prepare(
    `DELETE FROM workspace_objects
     WHERE hash IN (SELECT value FROM json_each(?))
       AND NOT EXISTS (SELECT 1 FROM workspace_refs r WHERE r.hash = workspace_objects.hash)`,
  ).run(orphans);
  return { objects: freed.n, bytes: freed.bytes };
}
