// The engine's walks of a run list by its cursor (retention, the runs leased to a worker,
// the run after a client's action) stop with a StoreError naming the run when a page does
// not move the cursor on (engine/run-cursor.ts), where they asked for the same page for
// ever. The real case: a run id stored as text that is not valid UTF-8 (written outside
// cairn) reads back with U+FFFD, which sorts after the stored bytes, so a page after that
// run lists it again. Shown here with a store that ignores the cursor (a decorator of a real
// one) and with such an id written by better-sqlite3 into a real file. Each walk is bounded
// here (a listRuns count, an abort), so without the guard the test fails, not hangs.

import { createRequire } from "node:module";
import { afterEach, describe, expect, it } from "vitest";
import { collectFinishedRuns } from "../src/engine/retention.js";
import { runsLeasedTo } from "../src/engine/runs-leased-to.js";
import { StoreError, sqliteStore } from "../src/index.js";
import type { NewRun, RunFilter, Store } from "../src/store/store.js";
import { createVirtualClock, type VirtualClock } from "../src/testing/index.js";
import { tempDbPath } from "./helpers/sqlite.js";

const require = createRequire(import.meta.url);
const Database = require("better-sqlite3") as new (
  path: string,
) => { prepare(sql: string): { run(...a: unknown[]): unknown }; close(): void };

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

const T0 = 1_700_000_000_000;
const MAX_PAGES = 30;

async function openStore(): Promise<{ store: Store; clock: VirtualClock; path: string }> {
  const clock = createVirtualClock(T0);
  const db = tempDbPath();
  cleanups.push(db.cleanup);
  const store = sqliteStore(db.path);
  await store.open({ clock });
  cleanups.push(() => store.close());
  return { store, clock, path: db.path };
}

const newRun = (id: string, more: Partial<NewRun> = {}): NewRun => ({
  id,
  workflow: "wf",
  version: "1",
  input: "null",
  budgetLimit: {},
  ...more,
});

async function finishedRun(store: Store, id: string): Promise<void> {
  const { run } = await store.createRun(
    newRun(id, { claimBy: { workerId: "w", leaseMs: 60_000 } }),
  );
  await store.releaseRun({
    runId: id,
    epoch: run.epoch,
    status: "completed",
    output: "1",
    readyAt: null,
  });
}

/** `inner` whose listRuns ignores the cursor (a page "after" a run holds it again), and
 *  whose deleteRuns deletes nothing (every run listed stays, as if resumed): a page never
 *  moves on. More than MAX_PAGES pages fail the walk (it would spin); a dry run's lists of
 *  children (by parentId) go to `inner` as asked. */
function stuckStore(inner: Store): Store & { lists: number } {
  const counter = { lists: 0 };
  const listRuns = async (filter: RunFilter = {}) => {
    const { before: _ignored, ...rest } = filter;
    if (rest.parentId !== undefined) return inner.listRuns(rest); // a dry run's children
    if (++counter.lists > MAX_PAGES) {
      throw new Error(`listRuns asked ${counter.lists} times: the walk spins`);
    }
    const first = await inner.listRuns({ ...rest, limit: 1 });
    return first.length === 0 ? [] : Array.from({ length: rest.limit ?? 1 }, () => first[0]!);
  };
  const deleteRuns = async () => ({ deleted: [], objects: 0, bytes: 0 });
  return new Proxy(inner, {
    get(target, key) {
      if (key === "lists") return counter.lists;
      if (key === "listRuns") return listRuns;
      if (key === "deleteRuns") return deleteRuns;
      const value = Reflect.get(target, key, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  }) as Store & { lists: number };
}

describe("a page of the run list that does not move the cursor on", () => {
  it("stops runsLeasedTo with a StoreError naming the run", async () => {
    const { store } = await openStore();
    await store.createRun(newRun("run_held", { claimBy: { workerId: "wk_1", leaseMs: 60_000 } }));
    const stuck = stuckStore(store);
    const err = await runsLeasedTo(stuck, "wk_1").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreError);
    expect((err as Error).message).toMatch(
      /^the runs leased to worker "wk_1": the store listed run "run_held" \(created at \d+\) again on a page after it/,
    );
    expect(stuck.lists).toBe(2);
  });

  it.each([true, false])(
    "stops retention (dryRun %s) with a StoreError naming the run",
    async (dryRun) => {
      const { store, clock } = await openStore();
      await finishedRun(store, "run_old_1");
      await finishedRun(store, "run_old_2");
      await clock.advance(10);
      const stuck = stuckStore(store);
      const err = await collectFinishedRuns(stuck, { olderThanMs: 0, batchSize: 2, dryRun }).catch(
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(StoreError);
      expect((err as Error).message).toMatch(/^retention: the store listed run "run_old_2"/);
      // The first page set the cursor, the second did not move it.
      expect(stuck.lists).toBe(2);
    },
  );

  it("a run id stored as invalid UTF-8 in a real SQLite file: retention stops naming it", async () => {
    const { store, clock, path } = await openStore();
    // Three finished runs created in one millisecond; the middle one's id becomes the bytes
    // "run_" 0x80 (not UTF-8), which reads back as "run_\uFFFD": a page after it (bound as
    // the bytes of U+FFFD, EF BF BD) holds it again, and "run_é" (C3 A9) before it.
    for (const id of ["run_a", "run_X", "run_é"]) await finishedRun(store, id);
    const raw = new Database(path);
    raw.prepare("UPDATE runs SET id = CAST(X'72756E5F80' AS TEXT) WHERE id = 'run_X'").run();
    raw.close();
    await clock.advance(10);
    const listed = (await store.listRuns({ limit: 2 })).map((r) => r.id);
    expect(listed).toEqual(["run_é", "run_\uFFFD"]);
    // The page after the second run holds it again, as its last: the same cursor.
    const after = await store.listRuns({ limit: 2, before: { createdAt: T0, id: "run_\uFFFD" } });
    expect(after.map((r) => r.id)).toEqual(["run_é", "run_\uFFFD"]);

    const stop = new AbortController();
    let batches = 0;
    const onBatch = () => {
      if (++batches >= MAX_PAGES) stop.abort();
    };
    const err = await collectFinishedRuns(store, {
      olderThanMs: 0,
      batchSize: 2,
      dryRun: true,
      signal: stop.signal,
      onBatch,
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreError);
    expect((err as Error).message).toMatch(/^retention: the store listed run "run_\uFFFD"/);
    // The first page's batch; the second page listed the run again and threw.
    expect(batches).toBe(1);
  });
});
