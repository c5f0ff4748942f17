// selectStore, the CLI's rules made public: the store comes from the `store` option, else
// CAIRN_STORE (sqlite:<path>, a bare path, or a postgres:// URL), else sqlite:.cairn/cairn.db
// under cwd; PostgreSQL's schema from the `schema` option, else CAIRN_PG_SCHEMA, else
// "cairn". A starter that calls it and `cairn` given the same environment use one store;
// a value that cannot be a store is a TypeError naming where it came from.

import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { realClock, type Store, StoreError, selectStore, sqliteStore } from "../src/index.js";
import { cairn } from "./helpers/cli.js";
import { pgUrl } from "./helpers/engines.js";
import { testSchema, withClient } from "./helpers/postgres.js";
import { tempDir } from "./helpers/sqlite.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** `store`, closed after the test. */
function closing(store: Store): Store {
  cleanups.push(() => store.close());
  return store;
}

async function createRunIn(store: Store, id: string): Promise<void> {
  await store.open({ clock: realClock });
  const { created } = await store.createRun({
    id,
    workflow: "picked",
    version: "1",
    input: "[null]",
    budgetLimit: {},
  });
  expect(created).toBe(true);
}

/** The ids `cairn runs --json` lists with `env`: the CLI's own choice of store. */
async function cliRunIds(env: Record<string, string>): Promise<string[]> {
  const res = await cairn(["runs", "--json"], env);
  expect(res.code, res.stderr).toBe(0);
  return (JSON.parse(res.stdout) as Array<{ id: string }>).map((r) => r.id);
}

describe("selectStore: SQLite from CAIRN_STORE", () => {
  it("sqlite:<path> in CAIRN_STORE is that file, the one the CLI reads with the same env", async () => {
    const dir = tempDir("cairn-select-");
    cleanups.push(dir.cleanup);
    const file = join(dir.dir, "chosen.db");
    const env = { CAIRN_STORE: `sqlite:${file}` };
    const store = closing(await selectStore({ env }));
    expect(store.description).toBe(file);
    // Nothing is created until the store is first used.
    expect(existsSync(file)).toBe(false);
    await createRunIn(store, "via-env");
    expect(existsSync(file)).toBe(true);
    const direct = closing(sqliteStore(file));
    await direct.open({ clock: realClock });
    expect((await direct.getRun("via-env"))?.workflow).toBe("picked");
    expect(await cliRunIds(env)).toEqual(["via-env"]);
  });

  it("a bare relative path is relative to cwd; empty CAIRN_STORE is the default file; the option wins", async () => {
    const dir = tempDir("cairn-select-");
    cleanups.push(dir.cleanup);
    const bare = closing(await selectStore({ env: { CAIRN_STORE: "sub/bare.db" }, cwd: dir.dir }));
    expect(bare.description).toBe(join(dir.dir, "sub", "bare.db"));
    await createRunIn(bare, "bare");
    expect(existsSync(join(dir.dir, "sub", "bare.db"))).toBe(true);

    // The CLI treats an empty variable as unset: so does selectStore.
    const fallback = closing(await selectStore({ env: { CAIRN_STORE: "" }, cwd: dir.dir }));
    expect(fallback.description).toBe(join(dir.dir, ".cairn", "cairn.db"));
    await createRunIn(fallback, "default");
    expect(existsSync(join(dir.dir, ".cairn", "cairn.db"))).toBe(true);

    const explicit = closing(
      await selectStore({
        store: "sqlite:explicit.db",
        env: { CAIRN_STORE: "sqlite:ignored.db" },
        cwd: dir.dir,
      }),
    );
    expect(explicit.description).toBe(join(dir.dir, "explicit.db"));
  });

  it("mustExist refuses a SQLite file that is not there, creating nothing", async () => {
    const dir = tempDir("cairn-select-");
    cleanups.push(dir.cleanup);
    const missing = join(dir.dir, "missing.db");
    const err = await selectStore({ env: { CAIRN_STORE: missing }, mustExist: true }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StoreError);
    expect((err as Error).message).toContain(`No cairn store at "${missing}" (SQLite)`);
    expect(existsSync(missing)).toBe(false);
  });
});

describe("selectStore: a value that cannot be a store", () => {
  it("is a TypeError naming CAIRN_STORE (or the store option), as the CLI reports it", async () => {
    const dir = tempDir("cairn-select-");
    cleanups.push(dir.cleanup);
    const unsupported = await selectStore({
      env: { CAIRN_STORE: "mysql://db.example/cairn" },
      cwd: dir.dir,
    }).catch((e: unknown) => e);
    expect(unsupported).toBeInstanceOf(TypeError);
    expect((unsupported as Error).message).toBe(
      'CAIRN_STORE: unsupported store "mysql://..."; use sqlite:<path>, a path, or a postgres:// URL',
    );

    const noPath = await selectStore({ env: { CAIRN_STORE: "sqlite:" }, cwd: dir.dir }).catch(
      (e: unknown) => e,
    );
    expect(noPath).toBeInstanceOf(TypeError);
    expect((noPath as Error).message).toBe(
      'CAIRN_STORE: "sqlite:" needs a path, e.g. sqlite:.cairn/cairn.db',
    );

    // Given as the option, the message names the option instead.
    const option = await selectStore({
      store: "redis://cache/0",
      env: { CAIRN_STORE: `sqlite:${join(dir.dir, "fine.db")}` },
    }).catch((e: unknown) => e);
    expect(option).toBeInstanceOf(TypeError);
    expect((option as Error).message).toMatch(/^store: unsupported store "redis:\/\/\.\.\."/);

    // A schema for a SQLite store is refused rather than ignored.
    const schema = await selectStore({
      store: `sqlite:${join(dir.dir, "fine.db")}`,
      schema: "staging",
    }).catch((e: unknown) => e);
    expect(schema).toBeInstanceOf(TypeError);
    expect((schema as Error).message).toBe(
      "schema applies only to a PostgreSQL store (a postgres:// URL)",
    );
    // Nothing was created by any of them.
    expect(existsSync(join(dir.dir, "fine.db"))).toBe(false);
    expect(existsSync(join(dir.dir, ".cairn"))).toBe(false);

    // The CLI, given the same variable, says the same (a usage error).
    const cli = await cairn(["runs"], { CAIRN_STORE: "mysql://db.example/cairn" });
    expect(cli.code).toBe(2);
    expect(cli.stderr).toContain('cairn: CAIRN_STORE: unsupported store "mysql://..."');
  });
});

describe.skipIf(!pgUrl)("selectStore: PostgreSQL from CAIRN_STORE and CAIRN_PG_SCHEMA", () => {
  const url = pgUrl as string;

  /** The tables of `schema`, read from information_schema on a connection of its own. */
  async function tablesOf(schema: string): Promise<string[]> {
    return withClient(url, async (c) => {
      const res = await c.query<{ table_name: string }>(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = $1",
        [schema],
      );
      return res.rows.map((r) => r.table_name);
    });
  }

  it("a postgres:// URL with CAIRN_PG_SCHEMA writes into that schema, the one the CLI reads", async () => {
    const chosen = testSchema(url, "cairn_select");
    const other = testSchema(url, "cairn_select");
    cleanups.push(chosen.drop, other.drop);
    const env = { CAIRN_STORE: url, CAIRN_PG_SCHEMA: chosen.schema };
    const store = closing(await selectStore({ env }));
    expect(store.description).toMatch(new RegExp(`, schema "${chosen.schema}"$`));
    await createRunIn(store, "in-schema");

    expect(await tablesOf(chosen.schema)).toContain("runs");
    const ids = await withClient(url, (c) =>
      c.query<{ id: string }>(`SELECT id FROM "${chosen.schema}".runs`),
    );
    expect(ids.rows.map((r) => r.id)).toEqual(["in-schema"]);

    // Another schema in the same database holds its own runs: the run is not there.
    const elsewhere = closing(
      await selectStore({ env: { ...env, CAIRN_PG_SCHEMA: other.schema } }),
    );
    await elsewhere.open({ clock: realClock });
    expect(await elsewhere.getRun("in-schema")).toBeUndefined();

    expect(await cliRunIds(env)).toEqual(["in-schema"]);
    expect(await cliRunIds({ ...env, CAIRN_PG_SCHEMA: other.schema })).toEqual([]);
  });

  it('the schema option wins over CAIRN_PG_SCHEMA; postgresql:// works too; unset means "cairn"', async () => {
    const chosen = testSchema(url, "cairn_select");
    const ignored = testSchema(url, "cairn_select");
    cleanups.push(chosen.drop, ignored.drop);
    const postgresql = url.replace(/^postgres:/, "postgresql:");
    const store = closing(
      await selectStore({
        schema: chosen.schema,
        env: { CAIRN_STORE: postgresql, CAIRN_PG_SCHEMA: ignored.schema },
      }),
    );
    await createRunIn(store, "by-option");
    expect(await tablesOf(chosen.schema)).toContain("runs");
    expect(await tablesOf(ignored.schema)).toEqual([]);

    // Not opened: the default schema of the shared test database is left alone.
    const fallback = closing(await selectStore({ env: { CAIRN_STORE: url, CAIRN_PG_SCHEMA: "" } }));
    expect(fallback.description).toMatch(/, schema "cairn"$/);
    const unset = closing(await selectStore({ env: { CAIRN_STORE: url } }));
    expect(unset.description).toMatch(/, schema "cairn"$/);
  });

  it("a schema name PostgreSQL cannot hold is refused before any connection", async () => {
    // Nothing listens on this port: code that connected first would fail with ECONNREFUSED.
    const unreachable = "postgres://postgres@127.0.0.1:1/test";
    const err = await selectStore({
      env: { CAIRN_STORE: unreachable, CAIRN_PG_SCHEMA: "Staging-1" },
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TypeError);
    expect((err as Error).message).toMatch(
      /^CAIRN_PG_SCHEMA: invalid PostgreSQL schema name "Staging-1"; use lowercase letters/,
    );
    const byOption = await selectStore({ store: unreachable, schema: "a b" }).catch(
      (e: unknown) => e,
    );
    expect(byOption).toBeInstanceOf(TypeError);
    expect((byOption as Error).message).toMatch(/^schema: invalid PostgreSQL schema name "a b"/);
  });
});
