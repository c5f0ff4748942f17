// The journal on SQLite: the group commit (appendRecords) and the read of a run's journal
// for replay (loadJournal). The journal is the durable truth, so this is where its core
// rules live: records are insert-only, an identical re-write is a no-op (a retry after an
// unknown commit outcome), a different record under a taken key is a conflict, and spend
// is counted exactly once.
//
// A group commit is one transaction; each run's share (a RunWrite) is fenced by the run's
// epoch and, when it holds several records, applied in a SAVEPOINT of its own, so a lost
// lease or a conflict lands nothing of its write while the other writes commit (a write of
// one record that conflicts has inserted nothing). A write with a record no backend can store
// (storable.ts) is answered "unstorable" before the transaction begins.

import { addAmounts } from "../../lib/amounts.js";
import type { JournalEvents } from "../journal-page.js";
import { refuseUnstorable } from "../storable.js";
import type {
  Amounts,
  EventHead,
  EventHeadsPage,
  EventPayload,
  EventRecord,
  Journal,
  RunWrite,
  WriteOutcome,
} from "../store.js";
import {
  type AttemptRow,
  amountsJson,
  attemptFromRow,
  attemptToRow,
  type EventRow,
  eventFromRow,
  type IntentRow,
  intentFromRow,
  intentToRow,
  parseAmounts,
  STEP_COLUMNS,
  STEP_SELECT,
  type StepRow,
  sameColumns,
  stepFromValues,
  stepToRow,
} from "./rows.js";
import type { Prepare, ReadTx, StoreContext } from "./sql.js";
import { UNMARKED_SQL } from "./store-marks.js";

/**
 * `check` (sqlite-store.ts: the plain-payload guard's mark read, plain-payloads.ts) runs
 * inside the transaction before anything of it is written, as checkedContext would run it.
 * A write of one step without spend (nearly every step) is first tried as ONE statement
 * that inserts its row only where the run's epoch is the writer's and, while there is a
 * check to run, the store is unmarked (`insertFenced`): inserted, the fence held and the
 * check had nothing to say. Otherwise (a lost lease, a key taken, a marked store, a write
 * of several records) nothing was written, and the write goes the way every other write
 * goes: the check, the epoch read, the insert or comparison. The mark read, the epoch read
 * and the insert were three statements a step; a store holding the write lock cannot see
 * the mark or the epoch change between them.
 */
export function appendRecords(
  ctx: StoreContext,
  writes: RunWrite[],
  check?: (tx: ReadTx) => void,
): Promise<WriteOutcome[]> {
  if (writes.length === 0) return Promise.resolve([]);
  return refuseUnstorable(writes, (storable) => {
    // Encoded before the transaction: a record that cannot be encoded throws without
    // holding the lock.
    const encoded = storable.map(encodeWrite);
    return ctx.write("appendRecords", (tx) => {
      let checked = check === undefined;
      return encoded.map((e): WriteOutcome => {
        if (loneStep(e) && insertFenced(tx.prepare, e, !checked)) {
          // The fence held and, with the mark looked at, no mark: the check would have
          // passed, and passes for the rest of this transaction (it holds the write lock).
          checked = true;
          return { ok: true };
        }
        if (!checked) {
          check?.(tx);
          checked = true;
        }
        const run = tx.prepare("SELECT epoch FROM runs WHERE id = ?").get(e.w.runId) as
          | { epoch: number }
          | undefined;
        if (!run || run.epoch !== e.w.epoch) return { ok: false, reason: "lease-lost" };
        try {
          // A write of one record has nothing to undo when it conflicts: its insert did
          // nothing, and its spend is only added once it inserted. The SAVEPOINT and its
          // RELEASE were a twelfth of a step's store time.
          if (recordCount(e) <= 1) applyWrite(tx.prepare, e, tx.now);
          else tx.savepoint((w: EncodedWrite) => applyWrite(tx.prepare, w, tx.now))(e);
          return { ok: true };
        } catch (err) {
          if (err instanceof WriteConflict) return { ok: false, reason: "conflict", key: err.key };
          throw err;
        }
      });
    });
  });
}

/** A write of one step record without spend, and nothing else: insertFenced can write it. */
function loneStep(e: EncodedWrite): boolean {
  return (
    e.steps.length === 1 &&
    e.attempts.length === 0 &&
    e.intents.length === 0 &&
    (e.w.consume === undefined || e.w.consume.length === 0) &&
    e.steps[0]!.spend === "{}"
  );
}

/** Inserts a lone step's row if its run's epoch is the write's and (`unmarked`) the store
 *  is not marked encrypted; true if it inserted. False leaves nothing written: the fence,
 *  the mark or a taken key stopped it, and the caller finds out which the usual way. */
function insertFenced(prepare: Prepare, e: EncodedWrite, unmarked: boolean): boolean {
  const row = e.steps[0]!;
  const columns = STEP_COLUMNS;
  const values = new Array<unknown>(columns.length + 2);
  for (let i = 0; i < columns.length; i++) values[i] = row[columns[i]!];
  values[columns.length] = e.w.runId;
  values[columns.length + 1] = e.w.epoch;
  return prepare(unmarked ? FENCED_UNMARKED : FENCED).run(values).changes === 1;
}

// WHERE before ON CONFLICT: SQLite's upsert after INSERT ... SELECT needs one to parse.
const FENCED =
  `INSERT INTO steps (${STEP_COLUMNS.join(", ")}) ` +
  `SELECT ${STEP_COLUMNS.map(() => "?").join(", ")} ` +
  "WHERE EXISTS (SELECT 1 FROM runs WHERE id = ? AND epoch = ?) ON CONFLICT DO NOTHING";
const FENCED_UNMARKED = FENCED.replace(" ON CONFLICT", ` AND ${UNMARKED_SQL} ON CONFLICT`);

/** Everything replay needs, in one read transaction (one snapshot), with the unconsumed
 *  events as `events` asks. */
export function loadJournal(
  ctx: StoreContext,
  runId: string,
  events: JournalEvents = "whole",
): Promise<Journal> {
  return ctx.read("loadJournal", (tx) => ({
    steps: (
      tx
        .prepare(`SELECT ${STEP_SELECT} FROM steps WHERE run_id = ? ORDER BY seq, generation`)
        .raw(true)
        .all(runId) as Array<Array<string | number | null>>
    ).map(stepFromValues),
    attempts: (
      tx
        .prepare("SELECT * FROM attempts WHERE run_id = ? ORDER BY generation, id")
        .all(runId) as AttemptRow[]
    ).map(attemptFromRow),
    intents: (
      tx.prepare("SELECT * FROM intents WHERE run_id = ? ORDER BY id").all(runId) as IntentRow[]
    ).map(intentFromRow),
    ...(events === "whole"
      ? { events: unconsumedEvents(tx.prepare, runId) }
      : events === "heads"
        ? { events: [], eventHeads: unconsumedHeads(tx.prepare, runId) }
        : { events: [] }),
  }));
}

/** A run's unconsumed events, oldest first. `settled` (the run's last look after a wait's
 *  deadline): read holding the write lock (BEGIN IMMEDIATE, which writes nothing here), so
 *  an event or an approval's answer another process is writing commits first and is seen
 *  (a snapshot read could be taken just before that commit). */
export function pendingEvents(
  ctx: StoreContext,
  runId: string,
  settled: boolean,
): Promise<EventRecord[]> {
  const read = (tx: { prepare: Prepare }) => unconsumedEvents(tx.prepare, runId);
  return settled ? ctx.write("pendingEvents", read) : ctx.read("pendingEvents", read);
}

/** pendingEvents without the payloads (Store.pendingEventHeads). */
export function pendingEventHeads(
  ctx: StoreContext,
  runId: string,
  settled: boolean,
): Promise<EventHead[]> {
  const read = (tx: { prepare: Prepare }) => unconsumedHeads(tx.prepare, runId);
  return settled ? ctx.write("pendingEventHeads", read) : ctx.read("pendingEventHeads", read);
}

/** A page of the heads of the run's unconsumed events of one name, oldest first
 *  (Store.pendingEventHeadsNamed): a search of events_unconsumed, whose entries are
 *  (run_id, name, rowid = seq), costing the page whatever else the run was sent. */
export function pendingEventHeadsNamed(
  ctx: StoreContext,
  runId: string,
  page: EventHeadsPage,
  settled: boolean,
): Promise<EventHead[]> {
  const read = (tx: { prepare: Prepare }) => namedHeads(tx.prepare, runId, page, []);
  return settled
    ? ctx.write("pendingEventHeadsNamed", read)
    : ctx.read("pendingEventHeadsNamed", read);
}

/** The pages of several names in one read (Store.pendingEventHeadsOfNames): each as
 *  pendingEventHeadsNamed reads it, in one transaction. */
export function pendingEventHeadsOfNames(
  ctx: StoreContext,
  runId: string,
  pages: readonly EventHeadsPage[],
  settled: boolean,
): Promise<EventHead[]> {
  const read = (tx: { prepare: Prepare }) => {
    const heads: EventHead[] = [];
    for (const page of pages) namedHeads(tx.prepare, runId, page, heads);
    return heads;
  };
  return settled
    ? ctx.write("pendingEventHeadsOfNames", read)
    : ctx.read("pendingEventHeadsOfNames", read);
}

/** One page of the heads of the run's unconsumed events of `page.name`, oldest first,
 *  pushed onto `heads` (returned). */
function namedHeads(
  prepare: Prepare,
  runId: string,
  page: EventHeadsPage,
  heads: EventHead[],
): EventHead[] {
  const rows = prepare(
    `SELECT seq, created_at, idempotency_key FROM events
     WHERE run_id = ? AND name = ? AND consumed_by IS NULL AND seq > ?
     ORDER BY seq LIMIT ?`,
  )
    .raw(true)
    .all(runId, page.name, page.after, page.limit) as Array<[number, number, string | null]>;
  for (const [seq, createdAt, idempotencyKey] of rows) {
    heads.push({ seq, runId, name: page.name, createdAt, consumedBy: null, idempotencyKey });
  }
  return heads;
}

/** The payloads of the run's events with these seqs (Store.eventPayloads). */
export function eventPayloads(
  ctx: StoreContext,
  runId: string,
  seqs: readonly number[],
): Promise<EventPayload[]> {
  return ctx.read(
    "eventPayloads",
    (tx) =>
      tx
        .prepare(
          "SELECT seq, payload FROM events WHERE run_id = ? AND seq IN (SELECT value FROM json_each(?))",
        )
        .all(runId, JSON.stringify(seqs)) as EventPayload[],
  );
}

function unconsumedHeads(prepare: Prepare, runId: string): EventHead[] {
  // Rows as arrays, and none of the columns every row shares (its run, unconsumed): a run
  // may have thousands of pending events.
  const rows = prepare(
    `SELECT seq, name, created_at, idempotency_key
     FROM events WHERE run_id = ? AND consumed_by IS NULL ORDER BY seq`,
  )
    .raw(true)
    .all(runId) as Array<[number, string, number, string | null]>;
  return rows.map(([seq, name, createdAt, idempotencyKey]) => ({
    seq,
    runId,
    name,
    createdAt,
    consumedBy: null,
    idempotencyKey,
  }));
}

function unconsumedEvents(prepare: Prepare, runId: string): EventRecord[] {
  return (
    prepare("SELECT * FROM events WHERE run_id = ? AND consumed_by IS NULL ORDER BY seq").all(
      runId,
    ) as EventRow[]
  ).map(eventFromRow);
}

type JournalTable = "steps" | "attempts" | "intents";

/** A RunWrite whose records clash with stored ones: thrown to roll back its savepoint. */
class WriteConflict extends Error {
  constructor(readonly key: string) {
    super(`conflict on "${key}"`);
  }
}

interface EncodedWrite {
  w: RunWrite;
  steps: StepRow[];
  attempts: AttemptRow[];
  intents: IntentRow[];
}

/** Encodes a write's records to rows; throws on a record that cannot be stored. */
function encodeWrite(w: RunWrite): EncodedWrite {
  return {
    w,
    steps: (w.steps ?? []).map(stepToRow),
    attempts: (w.attempts ?? []).map(attemptToRow),
    intents: (w.intents ?? []).map(intentToRow),
  };
}

/** How many records and event consumptions a write holds. */
function recordCount(e: EncodedWrite): number {
  return e.steps.length + e.attempts.length + e.intents.length + (e.w.consume?.length ?? 0);
}

/** Applies one write whose epoch the caller has checked. Throws WriteConflict, with
 *  nothing of the write undone: the caller runs a write of several records in a SAVEPOINT. */
function applyWrite(prepare: Prepare, e: EncodedWrite, now: number): void {
  const spent: Amounts = {};
  let spendAdded = false;
  for (const row of e.steps) {
    if (insertOrMatch(prepare, "steps", row, ["run_id", "key", "generation"])) {
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
      amountsJson(total, () => `Budget spent of run "${e.w.runId}"`),
      now,
      e.w.runId,
    );
  }
}

/** Adds a row's spend; true if it had any amount (most steps spend nothing, and then the
 *  run row is not rewritten: one page less per commit). */
function addSpend(into: Amounts, spendJson: string): boolean {
  if (spendJson === "{}") return false;
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
  if (!sameColumns(row, stored, NOT_COMPARED)) throw new WriteConflict(row.key);
  return false;
}

/** How an effect's value was found (reconciled or performed) is not part of its record's
 *  identity: one execution writes one value, as PostgreSQL's append_records (migration 10). */
const NOT_COMPARED: ReadonlySet<string> = new Set(["reconciled"]);

/** Table and column names come from the row types in rows.ts, never from callers. Each
 *  table's rows always carry the same columns (rows.ts builds them whole), so the
 *  statement's text and column order are built once per table and kind of insert: building
 *  them per record was one of the larger allocations of a step. Values are bound by
 *  position: binding 17 named columns from an object cost more than the array. */
export function insertRow(
  prepare: Prepare,
  table: JournalTable,
  row: StepRow | AttemptRow | IntentRow,
  onConflict: "" | "ON CONFLICT DO NOTHING" = "",
): boolean {
  const cache = onConflict === "" ? INSERTS : INSERTS_IGNORING;
  let insert = cache.get(table);
  if (insert === undefined) {
    const columns = Object.keys(row);
    insert = {
      columns,
      sql:
        `INSERT INTO ${table} (${columns.join(", ")}) ` +
        `VALUES (${columns.map(() => "?").join(", ")}) ${onConflict}`,
    };
    cache.set(table, insert);
  }
  const { columns } = insert;
  const values = new Array<unknown>(columns.length);
  for (let i = 0; i < columns.length; i++) values[i] = row[columns[i]!];
  return prepare(insert.sql).run(values).changes === 1;
}

interface InsertStatement {
  columns: string[];
  sql: string;
}

const INSERTS = new Map<JournalTable, InsertStatement>();
const INSERTS_IGNORING = new Map<JournalTable, InsertStatement>();
