// PostgreSQL: the encrypted mark's triggers (store/postgres/plain-triggers.ts) during a rolling
// deploy. Their name held a digest of what the build installs, which cannot tell which of two
// builds is newer: two builds running at once replaced each other's triggers at every open
// (a transaction locking all eight payload tables, each time). The name now holds a
// generation too: the newer one's triggers win, an older build's open leaves them in place
// while their guard lets its writers pass, and the same generation with another digest is a
// defect said in words. Two builds are played here by the store's internal `guardBuild`.

import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { type EncryptionKey, encryptedStore, type Store } from "../src/index.js";
import {
  builtBy,
  GUARD_GENERATION,
  type GuardBuild,
  guardName,
  THIS_BUILD,
} from "../src/store/postgres/plain-triggers.js";
import {
  type InternalPostgresStoreOptions,
  postgresStore,
} from "../src/store/postgres/postgres-store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { postgresTestUrl } from "./helpers/postgres.js";

const url = await postgresTestUrl();
const key: EncryptionKey = { id: "k1", key: randomBytes(32).toString("base64") };

const older: GuardBuild = { generation: 1, writersFrom: 0, digest: "aaaaaaaaaaaa" };
const newer: GuardBuild = { generation: 2, writersFrom: 1, digest: "bbbbbbbbbbbb" };
/** Generation 2 with other rules: a build from changed sources that kept the generation. */
const twin: GuardBuild = { generation: 2, writersFrom: 1, digest: "cccccccccccc" };
/** A guard that refuses what writers before generation 3 write. */
const strict: GuardBuild = { generation: 3, writersFrom: 3, digest: "dddddddddddd" };

describe("the triggers' names", () => {
  it("pin what each generation installs: a change to it raises GUARD_GENERATION", () => {
    // What generation 1 installs. Changed functions() or GUARDED change the digest: raise
    // GUARD_GENERATION and add the new one here (an older build then leaves the newer
    // build's triggers in place; with the same generation each replaces the other's).
    const digests: Record<number, string> = { 1: "6769547f39d3" };
    expect(THIS_BUILD.generation).toBe(GUARD_GENERATION);
    expect(THIS_BUILD.digest).toBe(digests[GUARD_GENERATION]);
  });

  it("tell their build, generation 0 before generations", () => {
    expect(builtBy(guardName(newer))).toEqual(newer);
    expect(builtBy("cairn_plain_guard_0123456789ab")).toEqual({
      generation: 0,
      writersFrom: 0,
      digest: "0123456789ab",
    });
    expect(builtBy("cairn_plain_guard_1")).toEqual({
      generation: 0,
      writersFrom: 0,
      digest: undefined,
    });
  });
});

describe.skipIf(!url)("PostgreSQL: two builds' triggers in one store", () => {
  const admin = new pg.Pool({ connectionString: url, max: 1 });
  const schemas: string[] = [];
  let schema = "";
  const warnings: Error[] = [];
  const onWarning = (w: Error) => {
    if ((w as { code?: string }).code === "CAIRN_PLAIN_TRIGGERS_GENERATION") warnings.push(w);
  };
  beforeEach(() => {
    schema = `trigg_${randomBytes(4).toString("hex")}`;
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

  const storeOf = (build: GuardBuild | undefined): Store =>
    postgresStore(url!, { schema, guardBuild: build } as InternalPostgresStoreOptions);

  /** Opens and closes a store of `build`: keyed (it marks the store) or keyless. */
  async function openAs(build: GuardBuild | undefined, keyed = false): Promise<void> {
    const plain = storeOf(build);
    const store = keyed ? encryptedStore(plain, { keys: [key] }) : plain;
    await store.open({ clock: createVirtualClock() });
    await new Promise((resolve) => setImmediate(resolve)); // a warning's event
    await store.close();
  }

  /** The mark's triggers: each table's name and the trigger's oid (a new oid: replaced). */
  async function installed(): Promise<Array<{ table: string; name: string; oid: number }>> {
    const r = await admin.query(
      `SELECT c.relname AS table, t.tgname AS name, t.oid::int AS oid FROM pg_trigger t
         JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND t.tgname LIKE 'cairn_plain_guard%' ORDER BY 1, 2`,
      [schema],
    );
    return r.rows;
  }

  async function namesNow(): Promise<string[]> {
    return [...new Set((await installed()).map((t) => t.name))];
  }

  it("the newer generation's triggers win; an older build's opens leave them in place", async () => {
    await openAs(older, true);
    expect(await namesNow()).toEqual([guardName(older)]);
    expect(await installed()).toHaveLength(8);

    // The newer build opens (keyless, as a worker of the new version would): its own.
    await openAs(newer);
    expect(await namesNow()).toEqual([guardName(newer)]);
    const placed = await installed();
    expect(placed).toHaveLength(8);

    // The older build opens again, keyless and keyed: nothing replaced (the same oids).
    await openAs(older);
    await openAs(older, true);
    expect(await installed()).toEqual(placed);
    expect(warnings).toEqual([]);

    // Its writers pass the newer guard: a keyed write of the older build lands, and a plain
    // one of a keyless store is still refused in the database.
    const keyed = encryptedStore(storeOf(older), { keys: [key] });
    await keyed.open({ clock: createVirtualClock() });
    try {
      const made = await keyed.createRun({
        id: "run_older",
        workflow: "wf",
        version: "1",
        input: JSON.stringify({ secret: 1 }),
        budgetLimit: {},
      });
      expect(made.created).toBe(true);
    } finally {
      await keyed.close();
    }
    await expect(
      admin.query(
        `INSERT INTO "${schema}".runs (id, workflow, version, status, input, created_at, updated_at)
          VALUES ('run_plain', 'wf', '1', 'pending', '{"secret":1}', 1, 1)`,
      ),
    ).rejects.toMatchObject({ code: "CNPLN" });
    expect(await installed()).toEqual(placed);
  });

  it("an older build replaces the triggers of a newer one whose guard refuses its writers, and says so", async () => {
    await openAs(strict, true);
    expect(await namesNow()).toEqual([guardName(strict)]);
    await openAs(older);
    expect(await namesNow()).toEqual([guardName(older)]);
    expect(warnings).toHaveLength(1);
    const said = warnings[0]!.message;
    expect(said).toContain(`schema "${schema}"`);
    expect(said).toContain(guardName(strict));
    expect(said).toContain("refuses writes of this build's generation 1");
    expect(said).toContain("Finish the deploy");
  });

  it("the same generation with other rules is a defect, said naming both", async () => {
    await openAs(newer, true);
    await openAs(twin);
    expect(await namesNow()).toEqual([guardName(twin)]);
    expect(warnings).toHaveLength(1);
    const said = warnings[0]!.message;
    expect(said).toContain(guardName(newer));
    expect(said).toContain(guardName(twin));
    expect(said).toContain("of this build's generation 2 but not its rules");
    expect(said).toContain("GUARD_GENERATION");
  });

  it("this build keeps the triggers of its own rules under a name from before generations", async () => {
    await openAs(undefined, true);
    expect(await namesNow()).toEqual([guardName(THIS_BUILD)]);
    // As a cairn before generations (the same rules, the same digest) names them.
    const q = `"${schema}"`;
    for (const { table } of await installed()) {
      await admin.query(
        `ALTER TRIGGER ${guardName(THIS_BUILD)} ON ${q}.${table} RENAME TO cairn_plain_guard_${THIS_BUILD.digest}`,
      );
    }
    const before = await installed();
    await openAs(undefined);
    await openAs(undefined, true);
    expect(await installed()).toEqual(before);
    // Another digest from before generations (older rules) is replaced.
    for (const { table } of before) {
      await admin.query(
        `ALTER TRIGGER cairn_plain_guard_${THIS_BUILD.digest} ON ${q}.${table} RENAME TO cairn_plain_guard_0123456789ab`,
      );
    }
    await openAs(undefined);
    expect(await namesNow()).toEqual([guardName(THIS_BUILD)]);
    expect(await installed()).toHaveLength(8);
    expect(warnings).toEqual([]);
  });
});
