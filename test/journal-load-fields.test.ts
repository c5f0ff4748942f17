// Issue 13 (resume of 1,000 steps within 2x reading its rows raw): loadJournal on PostgreSQL
// reads each step as few fields as replay needs. The driver makes a string of every non-NULL
// field of a row, and the journal keeps them all alive until its records are built, so the
// fields a step row holds are most of the CPU time of reading it. The whole-number columns
// (attempt, the two times, delivery, issued_after, issued_late, reconciled) come as one text
// (rows.ts STEP_NUMBERS_SQL), an empty spend as NULL, and no column tells a step's row from
// the parts row. Counted here: the fields of the statement's rows and the strings the driver
// makes per step. And the record made of that text is toStep's of the row, field for field,
// for the numbers a row can hold: NULLs, negatives, times past 2^53, both flags either way.

import pg from "pg";
import { describe, expect, it } from "vitest";
import { realClock } from "../src/lib/clock.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";
import { type StepRow, toStep } from "../src/store/postgres/rows.js";
import { pgUrl } from "./helpers/engines.js";
import { reusableSchema } from "./helpers/postgres-reuse.js";

type Described = { name?: string; fields?: number; strings?: number; rows?: number };

/** Counts, for each query the driver runs while `fn` runs, the fields its rows hold and the
 *  non-NULL fields (each a string the driver makes) of all its rows. */
async function counted<T>(fn: () => Promise<T>): Promise<{ out: T; queries: Described[] }> {
  const proto = (pg as unknown as { Query: { prototype: Record<string, unknown> } }).Query
    .prototype;
  const describe0 = proto.handleRowDescription as (this: unknown, msg: unknown) => void;
  const dataRow0 = proto.handleDataRow as (this: unknown, msg: unknown) => void;
  const queries: Described[] = [];
  const seen = new WeakMap<object, Described>();
  const of = (q: object): Described => {
    let d = seen.get(q);
    if (!d) {
      d = { name: (q as { name?: string }).name, fields: 0, strings: 0, rows: 0 };
      seen.set(q, d);
      queries.push(d);
    }
    return d;
  };
  proto.handleRowDescription = function (this: object, msg: { fields: unknown[] }) {
    of(this).fields = msg.fields.length;
    return describe0.call(this, msg);
  };
  proto.handleDataRow = function (this: object, msg: { fields: Array<string | null> }) {
    const d = of(this);
    d.rows! += 1;
    d.strings! += msg.fields.filter((f) => f !== null).length;
    return dataRow0.call(this, msg);
  };
  try {
    return { out: await fn(), queries };
  } finally {
    proto.handleRowDescription = describe0;
    proto.handleDataRow = dataRow0;
  }
}

const COLUMNS =
  "run_id, key, generation, seq, name, kind, outcome, result, error, spend, attempt, " +
  "started_at, completed_at, delivery, issued_after, issued_late, reconciled";

describe.skipIf(!pgUrl)("PostgreSQL loadJournal: the fields of a step row", () => {
  it("reads a plain step as 8 strings in rows of 13 fields (was 15 in rows of 20)", async () => {
    const reused = reusableSchema(pgUrl!);
    const store = postgresStore(reused.url, { schema: reused.schema });
    await store.open({ clock: realClock });
    const c = new pg.Client({ connectionString: reused.url });
    await c.connect();
    try {
      const steps = 50;
      // Steps as an ordinary run records them: a value, no error, no spend, no reconcile.
      await c.query(
        `INSERT INTO "${reused.schema}".steps (${COLUMNS})
          SELECT 'run-f', 's#' || i, 0, i, 's', 'step', 'ok', '[{"i":1},' || i || ']', NULL,
                 '{}', 1, 1765000000000 + i, 1765000000001 + i, i, i, false, NULL
            FROM generate_series(0, $1 - 1) i`,
        [steps],
      );
      const { out, queries } = await counted(() => store.loadJournal("run-f"));
      expect(out.steps).toHaveLength(steps);
      const load = queries.filter((q) => q.name?.startsWith("cairn_load_journal"));
      expect(load).toHaveLength(1);
      const q = load[0]!;
      expect(q.rows).toBe(steps + 1);
      expect(q.fields).toBe(13);
      // The parts row: its three parts (empty JSON arrays).
      expect(q.strings).toBe(steps * 8 + 3);
    } finally {
      await c.end();
      await store.close();
      await reused.release();
    }
  }, 120_000);

  it("makes of the numbers' text the record toStep makes of the row, for edge values", async () => {
    const reused = reusableSchema(pgUrl!);
    const store = postgresStore(reused.url, { schema: reused.schema });
    await store.open({ clock: realClock });
    const c = new pg.Client({ connectionString: reused.url });
    await c.connect();
    try {
      const rows: unknown[][] = [
        // NULL delivery and issued_after; reconciled true; a spend.
        ["a", 0, 0, "ok", null, '{"usd": 0.5}', 1, 0, 0, null, null, false, true],
        // Times past 2^53 (read as Number reads their text), issued late, reconciled false.
        [
          "b",
          0,
          1,
          "ok",
          null,
          "{}",
          7,
          "9007199254740993",
          "9223372036854775807",
          3,
          2,
          true,
          false,
        ],
        // Negative times and windows; an error; a later generation of the same seq.
        [
          "c",
          0,
          2,
          "error",
          '["E","m"]',
          "{}",
          2147483647,
          -5,
          "-123456789012345678",
          -1,
          -2,
          false,
          null,
        ],
        ["c", 1, 2, "ok", null, "{}", 1, 1765000000000, 1765000000000, 4, 2, false, null],
        // Zero everywhere.
        ["d", 0, 3, "ok", null, "{}", 0, 0, 0, 0, 0, false, null],
      ];
      for (const [
        key,
        generation,
        seq,
        outcome,
        error,
        spend,
        attempt,
        s,
        e,
        d,
        ia,
        late,
        rec,
      ] of rows) {
        await c.query(
          `INSERT INTO "${reused.schema}".steps (${COLUMNS})
            VALUES ('run-e', $1, $2, $3, 'n', 'step', $4, '[1]', $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
          [key, generation, seq, outcome, error, spend, attempt, s, e, d, ia, late, rec],
        );
      }
      const loaded = await store.loadJournal("run-e");
      const raw = await c.query<StepRow>(
        `SELECT * FROM "${reused.schema}".steps WHERE run_id = 'run-e' ORDER BY seq, key, generation`,
      );
      expect(loaded.steps).toHaveLength(rows.length);
      expect(loaded.steps).toStrictEqual(raw.rows.map(toStep));
      expect(loaded.steps[1]!.startedAt).toBe(Number("9007199254740993"));
      expect(loaded.steps[2]!.completedAt).toBe(Number("-123456789012345678"));
      expect(loaded.steps[2]!.startedAt).toBe(-5);
    } finally {
      await c.end();
      await store.close();
      await reused.release();
    }
  }, 120_000);
});
