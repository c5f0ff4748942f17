// A read-only command given a mistyped PostgreSQL schema created it: `cairn runs --store
// postgres://... --schema typo_x` made schema typo_x with every cairn table and printed "No
// runs.", where a mistyped SQLite path is refused ("No cairn store at ..."): openStoreSpec
// passed its mustExist to SQLite only. postgresStore takes `mustExist` now, and the CLI's
// client commands and selectStore({ mustExist: true }) refuse a schema without cairn's
// tables, creating nothing. A worker (and selectStore without it) still creates the schema.

import { afterAll, describe, expect, it } from "vitest";
import { StoreError } from "../src/errors.js";
import { realClock, selectStore } from "../src/index.js";
import { cairn, expectFailure } from "./helpers/cli.js";
import { postgresTestUrl, testSchema, withClient } from "./helpers/postgres.js";

const url = await postgresTestUrl();
const drops: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const drop of drops) await drop();
});

async function schemaExists(name: string): Promise<boolean> {
  const { rows } = await withClient(url!, (c) =>
    c.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [name]),
  );
  return rows.length > 0;
}

function freshSchema(): string {
  const { schema, drop } = testSchema(url!, "cairn_typo");
  drops.push(drop);
  return schema;
}

describe.skipIf(!url)("a PostgreSQL schema that holds no cairn store", () => {
  it("cairn runs and cairn show refuse it, name it, and create nothing", async () => {
    const schema = freshSchema();
    for (const args of [["runs"], ["show", "some-run"]]) {
      const r = await cairn([...args, "--store", url!, "--schema", schema]);
      expectFailure(r, 1, /No cairn store in PostgreSQL/);
      expect(r.stderr).toContain(`schema "${schema}"`);
      expect(r.stderr).toMatch(/nothing was created/);
    }
    expect(await schemaExists(schema)).toBe(false);
  });

  it("selectStore({ mustExist: true }) refuses it; without mustExist it is created as before", async () => {
    const schema = freshSchema();
    const strict = await selectStore({ store: url!, schema, mustExist: true, env: {} });
    try {
      const refused = await strict.open({ clock: realClock }).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(refused).toBeInstanceOf(StoreError);
      expect(String(refused)).toMatch(/No cairn store in PostgreSQL/);
      expect(String(refused)).toContain(`schema "${schema}"`);
    } finally {
      await strict.close().catch(() => {});
    }
    expect(await schemaExists(schema)).toBe(false);

    const lenient = await selectStore({ store: url!, schema, env: {} });
    try {
      await lenient.open({ clock: realClock });
      expect(await lenient.listRuns({})).toEqual([]);
    } finally {
      await lenient.close();
    }
    expect(await schemaExists(schema)).toBe(true);
    // Once it holds a store, the strict reader opens it.
    const again = await selectStore({ store: url!, schema, mustExist: true, env: {} });
    try {
      await again.open({ clock: realClock });
      expect(await again.listRuns({})).toEqual([]);
    } finally {
      await again.close();
    }
  });
});
