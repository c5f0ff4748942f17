// A new run's row on SQLite is written by ONE statement (sql.ts, insertNewRow): the insert
// itself checks the epoch floor it binds the run's epochs from (the floor as the
// connection last read it) and, while the plain-payload guard believes the store unmarked,
// that the store is not marked encrypted. A 0-step run cost two statements besides BEGIN and
// COMMIT (the mark read, then the insert with RETURNING its epoch, for which SQLite builds an
// ephemeral table). When the one statement inserts nothing, the slow path says why: the id
// taken, the floor raised by another process's deletions, the store marked by another
// process (then the guard refuses a plain payload, the release's among them).

import { createRequire } from "node:module";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, EncryptionKeyMissingError, sqliteStore, workflow } from "../src/index.js";
import type { NewRun, RunEnd, RunRecord } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { tempDbPath } from "./helpers/sqlite.js";

const require = createRequire(import.meta.url);
const Driver = require("better-sqlite3") as {
  prototype: { prepare(sql: string): Record<string, (...a: unknown[]) => unknown> };
};

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

type SqliteStore = ReturnType<typeof sqliteStore>;

const T0 = 1_700_000_000_000;
const CIPHER = "cairn:enc:1:k1:AAAA";

async function openStore(path?: string): Promise<{ store: SqliteStore; path: string }> {
  let file = path;
  if (file === undefined) {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    file = db.path;
  }
  const store = sqliteStore(file);
  await store.open({ clock: createVirtualClock(T0) });
  cleanups.push(() => store.close());
  return { store, path: file };
}

/** Another process's connection to the file. */
function other(path: string): Database.Database {
  const db = new Database(path);
  cleanups.push(() => {
    db.close();
  });
  return db;
}

function newRun(id: string, more: Partial<NewRun> = {}): NewRun {
  return { id, workflow: "wf", version: "1", input: "null", budgetLimit: {}, ...more };
}
const claimBy = { workerId: "wk_1", leaseMs: 30_000 };
const completed: RunEnd = { status: "completed", output: '"done"', readyAt: null };

describe("a 0-step run's statements on SQLite", () => {
  it("are one: the run's insert, reading the floor and the mark inside itself, with no RETURNING", async () => {
    const counts = new Map<string, number>();
    let counting = false;
    const proto = Driver.prototype;
    const prepare = proto.prepare;
    proto.prepare = function (this: unknown, sql: string) {
      const st = prepare.call(this, sql);
      const text = sql.replace(/\s+/g, " ").trim();
      for (const m of ["run", "get", "all", "iterate"]) {
        const f = st[m]!;
        st[m] = function (this: unknown, ...a: unknown[]) {
          if (counting) counts.set(text, (counts.get(text) ?? 0) + 1);
          return f.apply(this, a);
        };
      }
      return st;
    };
    cleanups.push(() => {
      proto.prepare = prepare;
    });
    const none = workflow({ name: "none", version: "1" }, async (_ctx, n: number) => n + 1);
    const engine = createEngine({ store: sqliteStore(":memory:"), workflows: [none] });
    cleanups.push(() => engine.close());
    for (let i = 0; i < 3; i++) await (await engine.start(none, i)).result();
    counting = true;
    const runs = 5;
    for (let i = 0; i < runs; i++) expect(await (await engine.start(none, i)).result()).toBe(i + 1);
    counting = false;
    // A claim round the engine's worker may make meanwhile is not the runs' own.
    const own = [...counts].filter(([sql]) => !sql.includes("runs_ready_idle"));
    expect(own.map(([sql, n]) => [sql.slice(0, 17), n])).toEqual([["INSERT INTO runs ", runs]]);
    expect(own[0]![0]).not.toMatch(/RETURNING/);
    expect(own[0]![0]).toMatch(/store_marks/);
    expect(own[0]![0]).toMatch(/epoch_floor/);
  });
});

describe("a new run's insert when its one statement inserts nothing", () => {
  it("takes the epoch floor another process raised: every create's epoch is above it, as stored", async () => {
    const { store, path } = await openStore();
    // The connection reads the floor as 0 (a new file).
    expect((await store.createRun(newRun("run_before"))).run.epoch).toBe(0);
    // Another process deleted runs whose epochs went up to 41 (workspace.ts, deleteRunRows).
    other(path).prepare("UPDATE epoch_floor SET epoch = 41").run();
    const made: RunRecord[] = [];
    made.push(
      (await store.createReleasedRun!({ ...newRun("run_folded"), claimBy }, () => completed)).run,
    );
    made.push((await store.createRun(newRun("run_pending"))).run);
    made.push((await store.createRun(newRun("run_claimed", { claimBy }))).run);
    made.push(
      (await store.createReleasedRun!({ ...newRun("run_unreleased"), claimBy }, () => undefined))
        .run,
    );
    expect(made.map((r) => [r.id, r.epoch])).toEqual([
      ["run_folded", 42],
      ["run_pending", 41],
      ["run_claimed", 42],
      ["run_unreleased", 42],
    ]);
    for (const r of made) expect(await store.getRun(r.id)).toEqual(r);
    // And once more: lowered by no one, the floor read holds.
    expect((await store.createRun(newRun("run_after", { claimBy }))).run.epoch).toBe(42);
  });

  it("answers an id already taken with the run stored there, whatever the floor, nothing changed", async () => {
    const { store, path } = await openStore();
    const first = (await store.createReleasedRun!({ ...newRun("run_a"), claimBy }, () => completed))
      .run;
    other(path).prepare("UPDATE epoch_floor SET epoch = 7").run();
    const again = await store.createReleasedRun!(
      { ...newRun("run_a", { input: '"other"' }), claimBy },
      () => ({ status: "failed", readyAt: null, error: { name: "E", message: "m" } }),
    );
    expect(again).toEqual({ run: first, created: false });
    expect(await store.createRun(newRun("run_a"))).toEqual({ run: first, created: false });
    expect(await store.getRun("run_a")).toEqual(first);
  });

  it("refuses plain payloads once another process marked the store, the release's too, nothing written", async () => {
    const { path } = await openStore();
    const cases: Array<[string, (s: SqliteStore) => Promise<unknown>]> = [
      [
        "a plain input, folded",
        (s) => s.createReleasedRun!({ ...newRun("r1"), claimBy }, () => completed),
      ],
      [
        "a plain output, folded",
        (s) =>
          s.createReleasedRun!({ ...newRun("r2", { input: CIPHER }), claimBy }, () => completed),
      ],
      [
        "a plain error, folded",
        (s) =>
          s.createReleasedRun!({ ...newRun("r3", { input: CIPHER }), claimBy }, () => ({
            status: "failed",
            readyAt: null,
            error: { name: "Error", message: "secret" },
          })),
      ],
      ["a plain input, created", (s) => s.createRun(newRun("r4", { claimBy }))],
    ];
    const raw = other(path);
    for (const [what, write] of cases) {
      // Opened unmarked: the store believes so, and its insert reads the mark itself.
      const { store } = await openStore(path);
      raw.prepare("INSERT INTO store_marks (name, marked_at) VALUES ('encrypted', 1)").run();
      await expect(write(store), what).rejects.toBeInstanceOf(EncryptionKeyMissingError);
      raw.prepare("DELETE FROM store_marks").run();
    }
    expect(raw.prepare("SELECT id FROM runs").all()).toEqual([]);
    // Ciphertext throughout is written on the marked store.
    const { store } = await openStore(path);
    raw.prepare("INSERT INTO store_marks (name, marked_at) VALUES ('encrypted', 1)").run();
    const ok = await store.createReleasedRun!(
      { ...newRun("r5", { input: CIPHER }), claimBy },
      () => ({ ...completed, output: CIPHER }),
    );
    expect(ok.created).toBe(true);
    expect(await store.getRun("r5")).toEqual(ok.run);
  });
});
