// PostgreSQL: the plain-payload triggers named by generation (plain-triggers.ts guardWinner),
// attacked: three builds opening in rotation and all at once, a store marked by a newer
// build and unmarked by an older one, an old cairn's triggers left on an unmarked store, and
// the longest names a build can have (PostgreSQL cuts identifiers at 63 bytes: a cut name
// would never be found again, and every open would install the triggers anew). Builds are
// played by the store's internal `guardBuild`.

import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { type EncryptionKey, encryptedStore, type Store } from "../src/index.js";
import { type GuardBuild, guardName } from "../src/store/postgres/plain-triggers.js";
import {
  type InternalPostgresStoreOptions,
  postgresStore,
} from "../src/store/postgres/postgres-store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { postgresTestUrl } from "./helpers/postgres.js";

const url = await postgresTestUrl();
const key: EncryptionKey = { id: "k1", key: randomBytes(32).toString("base64") };

const g1: GuardBuild = { generation: 1, writersFrom: 0, digest: "111111111111" };
const g2: GuardBuild = { generation: 2, writersFrom: 0, digest: "222222222222" };
const g3: GuardBuild = { generation: 3, writersFrom: 1, digest: "333333333333" };
/** The longest name a build can have (NAMED in plain-triggers.ts: nine digits each). */
const longest: GuardBuild = {
  generation: 999_999_999,
  writersFrom: 999_999_999,
  digest: "ffffffffffff",
};

describe("the triggers' names", () => {
  it("fit PostgreSQL's 63-byte identifiers, the longest too", () => {
    expect(Buffer.byteLength(guardName(longest))).toBeLessThanOrEqual(63);
  });
});

describe.skipIf(!url)("PostgreSQL: builds of three generations on one store", () => {
  const admin = new pg.Pool({ connectionString: url, max: 2 });
  const schemas: string[] = [];
  let schema = "";
  const warnings: Error[] = [];
  const onWarning = (w: Error) => {
    if ((w as { code?: string }).code?.startsWith("CAIRN_PLAIN_TRIGGERS")) warnings.push(w);
  };
  beforeEach(() => {
    schema = `h13trg_${randomBytes(4).toString("hex")}`;
    schemas.push(schema);
    warnings.length = 0;
    process.on("warning", onWarning);
  });
  afterEach(() => {
    process.off("warning", onWarning);
  });
  afterAll(async () => {
    for (const s of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    await admin.end();
  });

  const storeOf = (build: GuardBuild | undefined, keyed = false): Store => {
    const plain = postgresStore(url!, {
      schema,
      guardBuild: build,
    } as InternalPostgresStoreOptions);
    return keyed ? encryptedStore(plain, { keys: [key] }) : plain;
  };

  async function openAs(build: GuardBuild | undefined, keyed = false): Promise<void> {
    const store = storeOf(build, keyed);
    await store.open({ clock: createVirtualClock() });
    await new Promise((resolve) => setImmediate(resolve));
    await store.close();
  }

  async function installed(): Promise<Array<{ table: string; name: string; oid: number }>> {
    const r = await admin.query(
      `SELECT c.relname AS table, t.tgname AS name, t.oid::int AS oid FROM pg_trigger t
         JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND t.tgname LIKE 'cairn_plain_guard%' ORDER BY 1, 2`,
      [schema],
    );
    return r.rows;
  }
  const namesNow = async () => [...new Set((await installed()).map((t) => t.name))];

  /** A plain input written straight to the table: refused iff some trigger is in place. */
  async function plainInsert(id: string): Promise<string | undefined> {
    try {
      await admin.query(
        `INSERT INTO "${schema}".runs (id, workflow, version, status, input, created_at, updated_at)
          VALUES ($1, 'wf', '1', 'pending', '{"secret":1}', 1, 1)`,
        [id],
      );
      return undefined;
    } catch (err) {
      return (err as { code?: string }).code;
    }
  }

  it("opening in rotation: the newest wins once, then nobody replaces anything", async () => {
    await openAs(g1, true);
    expect(await namesNow()).toEqual([guardName(g1)]);
    await openAs(g2);
    await openAs(g3);
    const placed = await installed();
    expect(placed.map((t) => t.name)).toEqual(new Array(8).fill(guardName(g3)));
    for (let round = 0; round < 2; round++) {
      for (const b of [g1, g2, g3]) {
        await openAs(b);
        await openAs(b, true);
      }
    }
    expect(await installed()).toEqual(placed);
    expect(warnings).toEqual([]);
    expect(await plainInsert("run_plain")).toBe("CNPLN");
  });

  it("three builds opening at once, over an old cairn's triggers: the newest holds all eight", async () => {
    await openAs(g1, true);
    // As a cairn before generations left them.
    for (const { table } of await installed()) {
      await admin.query(
        `ALTER TRIGGER ${guardName(g1)} ON "${schema}".${table} RENAME TO cairn_plain_guard_1`,
      );
    }
    const stores = [g2, g1, g3, g2, g1, g3].map((b, i) => storeOf(b, i % 2 === 0));
    await Promise.all(stores.map((s) => s.open({ clock: createVirtualClock() })));
    // An open that could not lock in time leaves what it found to the next: open each once more.
    await Promise.all(stores.map((s) => s.close()));
    for (const b of [g1, g2, g3]) await openAs(b);
    expect(await installed()).toEqual(
      (await installed()).map((t) => ({ ...t, name: guardName(g3) })),
    );
    expect(await installed()).toHaveLength(8);
    expect(await plainInsert("run_plain")).toBe("CNPLN");
  });

  it("marked by a newer build, unmarked by an older one: no trigger is left, plain text passes", async () => {
    await openAs(g3, true);
    expect(await namesNow()).toEqual([guardName(g3)]);
    const older = storeOf(g1);
    await older.open({ clock: createVirtualClock() });
    await older.unmarkEncrypted?.();
    await older.close();
    expect(await installed()).toEqual([]);
    expect(await plainInsert("run_plain")).toBeUndefined();
    // The older build marks it again: its own triggers (and functions) in place, refusing.
    await openAs(g1, true);
    expect(await namesNow()).toEqual([guardName(g1)]);
    expect(await plainInsert("run_plain_2")).toBe("CNPLN");
  });

  it("an old cairn's triggers left on an unmarked store are dropped by the next open", async () => {
    await openAs(g2, true);
    for (const { table } of await installed()) {
      await admin.query(
        `ALTER TRIGGER ${guardName(g2)} ON "${schema}".${table} RENAME TO cairn_plain_guard_0123456789ab`,
      );
    }
    // The mark removed alone (as a removal that could not lock a table in time leaves it).
    await admin.query(`DELETE FROM "${schema}".store_marks WHERE name = 'encrypted'`);
    expect(await installed()).toHaveLength(8);
    expect(await plainInsert("run_passes")).toBeUndefined(); // they read the mark first
    await openAs(g1);
    expect(await installed()).toEqual([]);
  });

  it("the longest name is installed whole, found again, and left by the next open", async () => {
    await openAs(longest, true);
    expect(await namesNow()).toEqual([guardName(longest)]);
    const placed = await installed();
    await openAs(longest);
    await openAs(longest, true);
    expect(await installed()).toEqual(placed);
    expect(warnings).toEqual([]);
  });
});
