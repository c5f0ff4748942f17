// Replay reads step rows positionally (STEP_COLUMNS): a column the list lacks, or a list out
// of step with stepFromValues, would hand replay a record missing a field or holding another
// field's value. These tests tie the list to the migrated table and to stepToRow.

import Database from "better-sqlite3";
import { describe, expect, it } from "vitest";
import type { StepRecord } from "../store.js";
import { migrate } from "./migrate.js";
import { STEP_COLUMNS, stepFromRow, stepFromValues, stepToRow } from "./rows.js";

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
