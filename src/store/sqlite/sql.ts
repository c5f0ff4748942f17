// What every SQLite verb shares: the transaction it runs in (connection.ts opens it), the
// runs row, creating a run, and storing an event that wakes the run waiting for it.

import type Database from "better-sqlite3";
import { StoreError } from "../../errors.js";
import {
  type EventRecord,
  keepsSentEnds,
  type NewEvent,
  type NewRun,
  type RunRecord,
  type StoreHint,
} from "../store.js";
import {
  amountsJson,
  type EventRow,
  eventFromRow,
  RUN_ROW_COLUMNS,
  type RunRow,
  runFromRow,
  runRowFromValues,
} from "./rows.js";
import { MARKED_SQL, UNMARKED_SQL } from "./store-marks.js";

/** The prepared statement of a SQL text, cached by that text (always a fixed template). */
export type Prepare = (sql: string) => Database.Statement;

/** What a reading verb gets: one deferred transaction, so one consistent snapshot. */
export interface ReadTx {
  prepare: Prepare;
  /** The file, for messages. */
  path: string;
}

/** What a writing verb gets: one BEGIN IMMEDIATE transaction. */
export interface WriteTx extends ReadTx {
  /** The store's now (its Clock), read once the transaction held the write lock. */
  now: number;
  /** Told to subscribers once the transaction has committed. */
  hint(h: StoreHint): void;
  /** `fn` as a nested transaction (a SAVEPOINT): a throw undoes only its own writes. */
  savepoint<A, R>(fn: (arg: A) => R): (arg: A) => R;
  /** The epoch floor as this connection last read it: a guess, which the insert of a run
   *  that binds it checks (insertNewRow) and reads again when it was wrong. */
  floor: { epoch: number };
}

/** How the verbs reach the file: each one is one transaction, named for messages. */
export interface StoreContext {
  write<T>(verb: string, fn: (tx: WriteTx) => T): Promise<T>;
  /** Like write, but writes asked for in the same turn of the event loop share one
   *  transaction, each in a SAVEPOINT of its own (connection.ts). For the transitions
   *  many runs make at once: creating and releasing runs. */
  writeGrouped<T>(verb: string, fn: (tx: WriteTx) => T): Promise<T>;
  read<T>(verb: string, fn: (tx: ReadTx) => T): Promise<T>;
}

/** A runs row's columns, in RUN_ROW_COLUMNS' order (a raw row is read by position). */
export const RUN_COLUMNS = RUN_ROW_COLUMNS.join(", ");

/** The columns insertRun writes: all but the hold (held_by, held_until, the last two) and
 *  the epoch, which newRunInsert puts last. */
const NEW_RUN_COLUMNS = RUN_ROW_COLUMNS.filter(
  (c) => c !== "held_by" && c !== "held_until" && c !== "epoch",
).join(", ");

const FIND_ROW = `SELECT ${RUN_ROW_COLUMNS.join(", ")} FROM runs WHERE id = ?`;

/** A run's whole row, read as an array (rows.ts, runRowFromValues). */
export function findRow(tx: ReadTx, id: string): RunRow | undefined {
  const values = tx.prepare(FIND_ROW).raw(true).get(id) as Array<string | number | null>;
  return values === undefined ? undefined : runRowFromValues(values);
}

const FIND_ROW_MARKED = `SELECT ${RUN_ROW_COLUMNS.join(", ")}, ${MARKED_SQL} FROM runs WHERE id = ?`;

/** findRow for a write the plain-payload guard hands `check` (plain-payloads.ts,
 *  admitInTransaction): the store's mark is read in the same statement as the row, where
 *  the check read it in one of its own first. Only a store found marked, or no row (which
 *  reads no mark), runs the check, before anything is written. */
export function findRowChecked(
  tx: ReadTx,
  id: string,
  check: ((tx: ReadTx) => void) | undefined,
): RunRow | undefined {
  if (check === undefined) return findRow(tx, id);
  const values = tx.prepare(FIND_ROW_MARKED).raw(true).get(id) as
    | Array<string | number | null>
    | undefined;
  if (values === undefined || values[RUN_ROW_COLUMNS.length] !== 0) check(tx);
  return values === undefined ? undefined : runRowFromValues(values);
}

export function findRun(tx: ReadTx, id: string): RunRecord | undefined {
  const row = findRow(tx, id);
  return row ? runFromRow(row) : undefined;
}

/** A run this transaction has just written. */
export function mustGetRun(tx: ReadTx, id: string): RunRecord {
  const run = findRun(tx, id);
  if (!run) throw new StoreError(`SQLite store "${tx.path}": run "${id}" vanished mid-write.`);
  return run;
}

/** The statements that insert a new runs row (`columns` and the epoch, last, from the values
 *  `select` lists, its last `?` the epoch): each inserts only if the epoch floor (migration 11)
 *  is the one bound after the epoch, and `unmarked` only while the store is not marked
 *  encrypted (store-marks.ts). One statement, where a read of the mark, the insert and
 *  RETURNING its epoch (SQLite builds an ephemeral table for a RETURNING: a fifth of the
 *  insert's own instructions) were two, and then some. */
export function newRunInsert(columns: string, select: string): NewRunInsert {
  const plain =
    `INSERT INTO runs (${columns}, epoch) SELECT ${select} ` +
    "WHERE (SELECT epoch FROM epoch_floor) = ? ON CONFLICT (id) DO NOTHING";
  return {
    plain,
    unmarked: plain.replace(" ON CONFLICT", ` AND ${UNMARKED_SQL} ON CONFLICT`),
  };
}

export interface NewRunInsert {
  plain: string;
  unmarked: string;
}

/**
 * Runs a newRunInsert with `values` (the epoch and the floor last: both written here): the
 * run's epoch is the floor plus `bump`. Returns the epoch, or undefined when the id exists
 * (then nothing changed). The floor is bound as the connection last read it (WriteTx.floor)
 * and checked by the statement itself, which while there is a `check` (the plain-payload
 * guard's, plain-payloads.ts) also inserts only where the store is unmarked: in nearly every
 * insert one statement says all of it. When it inserts nothing (the id taken, the floor
 * raised by a deletion, the store marked) the check runs (it may refuse), the floor and the
 * id are read, and the insert is made again where the id is free.
 */
export function insertNewRow(
  tx: WriteTx,
  insert: NewRunInsert,
  values: unknown[],
  bump: number,
  check: ((tx: ReadTx) => void) | undefined,
): number | undefined {
  const at = values.length;
  let floor = tx.floor.epoch;
  values[at] = floor + bump;
  values[at + 1] = floor;
  if (tx.prepare(check ? insert.unmarked : insert.plain).run(values).changes === 1) {
    return floor + bump;
  }
  check?.(tx);
  const now = tx
    .prepare(
      "SELECT (SELECT epoch FROM epoch_floor) AS epoch, " +
        "EXISTS (SELECT 1 FROM runs WHERE id = ?) AS taken",
    )
    .get(values[0]) as { epoch: number | null; taken: number };
  if (now.taken !== 0) return undefined;
  if (now.epoch === null) {
    // Migration 11 wrote its one row; only a change made outside cairn removes it.
    throw new StoreError(
      `SQLite store "${tx.path}": its epoch_floor table has no row (the file was changed ` +
        `outside cairn), so run "${String(values[0])}" cannot be given a safe epoch; nothing ` +
        "was written. Restore the file from a backup.",
    );
  }
  floor = now.epoch;
  tx.floor.epoch = floor;
  values[at] = floor + bump;
  values[at + 1] = floor;
  // The store's mark was read (the check) or is not asked about (no check): the plain
  // statement, with the floor just read. Nothing else writes between (the write lock); were
  // it to insert nothing, the caller reads the run as for a taken id (and finds none).
  return tx.prepare(insert.plain).run(values).changes === 1 ? floor + bump : undefined;
}

const INSERT_RUN = newRunInsert(
  NEW_RUN_COLUMNS,
  "?, ?, ?, ?, NULL, NULL, ?, NULL, NULL, ?, ?, ?, ?, NULL, '[]', ?, ?, 0, 0, ?, ?, '[]', ?, ?, ?",
);

/** Inserts a pending run, ready now (or with claimBy, claimed: running, its first epoch,
 *  leased), and returns it as stored; undefined if the id exists (then nothing changes). Its
 *  epochs start above the epoch floor (migration 11): above those of any deleted run.
 *  `check`: the plain-payload guard's, run in the transaction (insertNewRow). */
export function insertRun(
  tx: WriteTx,
  run: NewRun,
  budgetSpent: string,
  check?: (tx: ReadTx) => void,
): RunRecord | undefined {
  const limit = amountsJson(run.budgetLimit, () => `Budget limit of run "${run.id}"`);
  const leaseUntil = run.claimBy ? tx.now + run.claimBy.leaseMs : null;
  const status = run.claimBy ? "running" : "pending";
  const readyAt = leaseUntil ?? tx.now;
  const leaseOwner = run.claimBy?.workerId ?? null;
  // The record is built from the values bound here, as runFromRow reads them back.
  const epoch = insertNewRow(
    tx,
    INSERT_RUN,
    [
      run.id,
      run.workflow,
      run.version,
      status,
      run.input,
      limit,
      budgetSpent,
      run.parentId ?? null,
      readyAt,
      leaseOwner,
      leaseUntil,
      tx.now,
      tx.now,
      run.traceContext ?? null,
      run.handedInputDigest ?? null,
    ],
    run.claimBy ? 1 : 0,
    check,
  );
  if (epoch === undefined) return undefined;
  return runFromRow({
    id: run.id,
    workflow: run.workflow,
    version: run.version,
    status,
    reason: null,
    paused_for: null,
    input: run.input,
    output: null,
    error: null,
    budget_limit: limit,
    budget_spent: budgetSpent,
    parent_id: run.parentId ?? null,
    ready_at: readyAt,
    wake_at: null,
    waiting_for: "[]",
    lease_owner: leaseOwner,
    lease_until: leaseUntil,
    epoch,
    generation: 0,
    cancel_requested: 0,
    created_at: tx.now,
    updated_at: tx.now,
    failed_calls: "[]",
    trace_context: run.traceContext ?? null,
    handed_input_digest: run.handedInputDigest ?? null,
  });
}

/** Stores an event; a run waiting for its name becomes ready now (an earlier timer is
 *  kept) and is hinted runnable; a run executing now is hinted so. */
export function storeEvent(tx: WriteTx, e: NewEvent): EventRecord {
  const row = tx
    .prepare(
      `INSERT INTO events (run_id, name, payload, created_at, consumed_by, idempotency_key)
       VALUES (?, ?, ?, ?, NULL, ?) RETURNING *`,
    )
    .get(e.runId, e.name, e.payload, tx.now, e.idempotencyKey ?? null) as EventRow;
  const woke = tx
    .prepare(
      `UPDATE runs SET ready_at = CASE WHEN ready_at IS NULL OR ready_at > ? THEN ? ELSE ready_at END,
         updated_at = ?
       WHERE id = ? AND status = 'waiting'
         AND EXISTS (SELECT 1 FROM json_each(runs.waiting_for) WHERE value = ?)`,
    )
    .run(tx.now, tx.now, tx.now, e.runId, e.name);
  if (woke.changes > 0) tx.hint({ kind: "runnable", runId: e.runId });
  // A run executing now: its execution, if in this process, looks at its events at once (a
  // child's result for a parent whose other branch runs a step), not at its worker's next poll.
  else if (findRow(tx, e.runId)?.status === "running") tx.hint({ kind: "event", runId: e.runId });
  return eventFromRow(row);
}

/** storeEvent for an event a transition sends to another run (a child's outcome for its
 *  parent): dropped when that run is gone or has ended for good (completed, canceled),
 *  which has no reader for it; kept for a failed run, which a resume executes again
 *  (keepsSentEnds). */
export function deliverEvent(tx: WriteTx, e: NewEvent): void {
  const target = findRow(tx, e.runId);
  if (!target || !keepsSentEnds(target.status)) return;
  storeEvent(tx, e);
}
