// Run state transitions on PostgreSQL that are more than one statement: release, events,
// cancel, resume, fork, and pausing unserved versions. Each is one transaction that first
// locks the run row, so it serializes with claims, journal writes and other transitions of
// the same run, and then decides on the row as it is now.
//
// Statements that read other rows (e.g. "is there an unconsumed event for this wait") run
// AFTER the lock is taken: under READ COMMITTED each statement takes a fresh snapshot, so
// they see everything committed by whoever held the lock before (a sendEvent racing with a
// release to waiting either commits first and is seen, or waits for our lock and then sees
// the run waiting and wakes it). A lock and such a read in ONE statement would not.

import { randomUUID } from "node:crypto";
import { runNotFound, StoreError } from "../../errors.js";
import { addAmounts } from "../../lib/amounts.js";
import { displayText } from "../../lib/text.js";
import { errorJson } from "../error-json.js";
import {
  type Amounts,
  type CancelOutcome,
  keepsSentEnds,
  type NewEvent,
  type NewRun,
  type Release,
  type ReleaseOutcome,
  type ResumeOptions,
  type ResumeOutcome,
  type RunRecord,
  type RunStatus,
  type SendEventOutcome,
  type StoreHint,
  TERMINAL_STATUSES,
} from "../store.js";
import { FORK_SOURCE_REPLACED } from "../verb-arguments.js";
import { Rollback, type Tx } from "./connection.js";
import { featureTables } from "./feature-tables.js";
import { valueRefused } from "./journal-writes.js";
import { completeLone, isLoneCompletion } from "./lone-release.js";
import { plainRefused } from "./plain-triggers.js";
import {
  type EventRow,
  RUN_COLUMNS_BUT_PAYLOADS,
  type RunRow,
  type RunRowButPayloads,
  toEvent,
  toReleasedRun,
  toRun,
} from "./rows.js";
import { hintPayload, insertRunSql, nowSql, publish, type StoreContext } from "./sql.js";
import { inDistinctRounds, isolatingFailures } from "./turn-batch.js";

/** Locks the run's row and reads `columns` of it (all of them, unless the caller needs less:
 *  a run's input may be megabytes). */
async function lockRun<R extends Partial<RunRow> = RunRow>(
  tx: Tx,
  ctx: StoreContext,
  runId: string,
  columns = "*",
): Promise<R | undefined> {
  const r = await tx.query<R>(
    `SELECT ${columns} FROM ${ctx.t.runs} WHERE id = $1 FOR NO KEY UPDATE`,
    [runId],
  );
  return r.rows[0];
}

/** Stores an event for a locked-or-lockable run and wakes it if it waits for that name.
 *  Shared by sendEvent and by the events a transition sends another run (deliverEvent). */
async function insertEvent(
  tx: Tx,
  ctx: StoreContext,
  e: NewEvent,
  hints: StoreHint[],
  token: string | null = null,
  sentEnd = false,
): Promise<SendEventOutcome> {
  const { t } = ctx;
  // The row lock also orders events per run: seqs of one run increase in commit order.
  const run = await lockRun<Pick<RunRow, "status" | "waiting_for">>(
    tx,
    ctx,
    e.runId,
    "status, waiting_for",
  );
  if (!run) return { ok: false, reason: "not-found" };
  if (token !== null && tx.mayHaveCommitted) {
    // An earlier try of this call whose commit's answer was lost stored it: its answer.
    const own = await tx.query<EventRow>(
      `SELECT * FROM ${t.events} WHERE run_id = $1 AND send_token = $2`,
      [e.runId, token],
    );
    if (own.rows[0]) return { ok: true, event: toEvent(own.rows[0]), duplicate: false };
  }
  if (e.idempotencyKey != null) {
    // After the lock: a send with the same key that committed before is seen here.
    const sent = await tx.query<EventRow>(
      `SELECT * FROM ${t.events} WHERE run_id = $1 AND idempotency_key = $2`,
      [e.runId, e.idempotencyKey],
    );
    const row = sent.rows[0];
    if (row) {
      const event = toEvent(row);
      return event.name === e.name && event.payload === e.payload
        ? { ok: true, event, duplicate: true }
        : { ok: false, reason: "key-conflict", event };
    }
  }
  const status = run.status as RunStatus;
  if (TERMINAL_STATUSES.has(status) && !(sentEnd && keepsSentEnds(status))) {
    return { ok: false, reason: "finished", status };
  }
  if (e.maxEvents !== undefined || e.maxPending !== undefined) {
    // Under the run's row lock: concurrent senders are counted one after the other. Events
    // cairn sends itself ("cairn." names: a child's result) are not counted: a parent with
    // many children must not be refused its own events because of them.
    const c = await tx.query<{ total: string; pending: string }>(
      `SELECT count(*) AS total, count(*) FILTER (WHERE consumed_by IS NULL) AS pending
         FROM ${t.events} WHERE run_id = $1 AND substr(name, 1, 6) <> 'cairn.'`,
      [e.runId],
    );
    const total = Number(c.rows[0]?.total ?? 0);
    const pending = Number(c.rows[0]?.pending ?? 0);
    if (e.maxEvents !== undefined && total >= e.maxEvents) {
      return { ok: false, reason: "limit", limit: "events", count: total };
    }
    if (e.maxPending !== undefined && pending >= e.maxPending) {
      return { ok: false, reason: "limit", limit: "pending", count: pending };
    }
  }
  const clockParam = ctx.clockParam();
  const ins = await tx.query<EventRow>(
    `INSERT INTO ${t.events} (run_id, name, payload, created_at, idempotency_key, send_token)
      VALUES ($2, $3, $4, ${nowSql(1)}, $5, $6) RETURNING *`,
    [clockParam, e.runId, e.name, e.payload, e.idempotencyKey ?? null, token],
  );
  if (status === "waiting" && (run.waiting_for ?? []).includes(e.name)) {
    await tx.query(
      `UPDATE ${t.runs} r SET
          ready_at = CASE WHEN r.ready_at IS NOT NULL AND r.ready_at <= c.now THEN r.ready_at
                          ELSE c.now END,
          updated_at = c.now
        FROM (SELECT ${nowSql(1)} AS now) c WHERE r.id = $2`,
      [clockParam, e.runId],
    );
    hints.push({ kind: "runnable", runId: e.runId });
  } else if (status === "running") {
    // Its execution (in whichever process) looks at its events at once, not at its
    // worker's next poll: a child's result for a parent whose other branch runs a step.
    hints.push({ kind: "event", runId: e.runId });
  }
  const event = ins.rows[0];
  if (!event) throw new Error("INSERT ... RETURNING returned no row");
  return { ok: true, event: toEvent(event), duplicate: false };
}

/** An event a transition sends to another run (a child's end for its parent): dropped when
 *  that run is gone or has ended for good (completed, canceled), which has no reader for
 *  it; kept for a failed run, which a resume executes again (keepsSentEnds). */
function deliverEvent(tx: Tx, ctx: StoreContext, e: NewEvent, hints: StoreHint[]) {
  return insertEvent(tx, ctx, e, hints, null, true);
}

/**
 * The store assigns the seq, so a repeat of the INSERT would store a second event: every
 * try of the call writes the call's token with it, and a retry after a commit whose answer
 * was lost first looks for the event that try stored (insertEvent).
 */
export function sendEvent(ctx: StoreContext, e: NewEvent): Promise<SendEventOutcome> {
  const token = randomUUID();
  return ctx.db.transaction("sendEvent", "own-write", async (tx) => {
    const hints: StoreHint[] = [];
    const outcome = await insertEvent(tx, ctx, e, hints, token);
    await publish(tx, ctx.channel, hints);
    return outcome;
  });
}

/**
 * A release with events (a child's result for its parent), as one transaction: the run is
 * released by release_runs, deciding as for a group (releaseGroup, below), then its events
 * are stored in the same transaction.
 * Fenced by epoch, and only while the run is running. Idempotent in effect: if an earlier try of this call may have committed
 * (connection lost during COMMIT) and the run is no longer running at our epoch, that try
 * did the release; it is not applied twice (its events would be stored twice). The run is
 * locked first to see that: release_runs would answer such a run as found, which looks the
 * same as one it has just released.
 */
export function releaseRun(ctx: StoreContext, r: Release): Promise<ReleaseOutcome> {
  return ctx.db.transaction("releaseRun", "idempotent", async (tx) => {
    const cur = await lockRun<RunRowButPayloads & { output: string | null }>(
      tx,
      ctx,
      r.runId,
      `${RUN_COLUMNS_BUT_PAYLOADS}, output`,
    );
    if (!cur || Number(cur.epoch) !== r.epoch) {
      throw new Rollback<ReleaseOutcome>({ ok: false, reason: "lease-lost" });
    }
    if (tx.mayHaveCommitted && cur.status !== "running") {
      return { ok: true, run: toReleasedRun(cur, cur.output) };
    }
    // Released already under this epoch (a hand-back after the release that ended it): a
    // finished run is never rewritten, as release_runs (migration 17) refuses it too.
    if (cur.status !== "running") {
      throw new Rollback<ReleaseOutcome>({ ok: false, reason: "lease-lost" });
    }
    const [released] = await releaseRows(tx, ctx, [r], false);
    if (!released?.ok) throw new Error("release_runs fenced out a run whose lock it shares");
    const hints: StoreHint[] = [];
    // Events for unknown or finished runs are dropped: the release itself must not fail
    // because, say, the parent was canceled meanwhile.
    for (const e of r.events ?? []) await deliverEvent(tx, ctx, e, hints);
    if (released.run.status === "canceled" && r.status !== "canceled") {
      for (const e of r.eventsIfCanceled ?? []) await deliverEvent(tx, ctx, e, hints);
    }
    await publish(tx, ctx.channel, hints);
    return released;
  });
}

/** A release with no events to store (every release but a child's) goes in a group. */
export function hasNoEvents(r: Release): boolean {
  return !r.events?.length && !r.eventsIfCanceled?.length;
}

/**
 * Releases without events asked for in one turn (TurnBatch in postgres-store.ts), made by
 * the schema's release_runs function (migration 13) in one statement and one commit. A run named twice goes
 * in a second statement after the first. Should PostgreSQL refuse a value of one release
 * (valueRefused: say a readyAt too large for its column, or a status its CHECK refuses),
 * or its triggers a plain payload (plainRefused: a keyless process that has not yet read a
 * mark another wrote), the statement rolled back as a whole, so each is sent again alone
 * and only that one fails.
 */
export function releaseGroup(
  ctx: StoreContext,
  releases: Release[],
): Promise<Array<PromiseSettledResult<ReleaseOutcome>>> {
  return inDistinctRounds(
    releases,
    (r) => r.runId,
    (round) =>
      isolatingFailures(
        round,
        (rs) => releaseTogether(ctx, rs),
        (err) => valueRefused(err) !== undefined || plainRefused(err),
      ),
  );
}

/** One release_runs statement; the runs' ids are distinct. A lone completion on the
 *  store's own pool is one prepared UPDATE first (lone-release.ts); release_runs decides
 *  when it updates nothing, and on a retry that may find its own earlier commit. */
function releaseTogether(ctx: StoreContext, releases: Release[]): Promise<ReleaseOutcome[]> {
  const lone =
    releases.length === 1 && ctx.db.prepares && isLoneCompletion(releases[0]!)
      ? releases[0]
      : undefined;
  return ctx.db.statements("releaseRun", "idempotent", async (tx) => {
    if (lone !== undefined && !tx.mayHaveCommitted) {
      const done = await completeLone(tx, ctx, lone);
      if (done !== undefined) return [done];
    }
    return releaseRows(tx, ctx, releases, tx.mayHaveCommitted);
  });
}

/** Calls release_runs for `releases` (distinct runs) and reads its answer, one per run. */
async function releaseRows(
  tx: Tx,
  ctx: StoreContext,
  releases: Release[],
  mayHaveCommitted: boolean,
): Promise<ReleaseOutcome[]> {
  // Neither payload comes back: no release changes the input, and a release that updated
  // the run wrote the output sent. Only a retry ($3) may find its earlier try's release,
  // whose output it reads (RUN_COLUMNS_BUT_PAYLOADS).
  const res = await tx.query<RunRowButPayloads & { output: string | null }>(
    `SELECT ${RUN_COLUMNS_BUT_PAYLOADS}, CASE WHEN $3 THEN output END AS output
      FROM ${ctx.t.releaseRuns}($1, $2::jsonb, $3, $4)`,
    [ctx.clockParam(), JSON.stringify(releases.map(releaseEntry)), mayHaveCommitted, ctx.channel],
    "cairn_release_runs",
  );
  const rows = new Map(res.rows.map((row) => [row.id, row]));
  return releases.map((r): ReleaseOutcome => {
    const row = rows.get(r.runId);
    if (!row) {
      throw new StoreError(
        `releaseRun: PostgreSQL (${ctx.description}) answered no row for run "${r.runId}"; ` +
          "is the schema's release_runs function the one this cairn created?",
      );
    }
    // A row with only the id: the epoch was not the caller's.
    if (row.status === null) return { ok: false, reason: "lease-lost" };
    return {
      ok: true,
      run: toReleasedRun(row, mayHaveCommitted ? row.output : (r.output ?? null)),
    };
  });
}

/** A release as release_runs takes it (see its migration for the fields). */
function releaseEntry(r: Release): Record<string, unknown> {
  return {
    run_id: r.runId,
    epoch: r.epoch,
    status: r.status,
    // Reasons are words for people, often built from an error's message: made storable
    // (lib/text.ts), so a NUL in a message can never fail the release.
    reason: r.reason == null ? null : displayText(r.reason),
    paused_for: r.pausedFor ?? null,
    output: r.output ?? null,
    error: r.error == null ? null : errorJson(r.error),
    // Rounded up, to PostgreSQL's whole milliseconds: a time rounded down (a sleep of 0.3 ms,
    // a fractional backoff) made the run runnable before its time, so each claim found it
    // not due and released it again, claimed over and over until the clock got there.
    ready_at: r.readyAt === null ? null : Math.ceil(r.readyAt),
    wake_at: r.wakeAt == null ? null : Math.ceil(r.wakeAt),
    waiting_for: r.waitingFor ?? [],
    failed_keys: r.failedKeys ?? [],
    crash_unjudged: r.crashUnjudged === true,
    held_by: r.heldFor?.workerId ?? null,
    held_ms: r.heldFor === undefined ? null : Math.ceil(r.heldFor.ms),
    finished_hint: hintPayload({ kind: "finished", runId: r.runId }),
    runnable_hint: hintPayload({ kind: "runnable", runId: r.runId }),
  };
}

/** Idempotent: a repeat finds the run canceled, or its cancel already requested. */
export function requestCancel(
  ctx: StoreContext,
  runId: string,
  reasonGiven: string,
  p: { parentEvent?: { name: string; payload: string } } = {},
): Promise<CancelOutcome> {
  const reason = displayText(reasonGiven);
  return ctx.db.transaction("requestCancel", "idempotent", async (tx) => {
    const { t } = ctx;
    const cur = await lockRun(tx, ctx, runId);
    if (!cur) return { state: "not-found" } as const;
    const status = cur.status as RunStatus;
    if (status === "canceled") return { state: "canceled", run: toRun(cur) } as const;
    if (TERMINAL_STATUSES.has(status)) return { state: "finished", run: toRun(cur) } as const;
    if (status === "running") {
      // The owner learns of it from renewLeases and releases; the first reason is kept.
      const u = await tx.query<RunRow>(
        `UPDATE ${t.runs} SET cancel_requested = true,
            reason = CASE WHEN cancel_requested THEN reason ELSE $3 END,
            updated_at = ${nowSql(1)}
          WHERE id = $2 RETURNING *`,
        [ctx.clockParam(), runId, reason],
      );
      await publish(tx, ctx.channel, [{ kind: "cancel", runId }]);
      return { state: "requested", run: toRun(mustRow(u.rows[0])) } as const;
    }
    const u = await tx.query<RunRow>(
      `UPDATE ${t.runs} SET status = 'canceled', reason = $3, paused_for = NULL,
          ready_at = NULL, wake_at = NULL, waiting_for = '{}',
          lease_owner = NULL, lease_until = NULL, updated_at = ${nowSql(1)}
        WHERE id = $2 RETURNING *`,
      [ctx.clockParam(), runId, reason],
    );
    const hints: StoreHint[] = [{ kind: "finished", runId }];
    // The parent learns of it in this transaction (a parent gone or finished is skipped).
    // Locks child then parent, the order releaseRun takes them in.
    if (p.parentEvent && cur.parent_id !== null) {
      await deliverEvent(tx, ctx, { runId: cur.parent_id, ...p.parentEvent }, hints);
    }
    await publish(tx, ctx.channel, hints);
    return { state: "canceled", run: toRun(mustRow(u.rows[0])) } as const;
  });
}

/** Idempotent in effect: if an earlier try may have committed and the run is now pending,
 *  that try resumed it (a failed run's generation is not incremented twice). */
export function resumeRun(
  ctx: StoreContext,
  runId: string,
  p: ResumeOptions,
): Promise<ResumeOutcome> {
  return ctx.db.transaction("resumeRun", "idempotent", async (tx) => {
    const cur = await lockRun(tx, ctx, runId);
    if (!cur) return { ok: false, reason: "not-found" } as const;
    if (tx.mayHaveCommitted && cur.status === "pending") return { ok: true, run: toRun(cur) };
    if (cur.status !== "paused" && cur.status !== "failed") {
      return { ok: false, reason: "status", run: toRun(cur) } as const;
    }
    if (cur.parent_id !== null) {
      // FOR SHARE: a cancel of the parent under way is waited for, so its cascade either
      // finds this child resumed (and cancels it) or this resume finds the parent canceled.
      const parent = await tx.query<{ status: string }>(
        `SELECT status FROM ${ctx.t.runs} WHERE id = $1 FOR SHARE`,
        [cur.parent_id],
      );
      if (parent.rows[0]?.status === "canceled") {
        return { ok: false, reason: "parent-canceled", run: toRun(cur) } as const;
      }
      // Its end kept for a failed parent is no longer its outcome (ResumeOptions.sentEnd).
      // The parent, locked FOR SHARE, stays failed: no execution of it reads its events.
      if (parent.rows[0]?.status === "failed" && p.sentEnd !== undefined) {
        await tx.query(
          `DELETE FROM ${ctx.t.events} WHERE run_id = $1 AND name = $2 AND consumed_by IS NULL`,
          [cur.parent_id, p.sentEnd],
        );
      }
    }
    const failed = cur.status === "failed";
    const u = await tx.query<RunRow>(
      `UPDATE ${ctx.t.runs} r SET status = 'pending', reason = NULL, paused_for = NULL,
          error = CASE WHEN $3 THEN NULL ELSE r.error END,
          generation = r.generation + CASE WHEN $3 THEN 1 ELSE 0 END,
          budget_limit = r.budget_limit || $4::jsonb,
          ready_at = c.now, wake_at = NULL, waiting_for = '{}', cancel_requested = false,
          lease_owner = NULL, lease_until = NULL, updated_at = c.now
        FROM (SELECT ${nowSql(1)} AS now) c
        WHERE r.id = $2 RETURNING r.*`,
      [ctx.clockParam(), runId, failed, JSON.stringify(p.budgetLimit ?? {})],
    );
    await publish(tx, ctx.channel, [{ kind: "runnable", runId }]);
    return { ok: true, run: toRun(mustRow(u.rows[0])) } as const;
  });
}

/**
 * A repeat after a lost COMMIT would find the id taken and answer created=false for a fork
 * that did happen: the fork's row carries the call's token (create_token), by which a retry
 * finds the fork its lost try made and answers created=true.
 */
export function forkRun(
  ctx: StoreContext,
  p: {
    sourceId: string;
    run: NewRun;
    copy: Array<{ key: string; generation: number; unordered?: boolean; since?: number }>;
    sourceCreatedAt?: number;
  },
): Promise<{ run: RunRecord; created: boolean }> {
  // The call's token, the same on every try: a retry after a commit whose answer was lost
  // finds the fork that try made by it, and answers created=true as that try would have.
  const token = randomUUID();
  return ctx.db.transaction("forkRun", "own-write", async (tx) => {
    const { t } = ctx;
    if (tx.mayHaveCommitted) {
      // Before the source is looked at: it may be gone by now (retention), the fork not.
      const own = await tx.query<RunRow>(
        `SELECT * FROM ${t.runs} WHERE id = $1 AND create_token = $2`,
        [p.run.id, token],
      );
      if (own.rows[0]) return { run: toRun(own.rows[0]), created: true };
    }
    // FOR SHARE: a deleteRuns of the source (FOR UPDATE) waits for the fork, and then sees
    // the fork's refs to the source's workspace objects; or the fork finds the source gone.
    const src = await tx.query<{ generation: number; created_at: string }>(
      `SELECT generation, created_at FROM ${t.runs} WHERE id = $1 FOR SHARE`,
      [p.sourceId],
    );
    if (!src.rows[0]) {
      throw runNotFound(p.sourceId, "nothing to fork");
    }
    // The run read to choose the copies, not another under its id since (retention).
    if (p.sourceCreatedAt !== undefined && Number(src.rows[0].created_at) !== p.sourceCreatedAt) {
      throw runNotFound(p.sourceId, FORK_SOURCE_REPLACED);
    }
    const clockParam = ctx.clockParam();
    const ins = await tx.query<RunRow>(insertRunSql(t), [
      clockParam,
      p.run.id,
      p.run.workflow,
      p.run.version,
      p.run.input,
      JSON.stringify(p.run.budgetLimit ?? {}),
      p.run.parentId ?? null,
      p.run.traceContext ?? null,
      p.run.handedInputDigest ?? null,
      token,
    ]);
    const inserted = ins.rows[0];
    if (!inserted) {
      const existing = await tx.query<RunRow>(`SELECT * FROM ${t.runs} WHERE id = $1`, [p.run.id]);
      throw new Rollback({ run: toRun(mustRow(existing.rows[0])), created: false });
    }
    // The fork continues the source's generations: its copies keep theirs, by which a
    // replay orders the outcomes of a history a resume replaced (delivery.ts).
    const created = { ...inserted, generation: src.rows[0].generation };
    await tx.query(`UPDATE ${t.runs} SET generation = $2 WHERE id = $1`, [
      p.run.id,
      created.generation,
    ]);
    const keys = p.copy.map((c) => c.key);
    const generations = p.copy.map((c) => c.generation);
    const unordered = p.copy.map((c) => c.unordered === true);
    const since = p.copy.map((c) => (c.unordered ? (c.since ?? null) : null));
    const steps = await tx.query<{ key: string; spend: Amounts }>(
      `INSERT INTO ${t.steps} (run_id, key, generation, seq, name, kind, outcome, result, error,
          spend, attempt, started_at, completed_at, delivery, issued_after, issued_late, reconciled)
        SELECT $1, s.key,
          CASE WHEN c.unordered THEN coalesce(c.since, $5) ELSE s.generation END, s.seq, s.name, s.kind, s.outcome, s.result, s.error, s.spend,
          s.attempt, s.started_at, s.completed_at, s.delivery,
          CASE WHEN c.unordered THEN NULL ELSE s.issued_after END, s.issued_late, s.reconciled
        FROM ${t.steps} s
          JOIN unnest($3::text[], $4::integer[], $6::boolean[], $7::integer[])
            AS c(key, generation, unordered, since)
            ON c.key = s.key AND c.generation = s.generation
        WHERE s.run_id = $2
        RETURNING key, spend`,
      [p.run.id, p.sourceId, keys, generations, created.generation, unordered, since],
    );
    // The intents of copied child and approval calls: what they record of the child that
    // produced the copied result (its workflow, its input's digest), or of the request the
    // copied answer was given to (its digest), is what a replay checks the call against.
    // No other intent: one without a copied outcome would make the fork take up the
    // source's call (re-await its child) instead of executing the call anew.
    await tx.query(
      `INSERT INTO ${t.intents} (run_id, key, kind, name, data, created_at)
        SELECT $1, i.key, i.kind, i.name, i.data, i.created_at FROM ${t.intents} i
        WHERE i.run_id = $2 AND i.kind IN ('child', 'approval') AND i.key = ANY($3::text[])`,
      [p.run.id, p.sourceId, steps.rows.map((r) => r.key)],
    );
    // Attempts of every generation of the copied keys land in the fork's one generation,
    // renumbered in order.
    const attempts = await tx.query<{ spend: Amounts }>(
      `INSERT INTO ${t.attempts} (run_id, key, generation, attempt, started_at, ended_at,
          error, spend, retry_at)
        SELECT $1, a.key, $4,
          row_number() OVER (PARTITION BY a.key ORDER BY a.generation, a.attempt),
          a.started_at, a.ended_at, a.error, a.spend, a.retry_at
        FROM ${t.attempts} a
        WHERE a.run_id = $2 AND a.key = ANY($3::text[])
        RETURNING spend`,
      [p.run.id, p.sourceId, keys, created.generation],
    );
    // The fork holds the source's workspace objects from its creation: the checkpoints its
    // copied records name stay stored (and readable through the fork) whatever happens to
    // the source, even if retention deletes it before the fork first runs.
    await tx.query(
      `INSERT INTO ${featureTables(t).workspaceRefs} (run_id, hash)
        SELECT $1, hash FROM ${featureTables(t).workspaceRefs} WHERE run_id = $2
        ON CONFLICT DO NOTHING`,
      [p.run.id, p.sourceId],
    );
    let spent: Amounts = {};
    for (const row of [...steps.rows, ...attempts.rows]) spent = addAmounts(spent, row.spend);
    const u = await tx.query<RunRow>(
      `UPDATE ${t.runs} SET budget_spent = $2::jsonb WHERE id = $1 RETURNING *`,
      [p.run.id, JSON.stringify(spent)],
    );
    await publish(tx, ctx.channel, [{ kind: "runnable", runId: p.run.id }]);
    return { run: toRun(mustRow(u.rows[0])), created: true };
  });
}

/**
 * Pauses ready runs of versions no live worker serves. A running run whose lease expired
 * (its worker died) is included: its epoch moves on, so a worker that was only slow can
 * write nothing more, and a pending cancel request takes effect instead of the pause; it
 * keeps its worker's crash for its claimer to charge (crash_unjudged, migration 18).
 * Rows locked by someone else are skipped: the next sweep sees them. Idempotent.
 */
export async function markUnserved(
  ctx: StoreContext,
  p: { served: string[]; graceMs: number; canceled?(runIds: string[]): void },
): Promise<number> {
  const { t } = ctx;
  let canceled: string[] = [];
  // The runs an earlier try canceled: when its COMMIT's answer was lost it may have
  // committed, and the retry finds them canceled already (not in its RETURNING).
  let canceledBefore: string[] = [];
  // One transaction: a retry after a lost COMMIT finds the runs already paused or canceled
  // and wakes no parent, so the wake must have committed with the cancel (as two autocommit
  // statements, a parent waiting for a child canceled here could wait forever).
  const marked = await ctx.db.transaction("markUnserved", "idempotent", async (tx) => {
    canceledBefore = [...new Set([...canceledBefore, ...canceled])];
    canceled = [];
    const r = await tx.query(
      `WITH c AS (SELECT ${nowSql(1)} AS now),
      l AS (
        SELECT r.id FROM ${t.runs} r
        -- Ready runs that are not running by runs_ready_idle, running ones (leased) by
        -- status (runs_status_created): migration 26 left running runs out of the first.
        -- now as a scalar, which an index scan can bound ready_at by (as the claim's).
        WHERE ((r.ready_at <= (SELECT now FROM c) - $2::bigint
                AND r.status IN ('pending', 'waiting'))
            OR (r.status = 'running' AND r.ready_at <= (SELECT now FROM c) - $2::bigint))
          AND NOT ((r.workflow || '@' || r.version) = ANY($3::text[]))
        ORDER BY r.id
        FOR NO KEY UPDATE OF r SKIP LOCKED
      )
    UPDATE ${t.runs} r SET
        status = CASE WHEN r.cancel_requested THEN 'canceled' ELSE 'paused' END,
        paused_for = CASE WHEN r.cancel_requested THEN NULL ELSE 'version' END,
        reason = CASE WHEN r.cancel_requested THEN r.reason
                      ELSE 'no live worker has ' || r.workflow || '@' || r.version END,
        ready_at = CASE WHEN r.cancel_requested THEN NULL ELSE r.ready_at END,
        epoch = CASE WHEN r.status = 'running' THEN r.epoch + 1 ELSE r.epoch END,
        crash_unjudged = CASE WHEN r.status = 'running' THEN true ELSE r.crash_unjudged END,
        lease_owner = NULL, lease_until = NULL, updated_at = c.now
      FROM l, c WHERE r.id = l.id
      RETURNING r.id, r.status, r.parent_id`,
      [ctx.clockParam(), Math.round(p.graceMs), p.served],
    );
    // Parents waiting for a child canceled here wake and read its outcome (no event can be
    // built here).
    const rows = r.rows as Array<{ id: string; status: string; parent_id: string | null }>;
    canceled = rows.filter((row) => row.status === "canceled").map((row) => row.id);
    if (tx.mayHaveCommitted && canceledBefore.length > 0) {
      // Reported again (the cascade is idempotent) rather than never: their children would
      // be left running.
      const done = await tx.query<{ id: string }>(
        `SELECT id FROM ${t.runs} WHERE status = 'canceled' AND id = ANY($1::text[])`,
        [canceledBefore],
      );
      for (const row of done.rows) if (!canceled.includes(row.id)) canceled.push(row.id);
    }
    const parents = rows
      .filter((row) => row.status === "canceled" && row.parent_id !== null)
      .map((row) => row.parent_id as string);
    if (parents.length > 0) {
      await tx.query(
        `UPDATE ${t.runs} SET ready_at = ${nowSql(1)}, updated_at = ${nowSql(1)}
        WHERE status = 'waiting' AND id = ANY($2::text[])`,
        [ctx.clockParam(), parents],
      );
    }
    return r.rowCount ?? 0;
  });
  if (canceled.length > 0) p.canceled?.(canceled);
  return marked;
}

function mustRow<T>(row: T | undefined): T {
  if (row === undefined) throw new Error("a statement on a locked run returned no row");
  return row;
}
