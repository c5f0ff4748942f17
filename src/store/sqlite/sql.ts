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

/** The columns insertRun writes: all but the hold (held_by, held_until, the last two). */
export const NEW_RUN_COLUMNS = RUN_ROW_COLUMNS.slice(0, -2).join(", ");

const FIND_ROW = `SELECT ${RUN_ROW_COLUMNS.join(", ")} FROM runs WHERE id = ?`;

/** A run's whole row, read as an array (rows.ts, runRowFromValues). */
export function findRow(tx: ReadTx, id: string): RunRow | undefined {
  const values = tx.prepare(FIND_ROW).raw(true).get(id) as Array<string | number | null>;
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

/** Inserts a pending run, ready now (or with claimBy, claimed: running, its first epoch,
 *  leased), and returns it as stored; undefined if the id exists (then nothing changes). Its
 *  epochs start above the epoch floor (migration 11): above those of any deleted run. */
export function insertRun(tx: WriteTx, run: NewRun, budgetSpent: string): RunRecord | undefined {
  const limit = amountsJson(run.budgetLimit, () => `Budget limit of run "${run.id}"`);
  const leaseUntil = run.claimBy ? tx.now + run.claimBy.leaseMs : null;
  const status = run.claimBy ? "running" : "pending";
  const readyAt = leaseUntil ?? tx.now;
  const leaseOwner = run.claimBy?.workerId ?? null;
  // Only the epoch comes back (it is the epoch floor's): the record is built from the
  // values bound here, as runFromRow reads them back (RETURNING the whole row made SQLite
  // build, and better-sqlite3 convert, 25 columns).
  const inserted = tx
    .prepare(
      `INSERT INTO runs (${NEW_RUN_COLUMNS}) VALUES
         (?, ?, ?, ?, NULL, NULL, ?, NULL, NULL, ?, ?, ?, ?, NULL, '[]', ?, ?,
          (SELECT epoch FROM epoch_floor) + ?, 0, 0, ?, ?, '[]', ?, ?)
       ON CONFLICT (id) DO NOTHING
       RETURNING epoch`,
    )
    .get(
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
      run.claimBy ? 1 : 0,
      tx.now,
      tx.now,
      run.traceContext ?? null,
      run.handedInputDigest ?? null,
    ) as { epoch: number } | undefined;
  if (!inserted) return undefined;
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
    epoch: inserted.epoch,
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
