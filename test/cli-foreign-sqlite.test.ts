// A read-only command pointed at a SQLite file that is not a cairn store (another
// application's database, or an empty file a typo made) did not refuse it: `cairn runs`
// migrated it, writing about twenty cairn tables into that application's database, and
// answered "No runs." as if it were an empty cairn store. PostgreSQL's mustExist refused a
// schema holding no cairn tables; SQLite's checked only that the file existed. Now
// `sqliteStore(path, { mustExist: true })` (which the CLI's commands but `worker` use) refuses
// a file holding no cairn tables, and writes nothing to it.

import { writeFileSync } from "node:fs";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { sqliteStore } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { tempDbPath } from "./helpers/sqlite.js";

function tables(path: string): string[] {
  const db = new Database(path, { readonly: true });
  try {
    return (
      db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as {
        name: string;
      }[]
    ).map((r) => r.name);
  } finally {
    db.close();
  }
}

describe("cairn runs on a SQLite file that is not a cairn store", () => {
  const db = tempDbPath();
  const empty = tempDbPath();
  const missing = tempDbPath();
  afterAll(() => {
    db.cleanup();
    empty.cleanup();
    missing.cleanup();
  });

  it("refuses another application's database and writes nothing into it", async () => {
    const other = new Database(db.path);
    other.exec("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)");
    other.close();

    const listed = await cairn(["runs", "--store", `sqlite:${db.path}`]);
    expect(tables(db.path)).toEqual(["users"]);
    expect(listed.code).toBe(1);
    expect(listed.stderr).toContain(`No cairn store in SQLite file "${db.path}"`);
    expect(listed.stderr).toContain("nothing was written to the file");
  });

  it("refuses an empty file, and the library's mustExist does alike; a worker's store is created", async () => {
    writeFileSync(empty.path, "");
    const listed = await cairn(["runs", "--store", `sqlite:${empty.path}`]);
    expect(listed.code).toBe(1);
    expect(tables(empty.path)).toEqual([]);

    const strict = sqliteStore(empty.path, { mustExist: true });
    await expect(strict.open({ clock: { now: () => Date.now() } } as never)).rejects.toThrow(
      /No cairn store in SQLite file .*holds no cairn tables/,
    );
    const absent = sqliteStore(missing.path, { mustExist: true });
    await expect(absent.open({ clock: { now: () => Date.now() } } as never)).rejects.toThrow(
      /the file does not exist/,
    );
    // Without mustExist the store is created, as a worker creates it.
    const created = sqliteStore(empty.path);
    await created.open({ clock: { now: () => Date.now() } } as never);
    await created.close();
    expect(tables(empty.path)).toContain("runs");
    // Now a cairn store: a strict open takes it.
    const again = sqliteStore(empty.path, { mustExist: true });
    await again.open({ clock: { now: () => Date.now() } } as never);
    expect(await again.listRuns({ limit: 1 })).toEqual([]);
    await again.close();
  });
});
