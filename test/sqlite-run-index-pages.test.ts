// The runs indexes on SQLite (migrations 17 and 18): what a run's commits write, and that
// every query of the store over runs stays served by an index.
//
// - A run created claimed and released, and a lease renewal, write no page of an index that
//   no query reads so: before migration 17 each wrote runs_ready (a running run's ready_at
//   is its lease end) and runs_lease_owner, four index pages of a run's two run-level
//   commits and one more per renewal. Counted in the WAL (its frames, by the B-tree each
//   page belongs to), not timed. Since migration 18 a create writes no page of runs_created
//   either: the lists it served merge the runs of each status (runs_status_created).
// - EXPLAIN QUERY PLAN of every statement the store prepares over runs while its list, poll,
//   lease, sweep and retention verbs run: none reads runs without an index, and the ones
//   with an index of their own use it (the claim's poll reads the ready runs by ready_at,
//   not every unfinished run), so a later migration cannot drop one silently.
// - The claim, now two searches (runs not running by runs_ready_idle, running runs whose
//   lease ended by status), takes exactly the runs it took, in (ready_at, id) order.

import { readFileSync, statSync } from "node:fs";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it, vi } from "vitest";
import { sqliteStore } from "../src/index.js";
import type { NewRun } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { tempDbPath } from "./helpers/sqlite.js";
import { sqliteFileAt } from "./helpers/sqlite-old-file.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const c of cleanups.splice(0).reverse()) await c();
});

const T0 = 1_700_000_000_000;

async function openStore() {
  const db = tempDbPath();
  cleanups.push(db.cleanup);
  const clock = createVirtualClock(T0);
  const store = sqliteStore(db.path);
  await store.open({ clock });
  cleanups.push(() => store.close());
  return { store, clock, path: db.path };
}

function newRun(id: string, more: Partial<NewRun> = {}): NewRun {
  return { id, workflow: "wf", version: "1", input: "null", budgetLimit: {}, ...more };
}

/** The B-trees (tables and indexes, by name) whose pages the commits made while `fn` runs
 *  wrote to the WAL, with how many frames each. A reader holds a snapshot meanwhile, so no
 *  checkpoint restarts the WAL: its frames from the size before on are those commits'. */
async function pagesWritten(
  path: string,
  fn: () => Promise<unknown>,
): Promise<Map<string, number>> {
  const reader = new Database(path, { readonly: true });
  try {
    const pageSize = reader.pragma("page_size", { simple: true }) as number;
    reader.exec("BEGIN");
    reader.prepare("SELECT count(*) FROM runs").get();
    const from = Math.max(statSync(`${path}-wal`).size, 32);
    await fn();
    const wal = readFileSync(`${path}-wal`);
    const pages: number[] = [];
    for (let at = from; at + 24 + pageSize <= wal.length; at += 24 + pageSize) {
      pages.push(wal.readUInt32BE(at));
    }
    reader.exec("COMMIT");
    const owner = new Map(
      (
        reader.prepare("SELECT name, pageno FROM dbstat").all() as Array<{
          name: string;
          pageno: number;
        }>
      ).map((r) => [r.pageno, r.name]),
    );
    const byTree = new Map<string, number>();
    for (const p of pages) {
      const name = owner.get(p) ?? `page ${p}`;
      byTree.set(name, (byTree.get(name) ?? 0) + 1);
    }
    return byTree;
  } finally {
    reader.close();
  }
}

describe("SQLite runs indexes: the pages a run's commits write", () => {
  it("a run created claimed, renewed and released writes no page of runs_ready or runs_lease_owner", async () => {
    const { store, clock, path } = await openStore();
    // Some runs first, so each B-tree exists and the file has grown past its first pages.
    for (let i = 0; i < 20; i++) await store.createRun(newRun(`run_warm_${i}`));
    const claimBy = { workerId: "wk_1", leaseMs: 30_000 };
    let epoch = 0;
    const created = await pagesWritten(path, async () => {
      epoch = (await store.createRun(newRun("run_a", { claimBy }))).run.epoch;
    });
    await clock.advance(1_000);
    const renewed = await pagesWritten(path, () =>
      store.renewLeases({ workerId: "wk_1", leaseMs: 30_000, runs: [{ runId: "run_a", epoch }] }),
    );
    const released = await pagesWritten(path, () =>
      store.releaseRun({ runId: "run_a", epoch, status: "completed", output: "1", readyAt: null }),
    );
    const trees = (m: Map<string, number>) =>
      [...m.keys()].filter((k) => k !== "sqlite_schema").sort();
    expect(trees(created)).toEqual([
      "runs",
      "runs_status_created",
      "runs_workflow_created",
      "sqlite_autoindex_runs_1",
    ]);
    // A renewal moves the lease end (and ready_at with it) of a running run: its row only.
    expect(trees(renewed)).toEqual(["runs"]);
    expect(trees(released)).toEqual(["runs", "runs_status_created"]);
  });

  it("a 0-step run's one commit writes the run's row and its list indexes, nothing else", async () => {
    const { store, path } = await openStore();
    for (let i = 0; i < 20; i++) await store.createRun(newRun(`run_warm_${i}`));
    const written = await pagesWritten(path, () =>
      store.createReleasedRun!(
        { ...newRun("run_z"), claimBy: { workerId: "wk_1", leaseMs: 30_000 } },
        () => ({
          status: "completed",
          output: "0",
          readyAt: null,
        }),
      ),
    );
    written.delete("sqlite_schema");
    expect(Object.fromEntries(written)).toEqual({
      runs: 1,
      runs_status_created: 1,
      runs_workflow_created: 1,
      sqlite_autoindex_runs_1: 1,
    });
  });
});

describe("SQLite runs indexes: query plans", () => {
  /** Every statement over runs the store prepares while `fn` runs, with its plan. */
  async function plansOf(path: string, fn: () => Promise<void>): Promise<Map<string, string[]>> {
    const texts = new Set<string>();
    const prepare = Database.prototype.prepare;
    vi.spyOn(Database.prototype, "prepare").mockImplementation(function (
      this: Database.Database,
      sql: string,
    ) {
      texts.add(sql);
      return prepare.call(this, sql);
    });
    await fn();
    vi.restoreAllMocks();
    const db = new Database(path, { readonly: true });
    try {
      const plans = new Map<string, string[]>();
      for (const sql of texts) {
        if (!/\bruns\b/.test(sql) || /^\s*(CREATE|DROP|ALTER|PRAGMA)\b/i.test(sql)) continue;
        if (/^\s*INSERT INTO runs\b/i.test(sql)) continue; // an insert reads no runs
        const explain = db.prepare(`EXPLAIN QUERY PLAN ${sql}`);
        const named = [...sql.matchAll(/@(\w+)/g)].map((m) => m[1]!);
        const rows = (
          named.length > 0
            ? explain.all(Object.fromEntries(named.map((n) => [n, null])))
            : explain.all(...new Array<null>((sql.match(/\?/g) ?? []).length).fill(null))
        ) as Array<{ detail: string }>;
        plans.set(
          sql.replace(/\s+/g, " ").trim(),
          rows.map((r) => r.detail),
        );
      }
      return plans;
    } finally {
      db.close();
    }
  }

  it("no statement of the store reads runs without an index, and each list and poll uses its own", async () => {
    const { store, clock, path } = await openStore();
    await store.createRun(newRun("run_parent"));
    await store.createRun(newRun("run_child", { parentId: "run_parent" }));
    const claimBy = { workerId: "wk_1", leaseMs: 5 };
    const claimed = await store.createRun(newRun("run_claimed", { claimBy }));
    await store.releaseRun({
      runId: "run_claimed",
      epoch: claimed.run.epoch,
      status: "completed",
      output: "1",
      readyAt: null,
    });
    const plans = await plansOf(path, async () => {
      await store.listRuns({});
      await store.listRuns({ status: "running" });
      await store.listRuns({ status: ["running", "waiting"] });
      await store.listRuns({ workflow: "wf" });
      await store.listRuns({ workflow: "wf", version: "1" });
      await store.listRuns({ parentId: "run_parent" });
      await store.listRuns({ parentId: "run_parent", status: ["pending", "running"] });
      await store.listRuns({ waitingForEvent: true });
      await store.listRuns({ waitingForEventPrefix: "cairn.approval:" });
      await store.listRuns({ finishedBefore: T0 + 1 });
      await store.listRuns({ status: "running", before: { createdAt: T0, id: "run_x" }, limit: 5 });
      await store.listRuns({ before: { createdAt: T0, id: "run_x" }, limit: 5 });
      await store.listRuns({ idContains: "run_", limit: 5 });
      await store.claimRuns({ workerId: "wk_2", workflows: ["wf@1"], limit: 5, leaseMs: 1000 });
      await store.renewLeases({
        workerId: "wk_2",
        leaseMs: 1000,
        runs: [{ runId: "run_parent", epoch: 1 }],
      });
      await store.removeWorker("wk_2");
      await store.markUnserved({ served: [], graceMs: 0 });
      await store.listChildrenOfCanceled?.({ limit: 10 });
      await clock.advance(10);
      await store.deleteRuns(["run_claimed"], { finishedBefore: T0 + 100 });
    });
    const uses = (sqlStart: string) => {
      const found = [...plans].filter(([sql]) => sql.startsWith(sqlStart));
      expect(found.length, `a statement starting "${sqlStart}"`).toBeGreaterThan(0);
      return found.map(([, plan]) => plan.join("; "));
    };
    // No statement reads a table of runs whole: each access is a search or an index's scan.
    for (const [sql, plan] of plans) {
      for (const line of plan) {
        expect(line, `${sql}\n  plan: ${plan.join("; ")}`).not.toMatch(/^SCAN (runs|c|p)$/);
      }
    }
    const list = "SELECT id, workflow, version, status,";
    const listWhere = (where: string) =>
      [...plans].filter(
        ([sql]) => sql.startsWith(list) && sql.includes(`FROM runs WHERE ${where}`),
      );
    const planOf = (where: string) => {
      const found = listWhere(where);
      expect(found.length, `listRuns WHERE ${where}`).toBe(1);
      return found[0]![1].join("; ");
    };
    expect(planOf("status = ? ORDER BY")).toContain("USING INDEX runs_status_created (status=?)");
    expect(planOf("status IN (SELECT value FROM json_each(?)) ORDER BY")).toContain(
      "USING INDEX runs_status_created (status=?)",
    );
    expect(planOf("workflow = ? ORDER BY")).toContain(
      "USING INDEX runs_workflow_created (workflow=?)",
    );
    expect(planOf("workflow = ? AND version = ?")).toContain(
      "USING INDEX runs_workflow_created (workflow=?)",
    );
    expect(planOf("parent_id = ? ORDER BY")).toContain(
      "USING INDEX runs_parent_created (parent_id=?)",
    );
    expect(planOf("status IN (SELECT value FROM json_each(?)) AND parent_id = ?")).toMatch(
      /USING INDEX runs_(parent|status)_created/,
    );
    expect(planOf("status = 'waiting' AND waiting_for")).toContain(
      "runs_status_created (status=?)",
    );
    expect(planOf("status = 'waiting' AND EXISTS")).toContain("runs_status_created (status=?)");
    expect(planOf("status IN ('completed'")).toContain("runs_status_created (status=?)");
    // A page after a cursor is a range of the index (a row value), not a scan past it.
    expect(planOf("status = ? AND (created_at, id) < (?, ?)")).toContain(
      "USING INDEX runs_status_created (status=? AND (created_at,id)<(?,?))",
    );
    // With no status, workflow or parent (migration 18 dropped runs_created): the runs of
    // each status by runs_status_created, in order, merged.
    const merged = [...plans].filter(
      ([sql]) => sql.startsWith(list) && sql.includes("FROM runs WHERE status = 'pending'"),
    );
    expect(merged.length).toBe(3);
    for (const [sql, plan] of merged) {
      expect(sql.match(/ UNION ALL /g)?.length).toBe(6);
      const searches = plan.filter((l) => l.startsWith("SEARCH runs"));
      expect(plan[0]).toBe("MERGE (UNION ALL)");
      expect(plan).not.toContain("USE TEMP B-TREE FOR ORDER BY");
      expect(searches.length).toBe(7);
      const range = sql.includes("(created_at, id) < (?, ?)") ? " AND (created_at,id)<(?,?)" : "";
      for (const l of searches) {
        expect(l).toBe(`SEARCH runs USING INDEX runs_status_created (status=?${range})`);
      }
    }
    // The claim's poll: the runs that are not running by ready_at (the ready ones only, not
    // every waiting run), running runs (the leased ones) by status.
    const [claim] = uses("SELECT id, status, crash_unjudged, ready_at FROM runs");
    expect(claim).toContain("SEARCH runs USING INDEX runs_ready_idle (ready_at<?)");
    expect(claim).toContain("SEARCH runs USING INDEX runs_status_created (status=?)");
    // removeWorker: the runs a dead worker leases, among the running ones; its holds by held_by.
    expect(
      uses("UPDATE runs SET ready_at = ?, lease_until = ?, updated_at = ? WHERE lease_owner = ?"),
    ).toEqual(["SEARCH runs USING INDEX runs_status_created (status=?)"]);
    expect(uses("UPDATE runs SET held_by = NULL, held_until = NULL WHERE held_by = ?")).toEqual([
      "SEARCH runs USING INDEX runs_held_by (held_by=?)",
    ]);
    expect(uses("SELECT id, workflow, version, cancel_requested FROM runs")[0]).toContain(
      "runs_status_created (status=?)",
    );
    expect(uses("SELECT c.id AS runId, c.parent_id AS parentId")[0]).toMatch(
      /SEARCH p USING COVERING INDEX runs_status_created.*SEARCH c USING INDEX runs_parent_created/,
    );
  });
});

describe("SQLite claim after migration 17", () => {
  it("takes exactly the claimable runs, running ones whose lease ended among them, in (ready_at, id) order", async () => {
    const { store, clock } = await openStore();
    const lease = (ms: number) => ({ claimBy: { workerId: "wk_1", leaseMs: ms } });
    const release = async (id: string, r: Record<string, unknown>) => {
      const c = await store.createRun(newRun(id, lease(60_000)));
      const out = await store.releaseRun({
        runId: id,
        epoch: c.run.epoch,
        readyAt: null,
        ...r,
      } as never);
      expect(out.ok, id).toBe(true);
    };
    await store.createRun(newRun("run_pending_b")); // ready at T0
    await store.createRun(newRun("run_pending_a")); // ready at T0: before b by id
    await store.createRun(newRun("run_other", { workflow: "other" })); // not served
    await store.createRun(newRun("run_lease_ends", lease(5))); // running, claimable at T0 + 5
    await store.createRun(newRun("run_lease_lives", lease(60_000)));
    await release("run_timer", { status: "waiting", readyAt: T0 + 10, wakeAt: T0 + 10 });
    await release("run_timer_later", {
      status: "waiting",
      readyAt: T0 + 1_000,
      wakeAt: T0 + 1_000,
    });
    await release("run_event", { status: "waiting", waitingFor: ["go"] });
    await release("run_version", { status: "paused", pausedFor: "version", readyAt: T0 + 7 });
    await release("run_budget", { status: "paused", pausedFor: "budget" });
    await release("run_done", { status: "completed", output: "1" });
    await clock.advance(20);
    const first = await store.claimRuns({
      workerId: "wk_2",
      workflows: ["wf@1"],
      limit: 3,
      leaseMs: 1000,
    });
    expect(first.map((c) => [c.run.id, c.recovered])).toEqual([
      ["run_pending_a", false],
      ["run_pending_b", false],
      ["run_lease_ends", true],
    ]);
    const rest = await store.claimRuns({
      workerId: "wk_2",
      workflows: ["wf@1"],
      limit: 10,
      leaseMs: 1000,
    });
    expect(rest.map((c) => c.run.id)).toEqual(["run_version", "run_timer"]);
    // Its own runs are never handed back to a worker; another takes them once their leases end.
    expect(
      await store.claimRuns({ workerId: "wk_2", workflows: ["wf@1"], limit: 10, leaseMs: 1000 }),
    ).toEqual([]);
    await store.removeWorker("wk_2");
    const taken = await store.claimRuns({
      workerId: "wk_3",
      workflows: ["wf@1"],
      limit: 10,
      leaseMs: 1000,
    });
    expect(taken.map((c) => [c.run.id, c.recovered]).sort()).toEqual(
      [
        ["run_lease_ends", true],
        ["run_pending_a", true],
        ["run_pending_b", true],
        ["run_timer", true],
        ["run_version", true],
      ].sort(),
    );
  });
});

describe("SQLite migration 17 on a file of version 16", () => {
  it("drops runs_ready and runs_lease_owner, and the runs already there are claimed as before", async () => {
    const { path, db: old, cleanup } = sqliteFileAt(16, T0);
    cleanups.push(cleanup);
    const insert = old.prepare(
      `INSERT INTO runs (id, workflow, version, status, input, budget_limit, budget_spent,
         ready_at, waiting_for, lease_owner, lease_until, epoch, generation, cancel_requested,
         created_at, updated_at)
       VALUES (?, 'wf', '1', ?, 'null', '{}', '{}', ?, '[]', ?, ?, ?, 0, 0, ?, ?)`,
    );
    insert.run("run_pending", "pending", T0, null, null, 0, T0, T0);
    insert.run("run_lease_ended", "running", T0 + 5, "wk_gone", T0 + 5, 1, T0, T0);
    insert.run("run_lease_lives", "running", T0 + 60_000, "wk_live", T0 + 60_000, 1, T0, T0);
    old.close();
    const clock = createVirtualClock(T0 + 10);
    const store = sqliteStore(path);
    await store.open({ clock });
    cleanups.push(() => store.close());
    const taken = await store.claimRuns({
      workerId: "wk_2",
      workflows: ["wf@1"],
      limit: 10,
      leaseMs: 1000,
    });
    expect(taken.map((c) => [c.run.id, c.recovered, c.run.epoch])).toEqual([
      ["run_pending", false, 1],
      ["run_lease_ended", true, 2],
    ]);
    const check = new Database(path, { readonly: true });
    const indexes = (
      check
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs'")
        .all() as Array<{
        name: string;
      }>
    ).map((r) => r.name);
    check.close();
    expect(indexes).toContain("runs_ready_idle");
    expect(indexes).not.toContain("runs_ready");
    expect(indexes).not.toContain("runs_lease_owner");
  });
});
