// SQLite migration 18 drops runs_created: a new run's row goes into one B-tree less (a 0-step
// run's one commit wrote five: the table, its id index, runs_created, runs_status_created,
// runs_workflow_created). The lists it served (no status, workflow or parent filter: the
// newest runs, a page after a cursor, ids containing a text) merge the runs of each status
// from runs_status_created. A file of version 17 keeps every row as it was, and lists as
// it listed: newest first, ties on created_at by id, across every status.

import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { sqliteStore } from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { sqliteFileAt } from "./helpers/sqlite-old-file.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const T0 = 1_700_000_000_000;
const STATUSES = ["pending", "running", "waiting", "paused", "completed", "failed", "canceled"];

/** A file migrated up to 17, as the cairn before 18 left it, with `n` runs of each status. */
function fileAt17(n: number): string {
  const { path, db: old, cleanup } = sqliteFileAt(17, T0);
  cleanups.push(cleanup);
  const insert = old.prepare(
    `INSERT INTO runs (id, workflow, version, status, reason, paused_for, input, output, error,
       budget_limit, budget_spent, parent_id, ready_at, wake_at, waiting_for, lease_owner,
       lease_until, epoch, generation, cancel_requested, created_at, updated_at, failed_calls,
       trace_context, crash_unjudged, claimed_from, handed_input_digest, held_by, held_until)
     VALUES (@id, @workflow, '1', @status, @reason, @paused_for, @input, @output, @error,
       '{"usd":2}', '{"usd":1}', @parent_id, @ready_at, @wake_at, @waiting_for, @lease_owner,
       @lease_until, @epoch, @generation, @cancel_requested, @created_at, @updated_at,
       @failed_calls, @trace_context, @crash_unjudged, @claimed_from, @digest, @held_by,
       @held_until)`,
  );
  let i = 0;
  for (let k = 0; k < n; k++) {
    for (const status of STATUSES) {
      i++;
      // Ties on created_at (three runs a millisecond), ids out of creation order.
      const created = T0 + Math.floor(i / 3);
      insert.run({
        id: `run_${((i * 7919) % 1000).toString().padStart(3, "0")}_${i}`,
        workflow: i % 2 === 0 ? "even" : "odd",
        status,
        reason: status === "paused" ? "paused for a reason" : null,
        paused_for: status === "paused" ? "budget" : null,
        input: `[{"i":${i}},0]`,
        output: status === "completed" ? `[${i}]` : null,
        error: status === "failed" ? '["Error","failed",null,null]' : null,
        parent_id: i > 7 && i % 5 === 0 ? `run_${((7919 * 3) % 1000).toString()}_3` : null,
        ready_at: ["pending", "waiting", "paused"].includes(status) ? created + 5 : null,
        wake_at: status === "waiting" ? created + 5 : null,
        waiting_for: status === "waiting" ? '["go"]' : "[]",
        lease_owner: status === "running" ? "wk_1" : null,
        lease_until: status === "running" ? created + 30_000 : null,
        epoch: i % 4,
        generation: i % 3,
        cancel_requested: status === "running" && i % 2 === 0 ? 1 : 0,
        created_at: created,
        updated_at: created + 1,
        failed_calls: status === "failed" ? '[{"key":"s#1","generation":0}]' : "[]",
        trace_context:
          i % 2 === 0 ? "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" : null,
        crash_unjudged: status === "paused" ? 1 : 0,
        claimed_from: status === "running" ? "pending" : null,
        digest: i % 3 === 0 ? `digest-${i}` : null,
        held_by: status === "failed" ? "wk_2" : null,
        held_until: status === "failed" ? created + 9 : null,
      });
    }
  }
  old.close();
  return path;
}

function rows(path: string): unknown[] {
  const db = new Database(path, { readonly: true });
  try {
    return db.prepare("SELECT * FROM runs ORDER BY id").all();
  } finally {
    db.close();
  }
}

describe("SQLite migration 18 on a file of version 17", () => {
  it("keeps every column of runs of every status, drops runs_created, and lists as before", async () => {
    const path = fileAt17(6);
    const before = rows(path);
    // The order lists had: by runs_created, newest first, ties by id.
    const old = new Database(path, { readonly: true });
    const order = (
      old.prepare("SELECT id FROM runs ORDER BY created_at DESC, id DESC").all() as Array<{
        id: string;
      }>
    ).map((r) => r.id);
    old.close();
    const store = sqliteStore(path);
    await store.open({ clock: createVirtualClock(T0 + 1_000) });
    cleanups.push(() => store.close());
    expect(rows(path)).toEqual(before);
    const check = new Database(path, { readonly: true });
    const indexes = (
      check
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs'")
        .all() as Array<{ name: string }>
    ).map((r) => r.name);
    const version = check.prepare("SELECT max(version) AS v FROM schema_version").get();
    check.close();
    expect(version).toEqual({ v: 18 });
    expect(indexes).not.toContain("runs_created");
    expect(indexes).toContain("runs_status_created");

    expect((await store.listRuns({})).map((r) => r.id)).toEqual(order);
    // Page by page after a cursor, across statuses and ties.
    const paged: string[] = [];
    let cursor: { createdAt: number; id: string } | undefined;
    for (;;) {
      const page = await store.listRuns({ limit: 4, ...(cursor && { before: cursor }) });
      paged.push(...page.map((r) => r.id));
      if (page.length < 4) break;
      const last = page.at(-1)!;
      cursor = { createdAt: last.createdAt, id: last.id };
    }
    expect(paged).toEqual(order);
    // Ids containing a text, and a version (no index of their own), in the same order.
    expect((await store.listRuns({ idContains: "_1", limit: 10 })).map((r) => r.id)).toEqual(
      order.filter((id) => id.includes("_1")).slice(0, 10),
    );
    expect((await store.listRuns({ version: "1" })).map((r) => r.id)).toEqual(order);
    expect(await store.listRuns({ version: "2" })).toEqual([]);
    // A filter with an index of its own is as it was.
    const odd = await store.listRuns({ workflow: "odd" });
    expect(odd.map((r) => r.id)).toEqual(order.filter((id) => Number(id.split("_")[2]) % 2 === 1));
    // The records read through the new lists are the rows (every column read back).
    const all = await store.listRuns({});
    for (const r of all) expect(await store.getRun(r.id)).toEqual(r);
  });
});
