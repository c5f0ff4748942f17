// PostgreSQL: the encrypted mark's triggers (store/postgres/plain-triggers.ts) attacked.
// - A connection lost mid-install: a backend terminated (pg_terminate_backend, a watchdog
//   killing lock waiters, a failover) while the install waits for a table's lock answers
//   SQLSTATE 57P01 (admin_shutdown), a code the server sends as it goes away. sqlState read it
//   as a refusal, so once the transaction's own retries were spent the mark went in alone: the
//   store marked without its triggers and markEncrypted said nothing. It is thrown now, as
//   every connection error is (connection.ts isConnectionError: 57P01-03, 53300, class 08).

import pg from "pg";
import { describe, expect, it } from "vitest";
import { EncryptionKeyMissingError, StoreError, toErrorRecord } from "../src/errors.js";
import { type Clock, encryptedStore, type Store } from "../src/index.js";
import { postgresStore } from "../src/postgres.js";
import { sqlState } from "../src/store/postgres/sql-state.js";
import type { ErrorRecord, StepRecord } from "../src/store/store.js";
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
  url,
} from "./helpers/marked-schemas.js";
import { newRun, refusal, stepWith } from "./helpers/plain-records.js";

const { admin, markState, nameIn, renameTriggers, storage, triggers, untilLockWait } =
  markedSchemas();

const serverError = (code: string) => {
  const e = new pg.DatabaseError("terminating connection due to administrator command", 0, "error");
  e.code = code;
  return e;
};

describe("sqlState: a connection's end the server announces is no refusal", () => {
  it("57P01-57P03 and 53300, bare or wrapped, give none", () => {
    for (const code of ["57P01", "57P02", "57P03", "53300"]) {
      expect(sqlState(serverError(code))).toBeUndefined();
      expect(sqlState(new StoreError("install", { cause: serverError(code) }))).toBeUndefined();
    }
    expect(sqlState(serverError("42501"))).toBe("42501");
  });
});

/** A pool whose clients, sent a statement matching `when`, have their backend terminated
 *  once it waits for a lock (the install's lock_timeout raised so the wait is certain). */
function killingPool(when: RegExp): { pool: pg.Pool; kills: () => number } {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  let kills = 0;
  pool.on("connect", (client) => {
    const query = client.query.bind(client) as (...a: unknown[]) => Promise<unknown>;
    (client as unknown as { query: unknown }).query = (...args: unknown[]) => {
      const first = args[0];
      const text = typeof first === "string" ? first : (first as { text?: string })?.text;
      if (typeof text === "string" && /SET LOCAL lock_timeout/.test(text)) {
        args[0] = "SET LOCAL lock_timeout = '60s'";
      }
      if (typeof text !== "string" || !when.test(text)) return query(...args);
      const pid = (client as unknown as { processID: number }).processID;
      const running = query(...args);
      void (async () => {
        await untilLockWait("pid = $1 AND NOT granted", pid);
        kills++;
        await admin.query("SELECT pg_terminate_backend($1)", [pid]);
      })();
      return running;
    };
  });
  pool.on("error", () => {});
  return { pool, kills: () => kills };
}

describe.skipIf(!pgUrl)("PostgreSQL: a connection lost while the install waits", () => {
  it("is thrown, and the store is not marked without its triggers", async () => {
    const { schema, make } = storage("triga");
    const clock = createVirtualClock();
    // The schema made by a plain open first.
    await openAndClose(make(), clock);

    // A writer holds steps: the install waits there, and is terminated there, every try.
    const blocker = new pg.Client({ connectionString: url });
    await blocker.connect();
    await blocker.query("BEGIN");
    await blocker.query(`LOCK TABLE "${schema}".steps IN ROW EXCLUSIVE MODE`);
    const { pool, kills } = killingPool(/CREATE TRIGGER \S+ BEFORE .* ON "[^"]+"\.steps/s);
    const store = postgresStore(pool, { schema });
    try {
      await store.open({ clock });
      const err = await store.markEncrypted!().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(kills()).toBeGreaterThan(0);
      expect(err).toBeInstanceOf(StoreError);
      expect(String((err as Error).message)).toMatch(/57P01|terminat/);
      // Neither marked alone nor half installed.
      await blocker.query("ROLLBACK");
      const marked = await admin.query(`SELECT count(*)::int AS n FROM "${schema}".store_marks`);
      expect(marked.rows[0].n).toBe(0);
      expect(await triggers(schema)).toBe(0);
    } finally {
      await blocker.query("ROLLBACK").catch(() => {});
      await blocker.end();
      await store.close();
      await pool.end();
    }
  });
});

// ---- Races: what held (each checks the invariant, no mend behind it) ----

/** Whether `write` went (true) or was refused as plain (false); any other error thrown. */
async function went(write: Promise<unknown>): Promise<boolean> {
  try {
    await write;
    return true;
  } catch (err) {
    if (err instanceof EncryptionKeyMissingError) return false;
    throw err;
  }
}

describe.skipIf(!pgUrl)("PostgreSQL: the mark's triggers under races", () => {
  it("a keyless writer and keyless opens racing a keyed open: no plain write after the mark", async () => {
    const { schema, make } = storage("triga");
    const clock = createVirtualClock();
    // Opened before the mark, its clock frozen: it believes "not marked" for good, so only
    // the triggers stand between it and the marked store.
    const plain = make();
    await plain.open({ clock });
    try {
      for (let round = 0; round < 6; round++) {
        let stop = false;
        const outcomes: Array<{ ok: boolean; afterMark: boolean }> = [];
        let marked = false;
        const writer = (async () => {
          for (let i = 0; !stop; i++) {
            const afterMark = marked;
            const ok = await went(plain.createRun(newRun(`r${round}-${i}`, '"SECRET"')));
            outcomes.push({ ok, afterMark });
          }
        })();
        // Keyless opens, each reading the mark and perhaps syncing the triggers.
        const openers = (async () => {
          while (!stop) {
            await openAndClose(make(), clock);
          }
        })();
        await new Promise((resolve) => setTimeout(resolve, 20 + round * 10));
        const keyed = encryptedStore(make(), { keys: [k1] });
        await keyed.open({ clock });
        marked = true;
        await new Promise((resolve) => setTimeout(resolve, 100));
        stop = true;
        await Promise.all([writer, openers]);
        await keyed.close();
        expect(outcomes.filter((o) => o.afterMark).length).toBeGreaterThan(0);
        // Every plain write begun after the keyed open returned was refused, and none went
        // after the first refusal.
        expect(outcomes.filter((o) => o.afterMark && o.ok)).toEqual([]);
        const first = outcomes.findIndex((o) => !o.ok);
        expect(outcomes.slice(first).filter((o) => o.ok)).toEqual([]);
        const now = await markState(schema);
        expect(now.marked).toBe(true);
        expect(now.names).toHaveLength(8);
        // Unmarked again for the next round (the plain store's removal).
        await plain.unmarkEncrypted!();
        expect(await markState(schema)).toEqual({ marked: false, names: [] });
      }
    } finally {
      await plain.close();
    }
  });

  it("a replace of another build's triggers racing writers: plain refused, keyed written", async () => {
    const { schema, make } = storage("triga");
    const clock = createVirtualClock();
    const plain = make();
    await plain.open({ clock });
    const keyed = encryptedStore(make(), { keys: [k1] });
    await keyed.open({ clock });
    try {
      const ours = await nameIn(schema);
      const { run } = await keyed.createRun(newRun("k", "-1"));
      let keyedWrites = 0;
      let plainTries = 0;
      for (let round = 0; round < 6; round++) {
        // Another build's triggers (another name), beside ours or instead.
        if (round % 2 === 0) await renameTriggers(schema, ours, "cairn_plain_guard_1");
        else {
          for (const table of TABLES) {
            await admin.query(
              `CREATE TRIGGER cairn_plain_guard_1 BEFORE INSERT OR UPDATE ON "${schema}".${table}
                 FOR EACH ROW EXECUTE FUNCTION "${schema}".cairn_plain_${
                   table === "run_streams"
                     ? "streams"
                     : table === "workspace_objects"
                       ? "objects"
                       : table
                 }()`,
            );
          }
        }
        let stop = false;
        const plainWriter = (async () => {
          for (let i = 0; !stop; i++) {
            plainTries++;
            expect(await went(plain.createRun(newRun(`p${round}-${i}`, '"SECRET"')))).toBe(false);
            expect(
              await went(
                plain.appendRecords([
                  { runId: "k", epoch: run.epoch, steps: [stepWith("k", `p${round}-${i}`, '"S"')] },
                ]),
              ),
            ).toBe(false);
          }
        })();
        const keyedWriter = (async () => {
          for (let i = 0; !stop; i++) {
            const out = await keyed.appendRecords([
              { runId: "k", epoch: run.epoch, steps: [stepWith("k", `k${round}-${i}`, '"S"')] },
            ]);
            expect(out).toEqual([{ ok: true }]);
            keyedWrites++;
          }
        })();
        // A keyed open (its mark retries a replace that timed out; a keyless open tries twice:
        // see "an open's change of the triggers under a writer").
        await openAndClose(encryptedStore(make(), { keys: [k1] }), clock);
        stop = true;
        await Promise.all([plainWriter, keyedWriter]);
        expect(await markState(schema)).toEqual({
          marked: true,
          names: eight(ours),
        });
      }
      expect(keyedWrites).toBeGreaterThan(0);
      expect(plainTries).toBeGreaterThan(0);
      const leaked = await admin.query(
        `SELECT count(*)::int AS n FROM "${schema}".steps WHERE result NOT LIKE 'cairn:enc:%'`,
      );
      expect(leaked.rows[0].n).toBe(0);
    } finally {
      await keyed.close();
      await plain.close();
    }
  });

  it("unmark racing mark: marked always comes with this build's eight triggers", async () => {
    const { schema, make } = storage("triga");
    const clock = createVirtualClock();
    const a = make();
    const b = make();
    await a.open({ clock });
    await b.open({ clock });
    try {
      for (let round = 0; round < 12; round++) {
        const delay = (round % 4) * 3;
        await Promise.all([
          a.markEncrypted!(),
          new Promise((resolve) => setTimeout(resolve, delay)).then(() => b.unmarkEncrypted!()),
        ]);
        const now = await markState(schema);
        if (now.marked) expect(now.names).toHaveLength(8);
        // Triggers left on an unmarked store refuse nothing.
        if (!now.marked) {
          expect((await a.createRun(newRun(`u${round}`, '"plain"'))).created).toBe(true);
        }
      }
    } finally {
      await a.close();
      await b.close();
    }
  });

  it("an unmark that cannot lock a table in time removes the mark alone; the next open drops the triggers", async () => {
    const { schema, make } = storage("triga");
    const clock = createVirtualClock();
    await openAndClose(encryptedStore(make(), { keys: [k1] }), clock);
    expect(await triggers(schema)).toBe(8);
    const blocker = new pg.Client({ connectionString: url });
    await blocker.connect();
    const plain = make();
    await plain.open({ clock });
    try {
      await blocker.query("BEGIN");
      await blocker.query(`LOCK TABLE "${schema}".events IN ROW EXCLUSIVE MODE`);
      await plain.unmarkEncrypted!();
      await blocker.query("ROLLBACK");
      expect((await markState(schema)).marked).toBe(false);
      expect(await triggers(schema)).toBe(8);
      // They refuse nothing; the next open drops them.
      expect((await plain.createRun(newRun("p", '"plain"'))).created).toBe(true);
      await openAndClose(make(), clock);
      expect(await triggers(schema)).toBe(0);
    } finally {
      await blocker.query("ROLLBACK").catch(() => {});
      await blocker.end();
      await plain.close();
    }
  });
});

// ---- Hostile inputs through the triggers: what held ----

describe.skipIf(!pgUrl)("PostgreSQL: hostile payloads through the mark's triggers", () => {
  it("escapes, lone surrogates, a forged envelope and huge texts: plain refused (CNPLN), keyed written", async () => {
    const { schema, make } = storage("triga");
    const clock = createVirtualClock();
    const plain = make();
    await plain.open({ clock });
    const keyed = encryptedStore(make(), { keys: [k1] });
    await keyed.open({ clock });
    try {
      expect(await triggers(schema)).toBe(8);
      const { run } = await keyed.createRun(newRun("k", "-1"));
      const step = (key: string, error: ErrorRecord | null, result: string | null): StepRecord => ({
        ...stepWith("k", key, result ?? "-1"),
        outcome: error ? "error" : "ok",
        result,
        error,
      });
      const write = (s: Store, st: StepRecord) =>
        s.appendRecords([{ runId: "k", epoch: run.epoch, steps: [st] }]);
      const hostileNames = [
        "N\u0000",
        "S\ud800",
        "L\udc00x",
        "\\u0000",
        "\\\u0000",
        'q"\\',
        "cairn:enc:1:",
      ];
      let n = 0;
      for (const name of hostileNames) {
        // Kept plain by a keyed store (an error's name): written.
        const e: ErrorRecord = { name, code: "C", message: "secret", stack: "at x" };
        expect(await write(keyed, step(`k${n}`, e, null))).toEqual([{ ok: true }]);
        expect((await keyed.loadJournal("k")).steps.find((s) => s.key === `k${n}`)?.error).toEqual(
          e,
        );
        // A keyless one: refused as plain, by the trigger, whatever the name holds.
        const err = await refusal(write(plain, step(`p${n}`, e, null)));
        expect(err.what).toBe(`the error of step "p${n}" of run "k"`);
        n++;
      }
      // Messages holding the escapes, or a forged envelope as the engine stores it (escaped,
      // errors.ts toErrorRecord), or a string forged after an escape: all plain.
      for (const message of [
        "\u0000cairn:enc:1:x",
        "\ud800",
        toErrorRecord(new Error("cairn:enc:1:k1:SECRET")).message,
        toErrorRecord(new Error("cairn:enc:")).message,
        "cairn:enc:0:",
      ]) {
        const e: ErrorRecord = { name: "E", code: "C", message, stack: "s" };
        const err = await refusal(write(plain, step(`m${n}`, e, null)));
        expect(err.what).toBe(`the error of step "m${n}" of run "k"`);
        n++;
      }
      // Huge: 16 MB of plain text refused, 16 MB encrypted written.
      const big = JSON.stringify("x".repeat(16 * 1024 * 1024));
      const errBig = await refusal(write(plain, step("huge-plain", null, big)));
      expect(errBig.what).toBe('the result of step "huge-plain" of run "k"');
      expect(await write(keyed, step("huge-keyed", null, big))).toEqual([{ ok: true }]);
      // A huge error full of escapes in its (plain) name, keyed: written.
      const bigName = "\u0000\ud800".repeat(256 * 1024);
      const eb: ErrorRecord = { name: bigName, code: "C", message: "m", stack: "s" };
      expect(await write(keyed, step("huge-name", eb, null))).toEqual([{ ok: true }]);
      await refusal(write(plain, step("huge-name-plain", eb, null)));
      // Nothing plain landed.
      const rows = await admin.query(
        `SELECT key FROM "${schema}".steps
          WHERE (result IS NOT NULL AND result <> '-1' AND result NOT LIKE 'cairn:enc:1:%')
             OR (error IS NOT NULL AND error NOT LIKE '%"cairn:enc:1:%')`,
      );
      expect(rows.rows).toEqual([]);
    } finally {
      await keyed.close();
      await plain.close();
    }
  });
});

// ---- The roles the warning names ----
// - The grant the warning advises (GRANT "<owner>" TO "<writer>") let the writer install the
//   triggers, but CREATE FUNCTION made the writer the functions' owner: at the next build's
//   open, the tables' owner (and any other writer granted the owner's rights) could not
//   replace them (CREATE OR REPLACE FUNCTION wants the function's owner, 42501), was told to
//   open the store as the tables' owner, which it was, and the earlier build's functions and
//   triggers stayed. The install now hands the functions to the tables' owner.

describe.skipIf(!pgUrl)("PostgreSQL: the mark's functions belong to the tables' owner", () => {
  const { roles, database, as, create } = testRoles(admin, "triga", ["owner", "writer", "other"]);
  const { owner, writer, other } = roles;

  it("a writer granted the owner's rights installs; the owner, or another such writer, replaces", async () => {
    await create();
    await admin.query(`GRANT CREATE ON DATABASE "${database}" TO ${owner}`);
    await admin.query(`GRANT ${owner} TO ${writer}`);
    await admin.query(`GRANT ${owner} TO ${other}`);
    const { schema, make } = storage("triga");
    const clock = createVirtualClock();
    await openAndClose(make(as(owner)), clock);

    const { warnings, stop } = installWarnings();
    try {
      // The writer, as the warning advised, marks the store and installs the triggers.
      await openAndClose(encryptedStore(make(as(writer)), { keys: [k1] }), clock);
      const ours = await nameIn(schema);
      expect(await triggers(schema)).toBe(8);
      const owners = await admin.query(
        `SELECT DISTINCT pg_get_userbyid(p.proowner) AS o FROM pg_proc p
           JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = $1 AND p.proname LIKE 'cairn%'`,
        [schema],
      );
      expect(owners.rows.map((r) => r.o)).toEqual([owner]);

      // Another build's triggers (as an upgrade finds them): the owner's open replaces them,
      // and so does another writer's.
      for (const [i, role] of [owner, other].entries()) {
        await renameTriggers(schema, ours, `cairn_plain_guard_${i + 1}`);
        await openAndClose(encryptedStore(make(as(role)), { keys: [k1] }), clock, true);
        expect(warnings.map((x) => x.message)).toEqual([]);
        expect(await markState(schema)).toEqual({
          marked: true,
          names: eight(ours),
        });
      }

      // As a writer's install before the mend left them: the functions the writer's own. The
      // owner's open is refused, and told to open the store as the functions' owner (it was
      // told to open it as the tables' owner: itself); that writer's open replaces them, and
      // hands the functions over.
      const fns = await admin.query(
        `SELECT p.oid::regprocedure::text AS f FROM pg_proc p
           JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = $1 AND p.proname LIKE 'cairn%'`,
        [schema],
      );
      for (const { f } of fns.rows) await admin.query(`ALTER FUNCTION ${f} OWNER TO ${writer}`);
      await renameTriggers(schema, ours, "cairn_plain_guard_3");
      await openAndClose(encryptedStore(make(as(owner)), { keys: [k1] }), clock, true);
      expect(warnings).toHaveLength(1);
      expect(warnings[0]!.message).toContain(
        `Open it once as the owner of its triggers' functions, "${writer}"`,
      );
      expect(warnings[0]!.message).toContain(`GRANT "${writer}" TO "${owner}"`);
      await openAndClose(encryptedStore(make(as(writer)), { keys: [k1] }), clock);
      expect((await markState(schema)).names).toEqual(eight(ours));
      await renameTriggers(schema, ours, "cairn_plain_guard_4");
      await openAndClose(encryptedStore(make(as(owner)), { keys: [k1] }), clock, true);
      expect(warnings).toHaveLength(1);
      expect((await markState(schema)).names).toEqual(eight(ours));
    } finally {
      stop();
    }
  });
});

// ---- An open's change of the triggers, under a writer ----
// - An open (keyless, so no mark's retries after it) tried the change once, runs first: a
//   writer holding steps and then writing runs (append_records' order) made it time out
//   whenever one was writing, so an earlier build's triggers (or a removed mark's) stayed;
//   under a steady keyed writer (the race test below, its opener keyless) 12 keyless opens
//   in 12 left them, 0 in 12 with the second try (one sitting, A/B/A). It tries again at once, the
//   table it could not have locked first.

/** Opens a keyless store on `schema` while a writer holds steps, and has the writer write
 *  runs (append_records' order) once the open's change of the triggers holds runs and waits
 *  for steps; returns once the open has. */
async function openUnderWriter(schema: string, make: () => Store, clock: Clock): Promise<void> {
  const writer = new pg.Client({ connectionString: url });
  await writer.connect();
  const plain = make();
  try {
    await writer.query("BEGIN");
    await writer.query(`LOCK TABLE "${schema}".steps IN ROW EXCLUSIVE MODE`);
    const opening = plain.open({ clock });
    // The open's change holds runs and waits for steps: the writer now writes runs.
    await untilLockWait("NOT granted AND relation = $1::regclass", `"${schema}".steps`);
    await writer.query(`UPDATE "${schema}".runs SET updated_at = updated_at WHERE false`);
    await writer.query("COMMIT");
    await opening;
  } finally {
    await writer.query("ROLLBACK").catch(() => {});
    await writer.end();
    await plain.close();
  }
}

describe.skipIf(!pgUrl)("PostgreSQL: an open's change of the triggers under a writer", () => {
  it("a keyless open replaces another build's triggers though a writer holds steps, then writes runs", async () => {
    const { schema, make } = storage("triga");
    const clock = createVirtualClock();
    await openAndClose(encryptedStore(make(), { keys: [k1] }), clock);
    const ours = await nameIn(schema);
    await renameTriggers(schema, ours, "cairn_plain_guard_1");
    await openUnderWriter(schema, make, clock);
    expect(await markState(schema)).toEqual({ marked: true, names: eight(ours) });
  });

  it("so does an open of an unmarked store with a removed mark's triggers: it drops them", async () => {
    const { schema, make } = storage("triga");
    const clock = createVirtualClock();
    await openAndClose(encryptedStore(make(), { keys: [k1] }), clock);
    await admin.query(`DELETE FROM "${schema}".store_marks`);
    await openUnderWriter(schema, make, clock);
    expect(await markState(schema)).toEqual({ marked: false, names: [] });
  });
});
