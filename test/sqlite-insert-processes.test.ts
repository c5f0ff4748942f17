// SQLite's one-statement run insert (sql.ts, insertNewRow: the insert checks the epoch floor
// it binds and, while the store is believed unmarked, the encrypted mark, itself) raced by
// another real process while this one creates runs eight at a time (one group commit, each
// create in a SAVEPOINT of its own), half of them claimed:
//
// - the other process raises the epoch floor (what retention's deletions do) 30 times: every
//   run committed after a raise has its epoch at or above that floor (claimed: above it);
// - the other process marks the store encrypted: no run with a plain input is committed
//   after the mark, every create after it is refused (EncryptionKeyMissingError), none
//   before it.
//
// Ordered by the runs' rowids: the other process reads the largest in the transaction that
// writes (the runs committed before it). No defect found: both hold.

import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { EncryptionKeyMissingError, sqliteStore } from "../src/index.js";
import type { NewRun } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { spawnFixture } from "./helpers/child.js";
import { tempDbPath } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const T0 = 1_700_000_000_000;

async function openStore() {
  const db = tempDbPath();
  cleanups.push(db.cleanup);
  const store = sqliteStore(db.path, { busyTimeoutMs: 60_000 });
  await store.open({ clock: createVirtualClock(T0) });
  cleanups.push(() => store.close());
  return { store, path: db.path };
}

function newRun(id: string, claimed: boolean): NewRun {
  return {
    id,
    workflow: "wf",
    version: "1",
    input: '[{"plain":1},0]',
    budgetLimit: {},
    ...(claimed ? { claimBy: { workerId: "wk_1", leaseMs: 600_000 } } : {}),
  };
}

function rowsOf(path: string) {
  const db = new Database(path, { readonly: true });
  try {
    return db.prepare("SELECT rowid, id, status, epoch FROM runs ORDER BY rowid").all() as Array<{
      rowid: number;
      id: string;
      status: string;
      epoch: number;
    }>;
  } finally {
    db.close();
  }
}

/** Resolves once the child said "ready" (it has the file open). */
function ready(child: ReturnType<typeof spawnFixture>): Promise<void> {
  return new Promise((resolve, reject) => {
    child.child.stdout!.on("data", (d) => {
      if (String(d).startsWith("ready")) resolve();
    });
    void child.done.then((r) => reject(new Error(`the child ended first: ${r.stderr}`)));
  });
}

/** The child's JSON lines (after "ready"). */
function linesOf(stdout: string): unknown[] {
  return stdout
    .trim()
    .split("\n")
    .slice(1)
    .map((l) => JSON.parse(l));
}

/** Creates runs eight at a time until `stop()` and then `after` batches more. */
async function createWhile(
  store: ReturnType<typeof sqliteStore>,
  stop: () => boolean,
  after: number,
): Promise<Array<PromiseSettledResult<unknown>>> {
  const results: Array<PromiseSettledResult<unknown>> = [];
  let extra = 0;
  for (let b = 0; b < 100_000 && extra <= after; b++) {
    if (stop()) extra++;
    const batch = Array.from({ length: 8 }, (_, k) =>
      store.createRun(newRun(`run_${b}_${k}`, k % 2 === 0)),
    );
    results.push(...(await Promise.allSettled(batch)));
    // A pause between batches: the other process's busy handler, which sleeps between its
    // tries for the lock, finds it free now and then (a writer that takes it again at once
    // starves it), and a refused create, which settles without I/O, lets its end be heard.
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  return results;
}

describe("SQLite's run insert raced by another process", () => {
  it("takes every epoch floor raised before it: claimed runs start above it", async () => {
    const { store, path } = await openStore();
    const raiser = spawnFixture("store-raw.ts", [path, "floor", "30"]);
    await ready(raiser);
    let ended = false;
    void raiser.done.then(() => {
      ended = true;
    });
    const results = await createWhile(store, () => ended, 2);
    const done = await raiser.done;
    expect(done.stderr).toBe("");
    expect(results.every((r) => r.status === "fulfilled")).toBe(true);
    const raises = linesOf(done.stdout) as Array<{ floor: number; before: number }>;
    expect(raises).toHaveLength(30);
    const rows = rowsOf(path);
    // Runs were created between the raises, not all before or after them.
    expect(
      rows.filter((r) => r.rowid > raises[0]!.before && r.rowid <= raises[29]!.before).length,
    ).toBeGreaterThan(0);
    let checked = 0;
    for (const { floor, before } of raises) {
      for (const r of rows) {
        if (r.rowid <= before) continue;
        checked++;
        expect(r.epoch, r.id).toBeGreaterThanOrEqual(r.status === "running" ? floor + 1 : floor);
      }
    }
    expect(checked).toBeGreaterThan(0);
    // And no run's epoch is above the last floor it could have read (+1 claimed).
    for (const r of rows) expect(r.epoch).toBeLessThanOrEqual(150 + 1);
  });

  it("commits no plain input after another process marks the store, and refuses every create after", async () => {
    const { store, path } = await openStore();
    const marker = spawnFixture("store-raw.ts", [path, "mark", "200"]);
    await ready(marker);
    let ended = false;
    void marker.done.then(() => {
      ended = true;
    });
    const results = await createWhile(store, () => ended, 3);
    const done = await marker.done;
    expect(done.stderr).toBe("");
    const { before } = linesOf(done.stdout)[0] as { before: number };
    const rows = rowsOf(path);
    expect(rows.length).toBeGreaterThanOrEqual(200);
    expect(rows.filter((r) => r.rowid > before)).toEqual([]);
    const refused = results.filter((r) => r.status === "rejected");
    expect(refused.length).toBeGreaterThanOrEqual(3 * 8);
    for (const r of refused) {
      expect((r as PromiseRejectedResult).reason).toBeInstanceOf(EncryptionKeyMissingError);
    }
    // The creates answered created are exactly the runs committed, all before the mark.
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(rows.length);
    // Once refused, every later create is refused too (nothing after the mark slips in).
    const firstRefused = results.findIndex((r) => r.status === "rejected");
    expect(results.slice(firstRefused).every((r) => r.status === "rejected")).toBe(true);
  });
});
