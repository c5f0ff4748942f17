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

import { randomBytes } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { encryptedStore, type Store } from "../src/index.js";
import { postgresStore } from "../src/postgres.js";
import type { ErrorRecord, NewRun, StepRecord } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { pgUrl } from "./helpers/engines.js";
import { k1, markedSchemas, url } from "./helpers/marked-schemas.js";

const { admin, track, triggers } = markedSchemas();

const TABLES = [
  "runs",
  "steps",
  "attempts",
  "intents",
  "events",
  "run_streams",
  "workspace_objects",
  "approvals",
];

function storage() {
  const schema = `trigv_${randomBytes(4).toString("hex")}`;
  track(schema);
  return { schema, make: (u = url): Store => postgresStore(u, { schema }) };
}

/** The names of the mark's triggers in `schema`, sorted, one per table and name. */
async function names(schema: string): Promise<string[]> {
  const r = await admin.query(
    `SELECT c.relname || ':' || t.tgname AS n FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
       JOIN pg_namespace s ON s.oid = c.relnamespace
     WHERE s.nspname = $1 AND t.tgname LIKE 'cairn_plain_guard%' ORDER BY 1`,
    [schema],
  );
  return r.rows.map((row) => row.n as string);
}

/** The one name of the mark's triggers in `schema` (this build's, just installed). */
async function nameIn(schema: string): Promise<string> {
  const all = new Set((await names(schema)).map((n) => n.slice(n.indexOf(":") + 1)));
  expect(all.size).toBe(1);
  return [...all][0]!;
}

const eight = (name: string) => TABLES.map((t) => `${t}:${name}`).sort();

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
    } else if (ours !== name) {
      await admin.query(`ALTER TRIGGER ${ours} ON ${q}.${table} RENAME TO ${name}`);
    }
  }
  await admin.query(oldPlainError(q));
}

const newRun = (id: string): NewRun => ({
  id,
  workflow: "wf",
  version: "1",
  input: "-1",
  budgetLimit: {},
  claimBy: { workerId: "w", leaseMs: 600_000 },
});

const nulError: ErrorRecord = { name: "Fatal\u0000", code: "FATAL", message: "m", stack: "s" };

const failedStep = (runId: string, key: string): StepRecord => ({
  runId,
  key,
  generation: 0,
  seq: 1,
  name: key,
  kind: "step",
  outcome: "error",
  result: null,
  error: nulError,
  spend: {},
  startedAt: 1,
  completedAt: 2,
  attempt: 1,
  delivery: 1,
  issuedAfter: 0,
  issuedLate: false,
});

/** A keyed store writes a step whose error's name (kept plain) holds a NUL: the triggers'
 *  functions read it (the earlier build's refused it, 22P05). */
async function writesNulError(make: () => Store, id: string): Promise<void> {
  const keyed = encryptedStore(make(), { keys: [k1] });
  await keyed.open({ clock: createVirtualClock() });
  try {
    const { run } = await keyed.createRun(newRun(id));
    expect(
      await keyed.appendRecords([{ runId: id, epoch: run.epoch, steps: [failedStep(id, "s")] }]),
    ).toEqual([{ ok: true }]);
    expect((await keyed.loadJournal(id)).steps[0]?.error).toEqual(nulError);
  } finally {
    await keyed.close();
  }
}

describe.skipIf(!pgUrl)("PostgreSQL: the mark's triggers of another build, and leftovers", () => {
  it("a store marked by an earlier build gets this build's triggers and functions at open", async () => {
    const { schema, make } = storage();
    const clock = createVirtualClock();
    const keyed = encryptedStore(make(), { keys: [k1] });
    await keyed.open({ clock });
    await keyed.close();
    const ours = await nameIn(schema);
    expect(await names(schema)).toEqual(eight(ours));

    // Marked by the earlier build: its triggers' name, its function. An open replaces them.
    await asEarlierBuild(schema, ours, "cairn_plain_guard_1", false);
    const plain = make();
    await plain.open({ clock });
    await plain.close();
    await writesNulError(make, "r1");
    expect(await names(schema)).toEqual(eight(ours));

    // An earlier build opened it after this one: its triggers beside, its function.
    await asEarlierBuild(schema, ours, "cairn_plain_guard_1", true);
    expect(await triggers(schema)).toBe(16);
    const again = make();
    await again.open({ clock });
    await again.close();
    expect(await names(schema)).toEqual(eight(ours));
    await writesNulError(make, "r2");
  });

  it("an unmarked store's triggers (a removal that could not drop them) go at the next open or removal", async () => {
    const { schema, make } = storage();
    const clock = createVirtualClock();
    const plain = make();
    await plain.open({ clock });
    try {
      const keyed = encryptedStore(make(), { keys: [k1] });
      await keyed.open({ clock });
      await keyed.close();
      const ours = await nameIn(schema);
      // The mark gone alone, as a removal that could not lock a table in time leaves it.
      await admin.query(`DELETE FROM "${schema}".store_marks`);
      const next = make();
      await next.open({ clock });
      await next.close();
      expect(await triggers(schema)).toBe(0);

      // Left by another build's removal: a later removal drops them, whatever their name.
      const keyed2 = encryptedStore(make(), { keys: [k1] });
      await keyed2.open({ clock });
      await keyed2.close();
      await admin.query(`DELETE FROM "${schema}".store_marks`);
      for (const table of TABLES) {
        await admin.query(
          `ALTER TRIGGER ${ours} ON "${schema}".${table} RENAME TO cairn_plain_guard_0123456789ab`,
        );
      }
      expect(await triggers(schema)).toBe(8);
      await plain.unmarkEncrypted?.();
      expect(await triggers(schema)).toBe(0);
    } finally {
      await plain.close();
    }
  });
});

describe.skipIf(!pgUrl)("PostgreSQL: a role that may not create the mark's triggers", () => {
  const tag = randomBytes(4).toString("hex");
  const owner = `trigv_owner_${tag}`;
  const writer = `trigv_writer_${tag}`;
  const reader = `trigv_reader_${tag}`;
  const database = new URL(url).pathname.slice(1);
  const as = (role: string) => {
    const u = new URL(url);
    u.username = role;
    u.password = "";
    return u.toString();
  };
  afterAll(async () => {
    for (const role of [reader, writer, owner]) {
      await admin.query(`DROP OWNED BY ${role} CASCADE`).catch(() => {});
      await admin.query(`REVOKE ALL ON DATABASE "${database}" FROM ${role}`).catch(() => {});
      await admin.query(`DROP ROLE IF EXISTS ${role}`);
    }
  });

  it("tries the install once per keyed open, and says what to grant", async () => {
    await admin.query(`CREATE ROLE ${owner} LOGIN`);
    await admin.query(`CREATE ROLE ${writer} LOGIN`);
    await admin.query(`CREATE ROLE ${reader} LOGIN`);
    await admin.query(`GRANT CREATE ON DATABASE "${database}" TO ${owner}`);
    const { schema, make } = storage();
    const clock = createVirtualClock();
    // The owner migrates the schema; the writer may read and write its tables.
    const first = make(as(owner));
    await first.open({ clock });
    await first.close();
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

    const warnings: Error[] = [];
    const onWarning = (w: Error) => {
      if ((w as { code?: string }).code === "CAIRN_PLAIN_TRIGGERS_REFUSED") warnings.push(w);
    };
    process.on("warning", onWarning);
    try {
      // A role that may only read (a dashboard's) is refused the install too, and not told:
      // it writes no payload.
      const looker = make(as(reader));
      await looker.open({ clock });
      await new Promise((resolve) => setImmediate(resolve));
      await looker.close();
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
      const granted = encryptedStore(make(as(writer)), { keys: [k1] });
      await granted.open({ clock });
      await new Promise((resolve) => setImmediate(resolve));
      await granted.close();
      expect(await triggers(schema)).toBe(8);
      expect(warnings).toHaveLength(1);
    } finally {
      process.off("warning", onWarning);
    }
  });
});
