// SQLite migration 18 (DROP INDEX runs_created) run by real processes on one file of
// version 17 that holds runs of every status and hostile values (a NUL in ids and inputs,
// bytes that are no UTF-8 (a lone surrogate's, an emoji cut in two), a 1 MiB input):
//
// - two processes opening it at once: one migrates, the other finds it migrated; both list
//   the runs as the file listed them by runs_created before (newest first, ties by id), and
//   every row keeps its bytes;
// - a process SIGKILLed in the middle of migrating (the index dropped, inside the migrating
//   transaction, not committed), while another waits for the lock: the file is left at 17
//   with runs_created, intact; the waiting process then migrates it, and the next two opens
//   find it at 18;
// - readers opening with mustExist while three processes create the store in a directory
//   not made yet: each lists it or refuses it with a StoreError (no file yet, no cairn
//   tables yet), and the creators all open it.
//
// No defect found: this holds on origin/main (the migration is one transaction, read again
// under the write lock: migrate.ts).

import { readFileSync } from "node:fs";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { MIGRATIONS } from "../src/store/sqlite/migrations/index.js";
import { type ChildResult, spawnFixture } from "./helpers/child.js";
import { tempDbPath, until } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const T0 = 1_700_000_000_000;
const STATUSES = ["pending", "running", "waiting", "paused", "completed", "failed", "canceled"];

/** Bytes no UTF-8 decoder keeps: a lone surrogate's (ED A0 80), an emoji cut in two. */
const HOSTILE_HEX = ["eda080", "f09f", "00"];

/** A file migrated up to 17, as the cairn before 18 left it, with `n` runs of each status. */
function fileAt17(n: number): string {
  const db = tempDbPath();
  cleanups.push(db.cleanup);
  const old = new Database(db.path);
  old.pragma("journal_mode = WAL");
  old.exec(
    "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
  );
  for (const m of MIGRATIONS.filter((m) => m.version <= 17)) {
    old.exec(m.sql);
    old.prepare("INSERT INTO schema_version VALUES (?, ?)").run(m.version, T0);
  }
  const insert = old.prepare(
    `INSERT INTO runs (id, workflow, version, status, input, output, budget_limit, budget_spent,
       ready_at, waiting_for, lease_owner, lease_until, epoch, generation, cancel_requested,
       created_at, updated_at, failed_calls)
     VALUES (@id, 'wf', '1', @status, CAST(@input AS TEXT), CAST(@output AS TEXT), '{}', '{}',
       @ready_at, @waiting_for, @lease_owner, @lease_until, 1, 0, 0, @created_at,
       @created_at, '[]')`,
  );
  const big = Buffer.from(JSON.stringify(["x".repeat(1 << 20), 0]));
  let i = 0;
  old.transaction(() => {
    for (let k = 0; k < n; k++) {
      for (const status of STATUSES) {
        i++;
        const hostile = Buffer.concat([
          Buffer.from('["'),
          Buffer.from(HOSTILE_HEX[i % HOSTILE_HEX.length]!, "hex"),
          Buffer.from('",0]'),
        ]);
        insert.run({
          // Ties on created_at (four runs a millisecond); a NUL inside some ids.
          id: i % 11 === 0 ? `run_${i}\u0000tail` : `run_${(i * 7919) % 1000}_${i}`,
          status,
          input: i === 5 ? big : hostile,
          output: status === "completed" ? hostile : null,
          ready_at: ["pending", "waiting", "paused"].includes(status) ? T0 : null,
          waiting_for: status === "waiting" ? '["go"]' : "[]",
          lease_owner: status === "running" ? "wk_1" : null,
          lease_until: status === "running" ? T0 + 30_000 : null,
          created_at: T0 + Math.floor(i / 4),
        });
      }
    }
  })();
  old.close();
  return db.path;
}

/** The file's version, whether runs_created is there, quick_check, and every row's bytes. */
function state(path: string) {
  const db = new Database(path, { readonly: true });
  try {
    return {
      version: (db.prepare("SELECT max(version) AS v FROM schema_version").get() as { v: number })
        .v,
      runsCreated: db
        .prepare("SELECT count(*) AS n FROM sqlite_schema WHERE name = 'runs_created'")
        .pluck()
        .get(),
      check: db.pragma("quick_check", { simple: true }),
      rows: db
        .prepare(
          "SELECT hex(id) AS id, status, hex(input) AS input, hex(output) AS output, created_at " +
            "FROM runs ORDER BY hex(id)",
        )
        .all(),
    };
  } finally {
    db.close();
  }
}

/** The runs' ids as the file lists them by runs_created: newest first, ties by id. */
function listedAt17(path: string): string[] {
  const db = new Database(path, { readonly: true });
  try {
    return db
      .prepare("SELECT id FROM runs INDEXED BY runs_created ORDER BY created_at DESC, id DESC")
      .pluck()
      .all() as string[];
  } finally {
    db.close();
  }
}

/** Whether process `pid`'s main thread sleeps in a timed sleep (SQLite's busy handler
 *  between its tries for a lock; nothing else in opening a store sleeps so). */
function busyWaiting(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/wchan`, "utf8") === "hrtimer_nanosleep";
  } catch {
    return false;
  }
}

function listed(r: ChildResult): string[] {
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout.trim().split("\n").at(-1)!) as string[];
}

describe("SQLite migration 18 by real processes", () => {
  it("two processes opening one version-17 file at once: both list as before, rows unchanged", async () => {
    const path = fileAt17(40);
    const before = state(path);
    expect(before.version).toBe(17);
    const order = listedAt17(path);
    expect(order).toHaveLength(280);
    const [a, b] = await Promise.all([
      spawnFixture("open-store.ts", [path]).done,
      spawnFixture("open-store.ts", [path]).done,
    ]);
    expect(listed(a)).toEqual(order);
    expect(listed(b)).toEqual(order);
    const after = state(path);
    expect(after).toEqual({ ...before, version: 18, runsCreated: 0 });
  });

  it("a process killed in the middle of migrating leaves 17 intact; the one waiting migrates", async () => {
    const path = fileAt17(10);
    const before = state(path);
    const order = listedAt17(path);
    const stalled = spawnFixture("open-store.ts", [path, "stall"]);
    cleanups.push(() => {
      stalled.child.kill("SIGKILL");
    });
    await new Promise<void>((resolve, reject) => {
      stalled.child.stdout!.on("data", (d) => {
        if (String(d).includes("stalled")) resolve();
      });
      void stalled.done.then((r) => reject(new Error(`the stalling child ended: ${r.stderr}`)));
    });
    // Mid-migration: runs_created dropped in its transaction, nothing committed.
    expect(state(path)).toEqual(before);
    // Another process opens meanwhile: it waits for the write lock the migration holds (its
    // main thread seen asleep in SQLite's busy handler, which sleeps between tries).
    const waiting = spawnFixture("open-store.ts", [path]);
    await until(() => busyWaiting(waiting.child.pid!), "the second process waiting for the lock");
    stalled.child.kill("SIGKILL");
    expect((await stalled.done).signal).toBe("SIGKILL");
    expect(listed(await waiting.done)).toEqual(order);
    const after = state(path);
    expect(after).toEqual({ ...before, version: 18, runsCreated: 0 });
    const again = await Promise.all([
      spawnFixture("open-store.ts", [path]).done,
      spawnFixture("open-store.ts", [path]).done,
    ]);
    for (const r of again) expect(listed(r)).toEqual(order);
    expect(state(path)).toEqual(after);
  });
});

describe("sqliteStore's mustExist while other processes create the store", () => {
  it("readers refuse (no file yet, no cairn tables yet) or list; the creators all open it", async () => {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    const path = `${db.path.slice(0, -"cairn.db".length)}not-yet/cairn.db`;
    const procs = [];
    for (let i = 0; i < 3; i++) {
      procs.push(spawnFixture("open-store.ts", [path]).done);
      procs.push(spawnFixture("open-store.ts", [path, "must"]).done);
    }
    const results = await Promise.all(procs);
    for (const [i, r] of results.entries()) {
      expect(r.stderr).toBe("");
      if (i % 2 === 0) {
        expect(listed(r)).toEqual([]);
        continue;
      }
      if (r.code === 0) {
        expect(listed(r)).toEqual([]);
        continue;
      }
      expect(r.code).toBe(3);
      const { refused, message } = JSON.parse(r.stdout.trim()) as {
        refused: string;
        message: string;
      };
      expect(refused).toBe("StoreError");
      expect(message).toMatch(/the file does not exist|holds no cairn tables/);
    }
    const after = state(path);
    expect(after.version).toBe(MIGRATIONS.at(-1)!.version);
    expect(after.check).toBe("ok");
  });
});
