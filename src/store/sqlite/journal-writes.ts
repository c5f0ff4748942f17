// Applying one run's share of a group commit (a RunWrite) inside the caller's transaction.
// Kept apart from the store because it holds the journal's core rules: records are
// insert-only, an identical re-write is a no-op (a retry after an unknown commit outcome),
// a different record under a taken key is a conflict, and spend is counted exactly once.

import type Database from "better-sqlite3";
import { addAmounts } from "../../lib/amounts.js";
import type { Amounts, RunWrite } from "../store.js";
import {
  type AttemptRow,
  amountsJson,
  attemptToRow,
  type IntentRow,
  intentToRow,
  parseAmounts,
  type StepRow,
  sameColumns,
  stepToRow,
} from "./rows.js";

/** The store's cached statement factory. */
export type Prepare = (sql: string) => Database.Statement;

type JournalTable = "steps" | "attempts" | "intents";

/** A RunWrite whose records clash with stored ones: thrown to roll back its savepoint. */
export class WriteConflict extends Error {
  constructor(readonly key: string) {
    super(`conflict on "${key}"`);
  }
}

export interface EncodedWrite {
  w: RunWrite;
  steps: StepRow[];
  attempts: AttemptRow[];
  intents: IntentRow[];
}

/** Encodes a write's records to rows; throws on a record that cannot be stored. */
export function encodeWrite(w: RunWrite): EncodedWrite {
  return {
    w,
    steps: (w.steps ?? []).map(stepToRow),
    attempts: (w.attempts ?? []).map(attemptToRow),
    intents: (w.intents ?? []).map(intentToRow),
  };
}

/** Applies one write whose epoch the caller has checked. Throws WriteConflict. */
export function applyWrite(prepare: Prepare, e: EncodedWrite, now: number): void {
  const spent: Amounts = {};
  let spendAdded = false;
  for (const row of e.steps) {
    if (insertOrMatch(prepare, "steps", row, ["run_id", "key"])) {
      spendAdded = addSpend(spent, row.spend) || spendAdded;
    }
  }
  for (const row of e.attempts) {
    if (insertOrMatch(prepare, "attempts", row, ["run_id", "generation", "key", "attempt"])) {
      spendAdded = addSpend(spent, row.spend) || spendAdded;
    }
  }
  for (const row of e.intents) insertOrMatch(prepare, "intents", row, ["run_id", "key"]);
  for (const c of e.w.consume ?? []) {
    const marked = prepare(
      "UPDATE events SET consumed_by = ? WHERE seq = ? AND run_id = ? AND consumed_by IS NULL",
    ).run(c.key, c.eventSeq, e.w.runId);
    if (marked.changes === 1) continue;
    // Already consumed by this very wait: a retried write, not a second consumer.
    const ev = prepare("SELECT consumed_by FROM events WHERE seq = ? AND run_id = ?").get(
      c.eventSeq,
      e.w.runId,
    ) as { consumed_by: string | null } | undefined;
    if (ev?.consumed_by !== c.key) throw new WriteConflict(c.key);
  }
  if (spendAdded) {
    const row = prepare("SELECT budget_spent FROM runs WHERE id = ?").get(e.w.runId) as {
      budget_spent: string;
    };
    const total = parseAmounts(row.budget_spent);
    addAmounts(total, spent);
    prepare("UPDATE runs SET budget_spent = ?, updated_at = ? WHERE id = ?").run(
      amountsJson(total, `Budget spent of run "${e.w.runId}"`),
      now,
      e.w.runId,
    );
  }
}

/** Adds a row's spend; true if it had any amount (most steps spend nothing, and then the
 *  run row is not rewritten: one page less per commit). */
function addSpend(into: Amounts, spendJson: string): boolean {
  const amounts = parseAmounts(spendJson);
  if (Object.keys(amounts).length === 0) return false;
  addAmounts(into, amounts);
  return true;
}

/** Inserts an insert-only record. Returns true if inserted, false if an identical one
 *  exists; throws WriteConflict if a different one holds its key. */
function insertOrMatch(
  prepare: Prepare,
  table: JournalTable,
  row: StepRow | AttemptRow | IntentRow,
  unique: readonly string[],
): boolean {
  if (insertRow(prepare, table, row, "ON CONFLICT DO NOTHING")) return true;
  const where = unique.map((c) => `${c} = @${c}`).join(" AND ");
  const key: Record<string, unknown> = {};
  for (const c of unique) key[c] = row[c];
  const stored = prepare(`SELECT * FROM ${table} WHERE ${where}`).get(key) as Record<
    string,
    unknown
  >;
  if (!sameColumns(row, stored)) throw new WriteConflict(row.key);
  return false;
}

/** Table and column names come from the row types in rows.ts, never from callers. */
export function insertRow(
  prepare: Prepare,
  table: JournalTable,
  row: StepRow | AttemptRow | IntentRow,
  onConflict = "",
): boolean {
  const columns = Object.keys(row);
  const sql =
    `INSERT INTO ${table} (${columns.join(", ")}) ` +
    `VALUES (${columns.map((c) => `@${c}`).join(", ")}) ${onConflict}`;
  return prepare(sql).run(row).changes === 1;
}
