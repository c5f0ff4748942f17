// Run state transitions on SQLite that are more than one statement: release, events,
// cancel, resume, fork, and pausing unserved versions. Each is one BEGIN IMMEDIATE
// transaction, so it sees the run as every earlier writer of the file left it and no
// other writer can change the run until it commits.

import { runNotFound } from "../../errors.js";
import { addAmounts } from "../../lib/amounts.js";
import { displayText } from "../../lib/text.js";
import { errorJson } from "../error-json.js";
import {
  type Amounts,
  type CancelOutcome,
  type NewEvent,
  type NewRun,
  type Release,
  type ReleaseOutcome,
  type ResumeOptions,
  type ResumeOutcome,
  type RunEnd,
  type RunRecord,
  type RunStatus,
  type SendEventOutcome,
  TERMINAL_STATUSES,
  unservedReason,
} from "../store.js";
import { FORK_SOURCE_REPLACED } from "../verb-arguments.js";
import { insertRow } from "./journal-writes.js";
import {
  type AttemptRow,
  amountsJson,
  attemptFromRow,
  attemptToRow,
  type EventRow,
  eventFromRow,
  parseAmounts,
  RUN_ROW_COLUMNS,
  type RunRow,
  runFromRow,
  type StepRow,
  stepFromRow,
  stepToRow,
} from "./rows.js";
import {
  deliverEvent,
  findRow,
  findRowChecked,
  findRun,
  insertNewRow,
  insertRun,
  mustGetRun,
  newRunInsert,
  type ReadTx,
  type StoreContext,
  storeEvent,
  type WriteTx,
} from "./sql.js";

const CANCELABLE_ON_RELEASE = new Set<RunStatus>(["pending", "waiting", "paused"]);

/** Fenced by epoch: only the run's current owner releases it. `check`: the plain-payload
 *  guard's, run where the row's read finds the store marked (sql.ts, findRowChecked). */
export function releaseRun(
  ctx: StoreContext,
  r: Release,
  check: ((tx: ReadTx) => void) | undefined,
): Promise<ReleaseOutcome> {
  return ctx.writeGrouped("releaseRun", (tx) => releaseInTx(tx, r, check));
}

/** releaseRun's work, in a transaction the caller holds. */
function releaseInTx(
  tx: WriteTx,
  r: Release,
  check: ((tx: ReadTx) => void) | undefined,
): ReleaseOutcome {
  {
    const row = findRowChecked(tx, r.runId, check);
    if (!row || row.epoch !== r.epoch || row.status !== "running") {
      return { ok: false, reason: "lease-lost" };
    }
    for (const e of r.events ?? []) deliverEvent(tx, e);
    const s = releasedState(tx, r, row);
    const output = r.output ?? null;
    const error = r.error ? errorJson(r.error) : null;
    const waitingFor = JSON.stringify(s.waitingFor);
    const failedCalls = JSON.stringify(s.failedCalls);
    const heldBy = s.heldFor?.workerId ?? null;
    const heldUntil = s.heldFor ? tx.now + s.heldFor.ms : null;
    tx.prepare(
      `UPDATE runs SET status = ?, reason = ?, paused_for = ?, output = ?, error = ?,
         ready_at = ?, wake_at = ?, waiting_for = ?, lease_owner = NULL, lease_until = NULL,
         failed_calls = ?, crash_unjudged = ?, held_by = ?, held_until = ?, updated_at = ?
       WHERE id = ?`,
    ).run(
      s.status,
      s.reason,
      s.pausedFor,
      output,
      error,
      s.readyAt,
      s.wakeAt,
      waitingFor,
      failedCalls,
      s.status === "paused" && r.crashUnjudged === true ? 1 : 0,
      heldBy,
      heldUntil,
      tx.now,
      r.runId,
    );
    hintReleased(tx, r.runId, s);
    // The run as released: the row read above with the columns this UPDATE set (each bound
    // a string, a whole number or null, which the columns' affinities store as given), as
    // insertReleasedRun builds its record. RETURNING the row made SQLite build, and
    // better-sqlite3 convert into an object, 27 columns a release. The events a release
    // sends go to other runs (a child's end, to its parent); should one name the run itself,
    // the run is read back, as storing it may have changed its row.
    const released: RunRow = {
      ...row,
      status: s.status,
      reason: s.reason,
      paused_for: s.pausedFor,
      output,
      error,
      ready_at: s.readyAt,
      wake_at: s.wakeAt,
      waiting_for: waitingFor,
      lease_owner: null,
      lease_until: null,
      failed_calls: failedCalls,
      held_by: heldBy,
      held_until: heldUntil,
      updated_at: tx.now,
    };
    const self = (e: NewEvent) => e.runId === r.runId;
    if (r.events?.some(self) || r.eventsIfCanceled?.some(self)) {
      return { ok: true, run: mustGetRun(tx, r.runId) };
    }
    return { ok: true, run: runFromRow(released) };
  }
}

/** What a committed release tells subscribers: a run finished, or runnable now. */
function hintReleased(tx: WriteTx, runId: string, s: ReturnType<typeof releasedState>): void {
  if (TERMINAL_STATUSES.has(s.status)) tx.hint({ kind: "finished", runId });
  else if (s.readyAt !== null && s.readyAt <= tx.now) tx.hint({ kind: "runnable", runId });
}

/** The row of a run no one has written yet, as releasedState reads it: no cancel asked, no
 *  failed call, its first generation. */
const FRESH_RUN: ReleasedFrom = {
  cancel_requested: 0,
  reason: null,
  failed_calls: "[]",
  generation: 0,
};

const INSERT_RELEASED_RUN = newRunInsert(
  `${RUN_ROW_COLUMNS.filter((c) => c !== "epoch").join(", ")}, crash_unjudged`,
  "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '{}', ?, ?, ?, ?, NULL, NULL, 0, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?",
);

/** createReleasedRun with its release known before the run is written: the run is inserted
 *  as insertRun claimed and then releaseInTx under its first epoch would leave it, in ONE
 *  statement (not an insert, a read and an update, each touching the runs indexes; nor a
 *  read of the store's mark: insertNewRow), and returned as stored; undefined if the id
 *  exists (then nothing changes). `check`: the plain-payload guard's. */
export function insertReleasedRun(
  tx: WriteTx,
  run: NewRun,
  r: RunEnd,
  check?: (tx: ReadTx) => void,
): RunRecord | undefined {
  const limit = amountsJson(run.budgetLimit, () => `Budget limit of run "${run.id}"`);
  const s = releasedState(tx, { ...r, runId: run.id, epoch: 0 }, FRESH_RUN);
  const error = r.error ? errorJson(r.error) : null;
  const waitingFor = JSON.stringify(s.waitingFor);
  const failedCalls = JSON.stringify(s.failedCalls);
  const crashUnjudged = s.status === "paused" && r.crashUnjudged === true ? 1 : 0;
  const heldBy = s.heldFor?.workerId ?? null;
  const heldUntil = s.heldFor ? tx.now + s.heldFor.ms : null;
  // The record is built from the values bound here, as runFromRow reads them back.
  const epoch = insertNewRow(
    tx,
    INSERT_RELEASED_RUN,
    [
      run.id,
      run.workflow,
      run.version,
      s.status,
      s.reason,
      s.pausedFor,
      run.input,
      r.output ?? null,
      error,
      limit,
      run.parentId ?? null,
      s.readyAt,
      s.wakeAt,
      waitingFor,
      tx.now,
      tx.now,
      failedCalls,
      run.traceContext ?? null,
      run.handedInputDigest ?? null,
      heldBy,
      heldUntil,
      crashUnjudged,
    ],
    1,
    check,
  );
  if (epoch === undefined) return undefined;
  // Sent once the run exists (deliverEvent refuses nothing for a sender): as releaseInTx.
  for (const e of r.events ?? []) deliverEvent(tx, e);
  hintReleased(tx, run.id, s);
  return runFromRow({
    id: run.id,
    workflow: run.workflow,
    version: run.version,
    status: s.status,
    reason: s.reason,
    paused_for: s.pausedFor,
    input: run.input,
    output: r.output ?? null,
    error,
    budget_limit: limit,
    budget_spent: "{}",
    parent_id: run.parentId ?? null,
    ready_at: s.readyAt,
    wake_at: s.wakeAt,
    waiting_for: waitingFor,
    lease_owner: null,
    lease_until: null,
    epoch,
    generation: 0,
    cancel_requested: 0,
    created_at: tx.now,
    updated_at: tx.now,
    failed_calls: failedCalls,
    trace_context: run.traceContext ?? null,
    handed_input_digest: run.handedInputDigest ?? null,
    held_by: heldBy,
    held_until: heldUntil,
  });
}

/** What a release leaves the run as: the status asked for, unless a cancel was requested
 *  meanwhile (then canceled, and the events meant for that case are sent); no timer or wait
 *  for a finished run; ready now for a waiting run whose event is already there. */
/** What releasedState reads of the run's row. */
type ReleasedFrom = Pick<RunRow, "cancel_requested" | "reason" | "failed_calls" | "generation">;

function releasedState(tx: WriteTx, r: Release, row: ReleasedFrom) {
  let status = r.status;
  // Reasons are words for people, often built from an error's message: made storable
  // (lib/text.ts) as PostgreSQL makes them, so a NUL can never fail a release.
  let reason = r.reason == null ? null : displayText(r.reason);
  let readyAt = r.readyAt;
  let wakeAt = r.wakeAt ?? null;
  let waitingFor = r.waitingFor ?? [];
  let pausedFor = r.pausedFor ?? null;
  if (CANCELABLE_ON_RELEASE.has(status) && row.cancel_requested !== 0) {
    status = "canceled";
    reason = row.reason;
    for (const e of r.eventsIfCanceled ?? []) deliverEvent(tx, e);
  }
  if (TERMINAL_STATUSES.has(status)) {
    readyAt = null;
    wakeAt = null;
    waitingFor = [];
    pausedFor = null;
  } else if (status === "waiting" && hasAwaitedEvent(tx, r.runId, waitingFor)) {
    readyAt = readyAt === null ? tx.now : Math.min(readyAt, tx.now);
  }
  const failedCalls = JSON.parse(row.failed_calls) as RunRecord["failedCalls"];
  if (status === "failed") {
    for (const key of r.failedKeys ?? []) failedCalls.push({ key, generation: row.generation });
  }
  // A run ended for good is never claimed again: nothing to hold it from.
  const heldFor = status === "completed" || status === "canceled" ? undefined : r.heldFor;
  return { status, reason, readyAt, wakeAt, waitingFor, pausedFor, failedCalls, heldFor };
}

function hasAwaitedEvent(tx: WriteTx, runId: string, names: string[]): boolean {
  if (names.length === 0) return false;
  return (
    tx
      .prepare(
        `SELECT 1 FROM events WHERE run_id = ? AND consumed_by IS NULL
           AND name IN (SELECT value FROM json_each(?)) LIMIT 1`,
      )
      .get(runId, JSON.stringify(names)) !== undefined
  );
}

export function sendEvent(ctx: StoreContext, e: NewEvent): Promise<SendEventOutcome> {
  return ctx.write("sendEvent", (tx): SendEventOutcome => {
    const row = findRow(tx, e.runId);
    if (!row) return { ok: false, reason: "not-found" };
    if (e.idempotencyKey != null) {
      const sent = tx
        .prepare("SELECT * FROM events WHERE run_id = ? AND idempotency_key = ?")
        .get(e.runId, e.idempotencyKey) as EventRow | undefined;
      if (sent) {
        const event = eventFromRow(sent);
        return event.name === e.name && event.payload === e.payload
          ? { ok: true, event, duplicate: true }
          : { ok: false, reason: "key-conflict", event };
      }
    }
    if (TERMINAL_STATUSES.has(row.status)) {
      return { ok: false, reason: "finished", status: row.status };
    }
    if (e.maxEvents !== undefined || e.maxPending !== undefined) {
      // Events cairn sends itself ("cairn." names: a child's result) are not counted: a
      // parent with many children must not be refused its own events because of them.
      const counts = tx
        .prepare(
          `SELECT count(*) AS total, count(*) FILTER (WHERE consumed_by IS NULL) AS pending
             FROM events WHERE run_id = ? AND substr(name, 1, 6) <> 'cairn.'`,
        )
        .get(e.runId) as { total: number; pending: number };
      if (e.maxEvents !== undefined && counts.total >= e.maxEvents) {
        return { ok: false, reason: "limit", limit: "events", count: counts.total };
      }
      if (e.maxPending !== undefined && counts.pending >= e.maxPending) {
        return { ok: false, reason: "limit", limit: "pending", count: counts.pending };
      }
    }
    return { ok: true, event: storeEvent(tx, e), duplicate: false };
  });
}

export function requestCancel(
  ctx: StoreContext,
  runId: string,
  reasonGiven: string,
  p: { parentEvent?: { name: string; payload: string } } = {},
): Promise<CancelOutcome> {
  const reason = displayText(reasonGiven);
  return ctx.write("requestCancel", (tx): CancelOutcome => {
    const row = findRow(tx, runId);
    if (!row) return { state: "not-found" };
    if (row.status === "canceled") return { state: "canceled", run: runFromRow(row) };
    if (TERMINAL_STATUSES.has(row.status)) return { state: "finished", run: runFromRow(row) };
    if (row.status === "running") {
      // The first request's reason is the one the run ends with.
      tx.prepare(
        `UPDATE runs SET cancel_requested = 1, reason = ?, updated_at = ?
           WHERE id = ? AND cancel_requested = 0`,
      ).run(reason, tx.now, runId);
      tx.hint({ kind: "cancel", runId });
      return { state: "requested", run: mustGetRun(tx, runId) };
    }
    tx.prepare(
      `UPDATE runs SET status = 'canceled', reason = ?, paused_for = NULL, ready_at = NULL,
           wake_at = NULL, waiting_for = '[]', lease_owner = NULL, lease_until = NULL,
           updated_at = ?
         WHERE id = ?`,
    ).run(reason, tx.now, runId);
    tx.hint({ kind: "finished", runId });
    // The parent learns of it in this transaction (a parent gone or finished is skipped).
    if (p.parentEvent && row.parent_id !== null) {
      deliverEvent(tx, { runId: row.parent_id, ...p.parentEvent });
    }
    return { state: "canceled", run: mustGetRun(tx, runId) };
  });
}

export function resumeRun(
  ctx: StoreContext,
  runId: string,
  p: ResumeOptions,
): Promise<ResumeOutcome> {
  return ctx.write("resumeRun", (tx): ResumeOutcome => {
    const row = findRow(tx, runId);
    if (!row) return { ok: false, reason: "not-found" };
    if (row.status !== "paused" && row.status !== "failed") {
      return { ok: false, reason: "status", run: runFromRow(row) };
    }
    const parentStatus = row.parent_id === null ? undefined : findRow(tx, row.parent_id)?.status;
    if (parentStatus === "canceled") {
      return { ok: false, reason: "parent-canceled", run: runFromRow(row) };
    }
    if (parentStatus === "failed" && p.sentEnd !== undefined) {
      tx.prepare("DELETE FROM events WHERE run_id = ? AND name = ? AND consumed_by IS NULL").run(
        row.parent_id,
        p.sentEnd,
      );
    }
    const limit = { ...parseAmounts(row.budget_limit), ...(p.budgetLimit ?? {}) };
    tx.prepare(
      `UPDATE runs SET status = 'pending', reason = NULL, paused_for = NULL, error = NULL,
           ready_at = ?, wake_at = NULL, waiting_for = '[]', cancel_requested = 0,
           generation = generation + ?, budget_limit = ?, updated_at = ?
         WHERE id = ?`,
    ).run(
      tx.now,
      row.status === "failed" ? 1 : 0,
      amountsJson(limit, () => `Budget limit of run "${runId}"`),
      tx.now,
      runId,
    );
    tx.hint({ kind: "runnable", runId });
    return { ok: true, run: mustGetRun(tx, runId) };
  });
}

export function forkRun(
  ctx: StoreContext,
  p: {
    sourceId: string;
    run: NewRun;
    copy: Array<{ key: string; generation: number; unordered?: boolean; since?: number }>;
    sourceCreatedAt?: number;
  },
): Promise<{ run: RunRecord; created: boolean }> {
  return ctx.write("forkRun", (tx) => {
    const existing = findRun(tx, p.run.id);
    if (existing) return { run: existing, created: false };
    const source = findRow(tx, p.sourceId);
    if (!source) {
      throw runNotFound(p.sourceId, "nothing to fork");
    }
    if (p.sourceCreatedAt !== undefined && source.created_at !== p.sourceCreatedAt) {
      throw runNotFound(p.sourceId, FORK_SOURCE_REPLACED);
    }
    const wanted = new Map<string, number>(p.copy.map((c) => [c.key, c.generation]));
    const unordered = new Map(
      p.copy.filter((c) => c.unordered).map((c) => [c.key, c.since] as const),
    );
    const steps = (
      tx.prepare("SELECT * FROM steps WHERE run_id = ? ORDER BY seq").all(p.sourceId) as StepRow[]
    ).filter((s) => wanted.get(s.key) === s.generation);
    const keys = new Set(steps.map((s) => s.key));
    const attempts = (
      tx
        .prepare("SELECT * FROM attempts WHERE run_id = ? ORDER BY generation, id")
        .all(p.sourceId) as AttemptRow[]
    ).filter((a) => keys.has(a.key));
    const spent: Amounts = {};
    for (const r of [...steps, ...attempts]) addAmounts(spent, parseAmounts(r.spend));
    // A fork is created pending whatever it is given: a claim round takes it.
    insertRun(
      tx,
      { ...p.run, claimBy: undefined },
      amountsJson(spent, () => `Budget spent of run "${p.run.id}"`),
    );
    // The fork continues the source's generations: its copies keep theirs, by which a
    // replay orders the outcomes of a history a resume replaced (delivery.ts).
    tx.prepare(
      "UPDATE runs SET generation = (SELECT generation FROM runs WHERE id = ?) WHERE id = ?",
    ).run(p.sourceId, p.run.id);
    const forked = mustGetRun(tx, p.run.id);
    for (const s of steps) {
      const copy = { ...stepFromRow(s), runId: p.run.id };
      if (unordered.has(copy.key)) {
        copy.issuedAfter = null;
        copy.generation = unordered.get(copy.key) ?? forked.generation;
      }
      insertRow(tx.prepare, "steps", stepToRow(copy));
    }
    // The intents of copied child and approval calls: what they record of the child that
    // produced the copied result (its workflow, its input's digest), or of the request the
    // copied answer was given to (its digest), is what a replay checks the call against.
    // No other intent: one without a copied outcome would make the fork take up the
    // source's call (re-await its child) instead of executing the call anew.
    tx.prepare(
      `INSERT INTO intents (run_id, key, kind, name, data, created_at)
       SELECT ?, key, kind, name, data, created_at FROM intents
        WHERE run_id = ? AND kind IN ('child', 'approval')
          AND key IN (SELECT value FROM json_each(?))
        ORDER BY id`,
    ).run(p.run.id, p.sourceId, JSON.stringify([...keys]));
    // Attempts of every generation land in the fork's one generation, renumbered in order.
    const numbered = new Map<string, number>();
    for (const a of attempts) {
      const attempt = (numbered.get(a.key) ?? 0) + 1;
      numbered.set(a.key, attempt);
      const copy = {
        ...attemptFromRow(a),
        runId: p.run.id,
        generation: forked.generation,
        attempt,
      };
      insertRow(tx.prepare, "attempts", attemptToRow(copy));
    }
    // The fork holds the source's workspace objects from its creation: the checkpoints its
    // copied records name stay stored (and readable through the fork) whatever happens to
    // the source, even if retention deletes it before the fork first runs.
    tx.prepare(
      `INSERT INTO workspace_refs (run_id, hash)
       SELECT ?, hash FROM workspace_refs WHERE run_id = ? ON CONFLICT DO NOTHING`,
    ).run(p.run.id, p.sourceId);
    tx.hint({ kind: "runnable", runId: p.run.id });
    return { run: forked, created: true };
  });
}

/**
 * Pauses ready runs of versions no live worker serves. A running run whose lease expired
 * (its worker died) is included: its epoch moves on, so a worker that was only slow can
 * write nothing more, and a pending cancel request takes effect instead of the pause.
 */
export async function markUnserved(
  ctx: StoreContext,
  p: { served: string[]; graceMs: number; canceled?(runIds: string[]): void },
): Promise<number> {
  let canceled: string[] = [];
  const marked = await ctx.write("markUnserved", (tx) => {
    canceled = [];
    const served = new Set(p.served);
    // A running run is ready here only when its lease expired (readyAt = leaseUntil):
    // its worker is gone, and no live worker can take it over.
    const ready = tx
      .prepare(
        `SELECT id, workflow, version, cancel_requested FROM runs
         WHERE ready_at <= ? AND status IN ('pending', 'waiting', 'running')`,
      )
      .all(tx.now - p.graceMs) as Array<{
      id: string;
      workflow: string;
      version: string;
      cancel_requested: number;
    }>;
    let marked = 0;
    for (const r of ready) {
      const ref = `${r.workflow}@${r.version}`;
      if (served.has(ref)) continue;
      if (r.cancel_requested) {
        cancelUnserved(tx, r.id);
        canceled.push(r.id);
      } else pauseUnserved(tx, r.id, ref);
      marked += 1;
    }
    return marked;
  });
  if (canceled.length > 0) p.canceled?.(canceled);
  return marked;
}

function cancelUnserved(tx: WriteTx, runId: string): void {
  tx.prepare(
    `UPDATE runs SET status = 'canceled', paused_for = NULL, ready_at = NULL,
               epoch = epoch + 1, lease_owner = NULL, lease_until = NULL, updated_at = ?
             WHERE id = ?`,
  ).run(tx.now, runId);
  // A parent waiting for it wakes and reads its outcome (no event can be built here).
  tx.prepare(
    `UPDATE runs SET ready_at = ?, updated_at = ?
             WHERE status = 'waiting' AND id = (SELECT parent_id FROM runs WHERE id = ?)`,
  ).run(tx.now, tx.now, runId);
}

function pauseUnserved(tx: WriteTx, runId: string, ref: string): void {
  // readyAt is kept: a worker that serves the version later claims the run as it is. The
  // epoch moves on so a lost worker that comes back can write nothing. A running run (its
  // lease expired: its worker died) keeps that crash for its claimer to charge.
  tx.prepare(
    `UPDATE runs SET status = 'paused', paused_for = 'version', reason = ?,
               epoch = CASE WHEN status = 'running' THEN epoch + 1 ELSE epoch END,
               crash_unjudged = CASE WHEN status = 'running' THEN 1 ELSE crash_unjudged END,
               lease_owner = NULL, lease_until = NULL, updated_at = ?
             WHERE id = ?`,
  ).run(unservedReason(ref), tx.now, runId);
}
