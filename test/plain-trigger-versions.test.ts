// PostgreSQL: the encrypted mark's triggers (store/postgres/plain-triggers.ts) across builds
// and leftovers.
// - Their name did not change with their body: a store marked by an earlier build kept that
//   build's functions (an error whose name held an escaped NUL refused with 22P05, the mend
//   of it never reaching the store), and an open that found triggers of that name left them.
//   Their name now ends in a digest of what the build installs; an open that finds another
//   name replaces functions and triggers (and removes a trigger an older cairn added beside).
// - A removal of the mark that could not drop them (a lock not had in time: the mark goes
//   alone) left them on an unmarked store, each row written paying a read of the mark: the
//   next open drops them, and so does a later removal, whatever their version.
// - A role that may write the tables but not create triggers tried the install twice per
//   keyed open and said nothing: it tries once and warns, naming the grant that would do.

import { describe, expect, it } from "vitest";
import { encryptedStore, type Store } from "../src/index.js";
import type { ErrorRecord } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { pgUrl } from "./helpers/engines.js";
import {
  eight,
  installWarnings,
  k1,
  markedSchemas,
  openAndClose,
  TABLES,
  testRoles,
} from "./helpers/marked-schemas.js";
import { claimedRun, stepFailed } from "./helpers/plain-records.js";

const { admin, markState, nameIn, renameTriggers, storage, triggers } = markedSchemas();

/** The names of the mark's triggers in `schema`, sorted, one per table and name. */
const names = async (schema: string): Promise<string[]> => (await markState(schema)).names;

/** What a build before the mend of escaped NULs installed as cairn_plain_error (the json
 *  type refuses a NUL's \u escape: 22P05). */
const oldPlainError = (q: string) => `CREATE OR REPLACE FUNCTION ${q}.cairn_plain_error(e text)
  RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $f$
  DECLARE
    part json;
  BEGIN
    IF e IS NULL THEN RETURN false; END IF;
    FOREACH part IN ARRAY ARRAY[(e::json) -> 1, (e::json) -> 3] LOOP
      IF part IS NOT NULL AND json_typeof(part) = 'string'
        AND ${q}.cairn_plain(substr(part::text, 2, length(part::text) - 2)) THEN
        RETURN true;
      END IF;
    END LOOP;
    RETURN false;
  END $f$`;

/** The earlier build's install, as it left a store: its triggers named `name` (beside this
 *  build's `ours`, or instead of them) and its cairn_plain_error. */
async function asEarlierBuild(
  schema: string,
  ours: string,
  name: string,
  beside: boolean,
): Promise<void> {
  const q = `"${schema}"`;
  if (!beside && ours !== name) await renameTriggers(schema, ours, name);
  for (const table of TABLES) {
    if (beside) {
      const fn = (
        await admin.query(
          `SELECT p.proname FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
           WHERE t.tgrelid = $1::regclass AND t.tgname = $2`,
          [`${q}.${table}`, ours],
        )
      ).rows[0]?.proname as string;
      await admin.query(
        `CREATE TRIGGER ${name} BEFORE INSERT OR UPDATE ON ${q}.${table}
          FOR EACH ROW EXECUTE FUNCTION ${q}.${fn}()`,
      );
    }
  }
  await admin.query(oldPlainError(q));
}

const nulError: ErrorRecord = { name: "Fatal\u0000", code: "FATAL", message: "m", stack: "s" };

/** A keyed store writes a step whose error's name (kept plain) holds a NUL: the triggers'
 *  functions read it (the earlier build's refused it, 22P05). */
async function writesNulError(make: () => Store, id: string): Promise<void> {
  const keyed = encryptedStore(make(), { keys: [k1] });
  await keyed.open({ clock: createVirtualClock() });
  try {
    const { run } = await keyed.createRun(claimedRun(id));
    expect(
      await keyed.appendRecords([
        { runId: id, epoch: run.epoch, steps: [stepFailed(id, "s", nulError)] },
      ]),
    ).toEqual([{ ok: true }]);
    expect((await keyed.loadJournal(id)).steps[0]?.error).toEqual(nulError);
  } finally {
    await keyed.close();
  }
}

describe.skipIf(!pgUrl)("PostgreSQL: the mark's triggers of another build, and leftovers", () => {
  it("a store marked by an earlier build gets this build's triggers and functions at open", async () => {
    const { schema, make } = storage("trigv");
    const clock = createVirtualClock();
    await openAndClose(encryptedStore(make(), { keys: [k1] }), clock);
    const ours = await nameIn(schema);
    expect(await names(schema)).toEqual(eight(ours));

    // Marked by the earlier build: its triggers' name, its function. An open replaces them.
    await asEarlierBuild(schema, ours, "cairn_plain_guard_1", false);
    await openAndClose(make(), clock);
    await writesNulError(make, "r1");
    expect(await names(schema)).toEqual(eight(ours));

    // An earlier build opened it after this one: its triggers beside, its function.
    await asEarlierBuild(schema, ours, "cairn_plain_guard_1", true);
    expect(await triggers(schema)).toBe(16);
    await openAndClose(make(), clock);
    expect(await names(schema)).toEqual(eight(ours));
    await writesNulError(make, "r2");
  });

  it("an unmarked store's triggers (a removal that could not drop them) go at the next open or removal", async () => {
    const { schema, make } = storage("trigv");
    const clock = createVirtualClock();
    const plain = make();
    await plain.open({ clock });
    try {
      await openAndClose(encryptedStore(make(), { keys: [k1] }), clock);
      const ours = await nameIn(schema);
      // The mark gone alone, as a removal that could not lock a table in time leaves it.
      await admin.query(`DELETE FROM "${schema}".store_marks`);
      await openAndClose(make(), clock);
      expect(await triggers(schema)).toBe(0);

      // Left by another build's removal: a later removal drops them, whatever their name.
      await openAndClose(encryptedStore(make(), { keys: [k1] }), clock);
      await admin.query(`DELETE FROM "${schema}".store_marks`);
      await renameTriggers(schema, ours, "cairn_plain_guard_0123456789ab");
      expect(await triggers(schema)).toBe(8);
      await plain.unmarkEncrypted?.();
      expect(await triggers(schema)).toBe(0);
    } finally {
      await plain.close();
    }
  });
});

describe.skipIf(!pgUrl)("PostgreSQL: a role that may not create the mark's triggers", () => {
  const { roles, database, as, create } = testRoles(admin, "trigv", ["owner", "writer", "reader"]);
  const { owner, writer, reader } = roles;

  it("tries the install once per keyed open, and says what to grant", async () => {
    await create();
    await admin.query(`GRANT CREATE ON DATABASE "${database}" TO ${owner}`);
    const { schema, make } = storage("trigv");
    const clock = createVirtualClock();
    // The owner migrates the schema; the writer may read and write its tables.
    await openAndClose(make(as(owner)), clock);
    await admin.query(`GRANT USAGE ON SCHEMA "${schema}" TO ${writer}`);
    await admin.query(
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "${schema}" TO ${writer}`,
    );
    await admin.query(`GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA "${schema}" TO ${writer}`);
    await admin.query(`GRANT USAGE ON SCHEMA "${schema}" TO ${reader}`);
    await admin.query(`GRANT SELECT ON ALL TABLES IN SCHEMA "${schema}" TO ${reader}`);
    // Marked by a process that could not create the triggers (the mark alone).
    await admin.query(
      `INSERT INTO "${schema}".store_marks (name, marked_at) VALUES ('encrypted', 1)`,
    );

    const { warnings, stop } = installWarnings();
    try {
      // A role that may only read (a dashboard's) is refused the install too, and not told:
      // it writes no payload.
      await openAndClose(make(as(reader)), clock, true);
      expect(warnings).toHaveLength(0);

      const keyed = encryptedStore(make(as(writer)), { keys: [k1] });
      await keyed.open({ clock });
      await new Promise((resolve) => setImmediate(resolve));
      try {
        expect(await keyed.isMarkedEncrypted?.()).toBe(true);
        expect(await triggers(schema)).toBe(0);
        // One try, one warning: what is refused, why, and the grant that would do.
        expect(warnings).toHaveLength(1);
        const said = warnings[0]!.message;
        expect(said).toContain(`schema "${schema}"`);
        expect(said).toContain(`role "${writer}" may not install the triggers`);
        expect(said).toMatch(/SQLSTATE 42501/);
        expect(said).toContain(`GRANT "${owner}" TO "${writer}"`);
      } finally {
        await keyed.close();
      }

      // The grant it names does: the writer's next open installs them, and says nothing.
      await admin.query(`GRANT ${owner} TO ${writer}`);
      await openAndClose(encryptedStore(make(as(writer)), { keys: [k1] }), clock, true);
      expect(await triggers(schema)).toBe(8);
      expect(warnings).toHaveLength(1);
    } finally {
      stop();
    }
  });
});
