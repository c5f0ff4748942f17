// Found attacking SQLite's run path (the one-statement insert reading the encrypted mark
// itself, and sqliteStore's mustExist), each a regression test of a defect it found:
//
// - A store that believed the file marked encrypted (opened while it was) read the mark
//   again before a plain payload, found it removed, and wrote with no check in the write's
//   own transaction: another process that marked the store between that read and the write
//   (each takes the file's lock of its own) had a plain input, step result or event payload
//   written beside its encrypted ones. The write now reads the mark in its transaction then
//   too (plain-payloads.ts, admitInTransaction), as it does while the store is believed
//   unmarked.
// - sqliteStore(path, { mustExist: true }) created the missing directories of a path whose
//   file did not exist before it refused it ("nothing was created"). It refuses first now.
// - A file whose epoch_floor table lost its one row (changed outside cairn): a new run's
//   insert, which now checks the floor in its statement, inserts nothing, and the read of
//   why found no row either: "createRun failed with unknown (Cannot read properties of
//   undefined (reading 'taken'))". It is a StoreError naming the table and the run now,
//   nothing written; an id already taken is still answered with its run.
//
// And what held (the same file, so the next engineer knows what was tried): mustExist on a
// directory, a dangling symlink (its target not created), a symlink to a store (opened), a
// zero-byte file and another application's database (refused, their bytes unchanged), a file
// that is no database (corrupted, unchanged).

import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { EncryptionKeyMissingError, StoreError, sqliteStore } from "../src/index.js";
import type { NewRun, StepRecord } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { tempDir } from "./helpers/sqlite.js";
import { stepOf } from "./helpers/step-records.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const T0 = 1_700_000_000_000;
const PLAIN = '[{"secret":1},0]';
const CIPHER = "cairn:enc:1:k1:AAAA";

type SqliteStore = ReturnType<typeof sqliteStore>;

function dir(): string {
  const d = tempDir();
  cleanups.push(d.cleanup);
  return d.dir;
}

async function openStore(path: string): Promise<SqliteStore> {
  const store = sqliteStore(path);
  await store.open({ clock: createVirtualClock(T0) });
  cleanups.push(() => store.close());
  return store;
}

/** Another process's connection to the file (a raw one: SQLite locks it as it would). */
function other(path: string): Database.Database {
  const db = new Database(path);
  cleanups.push(() => {
    db.close();
  });
  return db;
}

function newRun(id: string, more: Partial<NewRun> = {}): NewRun {
  return { id, workflow: "wf", version: "1", input: CIPHER, budgetLimit: {}, ...more };
}

const step = (runId: string, result: string): StepRecord =>
  stepOf(runId, "s1", 1, {
    name: "s1",
    result,
    startedAt: 1,
    completedAt: 2,
    delivery: 1,
    issuedAfter: 0,
  });

const MARK = "INSERT INTO store_marks (name, marked_at) VALUES ('encrypted', 1)";

describe("a keyless store that believed the file marked, when another process marks it again", () => {
  it("refuses the plain payload it read the mark for, once the mark came back before its write", async () => {
    const path = join(dir(), "cairn.db");
    // Runs to write into, created while the store was unmarked; then the mark.
    const setup = await openStore(path);
    const raw = other(path);
    const { run } = await setup.createRun(
      newRun("run_claimed", { claimBy: { workerId: "wk_1", leaseMs: 600_000 } }),
    );
    await setup.createRun(newRun("run_waits"));
    raw.prepare(MARK).run();

    const writes: Array<[string, (s: SqliteStore) => Promise<unknown>]> = [
      ["a new run's plain input", (s) => s.createRun(newRun("run_plain", { input: PLAIN }))],
      [
        "a folded start's plain output",
        (s) =>
          s.createReleasedRun!(
            { ...newRun("run_folded"), claimBy: { workerId: "wk_1", leaseMs: 30_000 } },
            () => ({ status: "completed", output: PLAIN, readyAt: null }),
          ),
      ],
      [
        "a step's plain result",
        (s) =>
          s.appendRecords([{ runId: "run_claimed", epoch: run.epoch, steps: [step("x", PLAIN)] }]),
      ],
      [
        "an event's plain payload",
        (s) => s.sendEvent({ runId: "run_waits", name: "go", payload: PLAIN }),
      ],
    ];
    for (const [what, write] of writes) {
      // Opened while the file is marked: the store believes it marked.
      const store = await openStore(path);
      // The mark is removed (unmarkEncrypted elsewhere), then set again (an encryptedStore
      // opens the file) after the store read it for this write, before the write itself.
      raw.prepare("DELETE FROM store_marks").run();
      const written = write(store);
      raw.prepare(MARK).run();
      await expect(written, what).rejects.toBeInstanceOf(EncryptionKeyMissingError);
    }
    // Nothing plain was written: no run, no step, no event.
    expect(raw.prepare("SELECT id FROM runs ORDER BY id").all()).toEqual([
      { id: "run_claimed" },
      { id: "run_waits" },
    ]);
    expect(raw.prepare("SELECT count(*) AS n FROM steps").get()).toEqual({ n: 0 });
    expect(raw.prepare("SELECT count(*) AS n FROM events").get()).toEqual({ n: 0 });

    // Where the mark stays removed, the plain write goes through (the mark read again counts).
    const store = await openStore(path);
    raw.prepare("DELETE FROM store_marks").run();
    const { created } = await store.createRun(newRun("run_plain", { input: PLAIN }));
    expect(created).toBe(true);
  });
});

describe("sqliteStore(path, { mustExist: true })", () => {
  it("refuses a file that is not there without creating its directories", async () => {
    const root = dir();
    const path = join(root, "not", "made", "cairn.db");
    const store = sqliteStore(path, { mustExist: true });
    const err = await store.open({ clock: createVirtualClock(T0) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreError);
    expect((err as Error).message).toContain(`No cairn store at "${path}"`);
    expect((err as Error).message).toContain("nothing was created");
    expect(existsSync(join(root, "not"))).toBe(false);
    // Without mustExist the directories and the store are made, as before.
    await openStore(path);
    expect(existsSync(path)).toBe(true);
  });

  it("refuses a directory, a dangling symlink, an empty file, another application's database and a non-database, unchanged", async () => {
    const root = dir();
    const open = (p: string) =>
      sqliteStore(p, { mustExist: true })
        .open({ clock: createVirtualClock(T0) })
        .then(
          () => undefined,
          (e: Error) => e,
        );

    mkdirSync(join(root, "adir"));
    expect((await open(join(root, "adir")))?.message).toContain("is a directory");

    symlinkSync(join(root, "target.db"), join(root, "dangling.db"));
    expect((await open(join(root, "dangling.db")))?.message).toContain("does not exist");
    expect(existsSync(join(root, "target.db"))).toBe(false);

    writeFileSync(join(root, "empty.db"), "");
    expect((await open(join(root, "empty.db")))?.message).toContain("holds no cairn tables");
    expect(readFileSync(join(root, "empty.db")).length).toBe(0);

    const app = new Database(join(root, "app.db"));
    app.exec("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('x')");
    app.close();
    const before = readFileSync(join(root, "app.db"));
    expect((await open(join(root, "app.db")))?.message).toContain("holds no cairn tables");
    expect(readFileSync(join(root, "app.db")).equals(before)).toBe(true);
    expect(existsSync(join(root, "app.db-wal"))).toBe(false);

    const text = "not a database ".repeat(40);
    writeFileSync(join(root, "text.db"), text);
    expect((await open(join(root, "text.db")))?.message).toContain("is corrupted");
    expect(readFileSync(join(root, "text.db"), "utf8")).toBe(text);

    for (const e of await Promise.all(
      ["adir", "dangling.db", "empty.db", "app.db", "text.db"].map((f) => open(join(root, f))),
    )) {
      expect(e).toBeInstanceOf(StoreError);
    }
  });

  it("opens a store through a symlink, and the runs are the store's", async () => {
    const root = dir();
    const real = join(root, "real.db");
    const writer = await openStore(real);
    await writer.createRun(newRun("run_1"));
    symlinkSync(real, join(root, "link.db"));
    const reader = sqliteStore(join(root, "link.db"), { mustExist: true });
    await reader.open({ clock: createVirtualClock(T0) });
    cleanups.push(() => reader.close());
    expect((await reader.listRuns({})).map((r) => r.id)).toEqual(["run_1"]);
  });
});

describe("a SQLite file whose epoch_floor lost its row", () => {
  it("refuses a new run with a StoreError naming the table and the run, nothing written", async () => {
    const path = join(dir(), "cairn.db");
    const store = await openStore(path);
    await store.createRun(newRun("run_1"));
    other(path).prepare("DELETE FROM epoch_floor").run();
    const claimBy = { workerId: "wk_1", leaseMs: 30_000 };
    for (const create of [
      () => store.createRun(newRun("run_2")),
      () => store.createRun(newRun("run_2", { claimBy })),
      () =>
        store.createReleasedRun!({ ...newRun("run_2"), claimBy }, () => ({
          status: "completed",
          output: CIPHER,
          readyAt: null,
        })),
    ]) {
      const err = await create().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StoreError);
      expect((err as Error).message).toContain("epoch_floor table has no row");
      expect((err as Error).message).toContain('run "run_2"');
    }
    expect((await store.listRuns({})).map((r) => r.id)).toEqual(["run_1"]);
    // An id already taken needs no epoch: answered with its run, as always.
    const again = await store.createRun(newRun("run_1"));
    expect(again.created).toBe(false);
    expect(again.run.id).toBe("run_1");
  });
});
