// Run lists paged by a cursor after SQLite migration 18 (no runs_created: a list with no
// status, workflow or parent filter merges the runs of each status from runs_status_created).
// A cursor is the last run shown, (createdAt, id): a run's status may change between two
// pages (it moves from one status's index range to another's), its createdAt never does, so
// a walk sees each run that existed when it began exactly once, in (createdAt, id)
// descending order, as PostgreSQL's store lists the same sequence. Ties of createdAt across
// statuses are ordered by id; limits 0 and 1 and a limit past any count hold too, and a
// clock stepped back between pages (runs made then come behind the cursor, at most once).
// A limit below 0 or a fraction: SQLite bound it as given (every run; a datatype mismatch)
// where PostgreSQL lists none or floors it; now both alike (runs.ts, listRuns).

import { afterEach, describe, expect, it } from "vitest";
import { sqliteStore } from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import type { NewRun, RunFilter, RunRecord, Store } from "../src/store/store.js";
import { createVirtualClock, type VirtualClock } from "../src/testing/index.js";
import { pgUrl } from "./helpers/engines.js";
import { testSchema } from "./helpers/postgres.js";
import { tempDbPath } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

const T0 = 1_700_000_000_000;
const BACKENDS = pgUrl ? (["sqlite", "postgres"] as const) : (["sqlite"] as const);

async function openStore(backend: "sqlite" | "postgres"): Promise<{
  store: Store;
  clock: VirtualClock;
}> {
  const clock = createVirtualClock(T0);
  let store: Store;
  if (backend === "sqlite") {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    store = sqliteStore(db.path);
  } else {
    const { schema, drop } = testSchema(pgUrl!);
    cleanups.push(drop);
    store = postgresStore(pgUrl!, { schema });
  }
  await store.open({ clock });
  cleanups.push(() => store.close());
  return { store, clock };
}

function newRun(id: string, more: Partial<NewRun> = {}): NewRun {
  return { id, workflow: "wf", version: "1", input: "null", budgetLimit: {}, ...more };
}

const claimBy = { workerId: "wk_1", leaseMs: 600_000 };

/** 42 runs, three created each millisecond (ties), ids out of creation order, in every
 *  status: the runs created claimed are released to each status but running and pending. */
async function seed(store: Store, clock: VirtualClock): Promise<Map<string, RunRecord>> {
  const runs = new Map<string, RunRecord>();
  const ends = ["running", "completed", "failed", "waiting", "paused", "pending"] as const;
  for (let i = 0; i < 42; i++) {
    if (i % 3 === 0) await clock.advance(1);
    const id = `run_${((i * 37) % 100).toString().padStart(2, "0")}_${i}`;
    const kind = i % 7;
    if (kind === 6) {
      await store.createRun(newRun(id));
      await store.requestCancel(id, "no");
      runs.set(id, (await store.getRun(id))!);
      continue;
    }
    if (kind === 5) {
      runs.set(id, (await store.createRun(newRun(id))).run);
      continue;
    }
    const { run } = await store.createRun(newRun(id, { claimBy }));
    const end = ends[kind]!;
    if (end !== "running") {
      await store.releaseRun({
        runId: id,
        epoch: run.epoch,
        status: end,
        output: end === "completed" ? "1" : null,
        readyAt: end === "waiting" || end === "pending" ? clock.now() + 50 : null,
        ...(end === "waiting" ? { waitingFor: ["go"] } : {}),
        ...(end === "paused" ? { pausedFor: "budget" as const } : {}),
      });
    }
    runs.set(id, (await store.getRun(id))!);
  }
  return runs;
}

const byCursorOrder = (a: RunRecord, b: RunRecord) =>
  b.createdAt - a.createdAt || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0);

/** Walks the list a page at a time; `between(page)` runs after each page. */
async function walk(
  store: Store,
  filter: RunFilter,
  between: (page: number) => Promise<void>,
): Promise<string[]> {
  const seen: string[] = [];
  let before: RunFilter["before"];
  for (let page = 0; page < 200; page++) {
    const runs = await store.listRuns({ ...filter, ...(before && { before }) });
    seen.push(...runs.map((r) => r.id));
    if (runs.length < (filter.limit ?? Number.POSITIVE_INFINITY)) return seen;
    const last = runs[runs.length - 1]!;
    before = { createdAt: last.createdAt, id: last.id };
    await between(page);
  }
  throw new Error("the walk did not end in 200 pages");
}

describe.each(BACKENDS)("%s: a run list walked by its cursor", (backend) => {
  it("sees each run once, in (createdAt, id) order, while runs change status between pages", async () => {
    const { store, clock } = await openStore(backend);
    const runs = await seed(store, clock);
    const expected = [...runs.values()].sort(byCursorOrder).map((r) => r.id);
    expect(new Set([...runs.values()].map((r) => r.status)).size).toBe(7);
    // Ties across statuses: some millisecond holds runs of two statuses or more.
    const statusesAt = new Map<number, Set<string>>();
    for (const r of runs.values()) {
      statusesAt.set(r.createdAt, (statusesAt.get(r.createdAt) ?? new Set()).add(r.status));
    }
    expect([...statusesAt.values()].some((s) => s.size >= 2)).toBe(true);

    // Between pages: the pending runs are claimed (pending -> running), the running ones
    // released (running -> completed or pending again), a waiting one canceled; runs move
    // from one status's range of runs_status_created to another's, behind and ahead of the
    // cursor. New runs are created too: newer than the walk's start, never in a later page.
    const moved = new Set<string>();
    const seen = await walk(store, { limit: 4 }, async (page) => {
      const claimed = await store.claimRuns({
        workerId: "wk_2",
        workflows: ["wf@1"],
        limit: 3,
        leaseMs: 600_000,
      });
      for (const c of claimed) moved.add(c.run.id);
      const running = await store.listRuns({ status: "running", limit: 2 });
      for (const r of running) {
        await store.releaseRun({
          runId: r.id,
          epoch: r.epoch,
          status: page % 2 === 0 ? "completed" : "pending",
          output: page % 2 === 0 ? "2" : null,
          readyAt: page % 2 === 0 ? null : clock.now(),
        });
        moved.add(r.id);
      }
      const [waiting] = await store.listRuns({ status: "waiting", limit: 1 });
      if (waiting) {
        await store.requestCancel(waiting.id, "moved");
        moved.add(waiting.id);
      }
      await clock.advance(1);
      await store.createRun(newRun(`run_new_${page}`));
    });
    expect(moved.size).toBeGreaterThan(10);
    expect(seen).toEqual(expected);
  });

  it("pages of limit 1, a limit past the count, limit 0, and a cursor before every run", async () => {
    const { store, clock } = await openStore(backend);
    const runs = await seed(store, clock);
    const expected = [...runs.values()].sort(byCursorOrder).map((r) => r.id);
    expect(await walk(store, { limit: 1 }, async () => {})).toEqual(expected);
    expect((await store.listRuns({ limit: 1_000_000 })).map((r) => r.id)).toEqual(expected);
    expect((await store.listRuns({ limit: Number.MAX_SAFE_INTEGER })).map((r) => r.id)).toEqual(
      expected,
    );
    expect(await store.listRuns({ limit: 0 })).toEqual([]);
    const oldest = runs.get(expected[expected.length - 1]!)!;
    expect(
      await store.listRuns({ before: { createdAt: oldest.createdAt, id: oldest.id } }),
    ).toEqual([]);
    // A cursor naming no run (another store's, a deleted run's) pages from where it sorts.
    const mid = runs.get(expected[20]!)!;
    expect(
      (await store.listRuns({ before: { createdAt: mid.createdAt, id: `${mid.id}~` } })).map(
        (r) => r.id,
      ),
    ).toEqual(expected.slice(20));
    // Filtered by idContains or version: the same merge, the same walk.
    expect(await walk(store, { limit: 5, idContains: "_1" }, async () => {})).toEqual(
      expected.filter((id) => id.includes("_1")),
    );
    expect(await walk(store, { limit: 3, version: "1" }, async () => {})).toEqual(expected);
  });

  it("a limit below 0 lists none and a fractional one is floored, on both backends alike", async () => {
    // SQLite bound the limit as given: LIMIT -1 listed every run (PostgreSQL none), LIMIT 2.5
    // failed with a datatype mismatch (PostgreSQL listed 2). Both filtered and merged lists.
    const { store, clock } = await openStore(backend);
    await seed(store, clock);
    for (const filter of [{}, { status: "completed" as const }, { workflow: "wf" }]) {
      expect(await store.listRuns({ ...filter, limit: -1 })).toEqual([]);
      expect(await store.listRuns({ ...filter, limit: -5 })).toEqual([]);
      expect(await store.listRuns({ ...filter, limit: 2.5 })).toEqual(
        await store.listRuns({ ...filter, limit: 2 }),
      );
      expect((await store.listRuns({ ...filter, limit: 0.5 })).length).toBe(0);
    }
  });

  it("a clock going backwards between pages: runs made meanwhile come behind the cursor at most once", async () => {
    // A clock of its own, stepped back between pages (an NTP step; the virtual clock never
    // goes backwards): the runs created then are older than runs already listed.
    let now = T0;
    const clock = { now: () => now } as unknown as VirtualClock;
    let store: Store;
    if (backend === "sqlite") {
      const db = tempDbPath();
      cleanups.push(db.cleanup);
      store = sqliteStore(db.path);
    } else {
      const { schema, drop } = testSchema(pgUrl!);
      cleanups.push(drop);
      store = postgresStore(pgUrl!, { schema });
    }
    await store.open({ clock });
    cleanups.push(() => store.close());
    const seeded: string[] = [];
    for (let i = 0; i < 20; i++) {
      now = T0 + i * 10;
      const { run } = await store.createRun(newRun(`run_s${i}`, i % 2 ? { claimBy } : {}));
      seeded.push(run.id);
    }
    const made: RunRecord[] = [];
    const seen = await walk(store, { limit: 3 }, async (page) => {
      now -= 37;
      made.push((await store.createRun(newRun(`run_back${page}`, { claimBy }))).run);
    });
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen.filter((id) => id.startsWith("run_s"))).toEqual([...seeded].reverse());
    // Those made behind the cursor are listed where their time puts them; the rest not.
    const all = new Map((await store.listRuns({})).map((r) => [r.id, r]));
    const order = seen.map((id) => all.get(id)!);
    expect([...order].sort(byCursorOrder)).toEqual(order);
    expect(made.some((r) => seen.includes(r.id))).toBe(true);
    // Epochs are the floor's, whatever the clock: claimed runs start at 1.
    expect(made.every((r) => r.epoch === 1)).toBe(true);
  });
});
