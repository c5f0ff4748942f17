// Replay reads step rows positionally (STEP_COLUMNS): a column the list lacks, or a list out
// of step with stepFromValues, would hand replay a record missing a field or holding another
// field's value. These tests tie the list to the migrated table and to stepToRow.

import Database from "better-sqlite3";
import { describe, expect, it } from "vitest";
import type { StepRecord } from "../store.js";
import { migrate } from "./migrate.js";
import {
  RUN_ROW_COLUMNS,
  runRowFromValues,
  STEP_COLUMNS,
  stepFromRow,
  stepFromValues,
  stepToRow,
} from "./rows.js";
import { RUN_COLUMNS } from "./sql.js";

const base: StepRecord = {
  runId: "run-1",
  key: "edit#2",
  generation: 3,
  seq: 7,
  name: "edit",
  kind: "effect",
  outcome: "error",
  result: null,
  error: { name: "TypeError", message: "bad \u0000 input \ud83d", code: "E_BAD" },
  spend: { tokens: 12, usd: 0.5 },
  attempt: 2,
  startedAt: 1_700_000_000_000,
  completedAt: 1_700_000_000_123,
  delivery: 5,
  issuedAfter: 4,
  issuedLate: true,
  reconciled: true,
};

describe("SQLite step rows read as arrays", () => {
  it("list every column of the migrated steps table, and only those", () => {
    const db = new Database(":memory:");
    try {
      migrate(db, ":memory:", Date.now());
      const columns = (db.pragma("table_info(steps)") as Array<{ name: string }>).map(
        (c) => c.name,
      );
      expect([...STEP_COLUMNS].sort()).toEqual([...columns].sort());
    } finally {
      db.close();
    }
  });

  it("list every column stepToRow writes", () => {
    expect([...STEP_COLUMNS].sort()).toEqual(Object.keys(stepToRow(base)).sort());
  });

  it("give back the record that was written, field by field", () => {
    const records: StepRecord[] = [
      base,
      { ...base, reconciled: false, issuedLate: false },
      {
        ...base,
        outcome: "ok",
        result: '["\\u0000 and a cut \\ud83d"]',
        error: null,
        spend: {},
        delivery: null,
        issuedAfter: null,
        reconciled: undefined,
      },
    ];
    for (const rec of records) {
      const row = stepToRow(rec);
      const expected = { ...rec };
      if (expected.reconciled === undefined) delete expected.reconciled;
      expect(stepFromValues(STEP_COLUMNS.map((c) => row[c]))).toEqual(expected);
      expect(stepFromRow(row)).toEqual(expected);
    }
  });
});

// findRow reads a run's row as an array (runRowFromValues): a list out of step with the
// function would hand every verb reading a run another column's value.
describe("SQLite runs rows read as arrays", () => {
  it("are RUN_COLUMNS, in order, and read back as the row object is", () => {
    // A create writes the list but the hold (its last two) and the epoch (sql.ts, insertRun).
    expect(RUN_ROW_COLUMNS.slice(-2)).toEqual(["held_by", "held_until"]);
    const db = new Database(":memory:");
    try {
      migrate(db, ":memory:", Date.now());
      const columns = (db.pragma("table_info(runs)") as Array<{ name: string }>).map((c) => c.name);
      expect(columns).toEqual(expect.arrayContaining([...RUN_ROW_COLUMNS]));
      // Every column a value of its own, so a shifted index shows.
      const values = RUN_ROW_COLUMNS.map((c, i) =>
        /_at$|_until$|^epoch$|^generation$|^cancel_requested$/.test(c) ? i + 1 : `v-${c}`,
      );
      db.prepare(
        `INSERT INTO runs (${RUN_COLUMNS}) VALUES (${RUN_ROW_COLUMNS.map(() => "?").join(", ")})`,
      ).run(values);
      const sql = `SELECT ${RUN_COLUMNS} FROM runs`;
      const asObject = db.prepare(sql).get();
      const asArray = db.prepare(sql).raw(true).get() as Array<string | number | null>;
      expect(runRowFromValues(asArray)).toEqual(asObject);
      expect(Object.keys(runRowFromValues(asArray))).toEqual([...RUN_ROW_COLUMNS]);
    } finally {
      db.close();
    }
  });
});
