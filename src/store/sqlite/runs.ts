// Runs as records on SQLite: creating one, reading one, listing them, and a run's events.

import { TERMINAL_STATUS_LIST } from "../status-sql.js";
import type { EventRecord, NewRun, RunEnd, RunFilter, RunRecord, RunStatus } from "../store.js";
import { pageCount } from "../verb-arguments.js";
import { type EventRow, eventFromRow, type RunRow, runFromRow } from "./rows.js";
import { insertReleasedRun } from "./run-control.js";
import {
  findRun,
  insertRun,
  mustGetRun,
  type ReadTx,
  RUN_COLUMNS,
  type StoreContext,
} from "./sql.js";

/** `check`: the plain-payload guard's, run in the transaction (insertNewRow: where the store
 *  is unmarked, inside the insert itself). */
export function createRun(
  ctx: StoreContext,
  run: NewRun,
  check?: (tx: ReadTx) => void,
): Promise<{ run: RunRecord; created: boolean }> {
  return ctx.writeGrouped("createRun", (tx) => {
    const inserted = insertRun(tx, run, "{}", check);
    // Created claimed, it is leased: no other worker needs to hear of it.
    if (inserted && !run.claimBy) tx.hint({ kind: "runnable", runId: run.id });
    return inserted
      ? { run: inserted, created: true }
      : { run: mustGetRun(tx, run.id), created: false };
  });
}

/** createRun claimed, and in the same transaction the release `end()` gives of the run it
 *  creates, if any (Store.createReleasedRun): a run whose workflow ended before it needed a
 *  record costs one commit, and one statement (insertReleasedRun). `end` is asked before
 *  the run is written; an id found taken is answered as createRun answers it, that answer
 *  unused. */
export function createReleasedRun(
  ctx: StoreContext,
  run: NewRun,
  end: (tx: ReadTx) => RunEnd | undefined,
  check?: (tx: ReadTx) => void,
): Promise<{ run: RunRecord; created: boolean }> {
  return ctx.writeGrouped("createRun", (tx) => {
    const release = end(tx);
    const inserted =
      release === undefined
        ? insertRun(tx, run, "{}", check)
        : insertReleasedRun(tx, run, release, check);
    return inserted
      ? { run: inserted, created: true }
      : { run: mustGetRun(tx, run.id), created: false };
  });
}

/** Every status a run can have (RunStatus: the compiler holds the two equal). */
const RUN_STATUSES = Object.keys({
  pending: true,
  running: true,
  waiting: true,
  paused: true,
  completed: true,
  failed: true,
  canceled: true,
} satisfies Record<RunStatus, true>) as RunStatus[];

export function getRun(ctx: StoreContext, id: string): Promise<RunRecord | undefined> {
  return ctx.read("getRun", (tx) => findRun(tx, id));
}

export function listRuns(ctx: StoreContext, filter: RunFilter): Promise<RunRecord[]> {
  return ctx.read("listRuns", (tx) => {
    const where: string[] = [];
    const params: Array<string | number> = [];
    if (filter.status !== undefined) {
      if (Array.isArray(filter.status)) {
        if (filter.status.length === 0) return [];
        where.push("status IN (SELECT value FROM json_each(?))");
        params.push(JSON.stringify(filter.status));
      } else {
        where.push("status = ?");
        params.push(filter.status);
      }
    }
    if (filter.workflow !== undefined) {
      where.push("workflow = ?");
      params.push(filter.workflow);
    }
    if (filter.version !== undefined) {
      where.push("version = ?");
      params.push(filter.version);
    }
    if (filter.idContains !== undefined) {
      // instr, not LIKE: the text is taken literally (no % or _ wildcards to escape).
      where.push("instr(id, ?) > 0");
      params.push(filter.idContains);
    }
    if (filter.waitingForEvent) where.push("status = 'waiting' AND waiting_for <> '[]'");
    if (filter.waitingForEventPrefix !== undefined) {
      where.push(
        "status = 'waiting' AND EXISTS (SELECT 1 FROM json_each(runs.waiting_for) w " +
          "WHERE substr(w.value, 1, length(?)) = ?)",
      );
      params.push(filter.waitingForEventPrefix, filter.waitingForEventPrefix);
    }
    if (filter.parentId !== undefined) {
      where.push("parent_id = ?");
      params.push(filter.parentId);
    }
    if (filter.finishedBefore !== undefined) {
      where.push(`status IN (${TERMINAL_STATUS_LIST}) AND updated_at < ?`);
      params.push(filter.finishedBefore);
    }
    if (filter.before !== undefined) {
      // A row value: a range of an index by (created_at, id), where one is searched.
      where.push("(created_at, id) < (?, ?)");
      params.push(filter.before.createdAt, filter.before.id);
    }
    // Only fixed fragments are concatenated; every value is a bound parameter.
    let sql: string;
    if (
      filter.status === undefined &&
      !filter.waitingForEvent &&
      filter.waitingForEventPrefix === undefined &&
      filter.finishedBefore === undefined &&
      filter.workflow === undefined &&
      filter.parentId === undefined
    ) {
      // No index of the filter's own (migration 18 dropped runs_created, which a run's every
      // create wrote a page of for these lists alone): the runs of each status in order, by
      // runs_status_created, merged (SQLite reads each arm only as far as the merge takes).
      const rest = where.length > 0 ? ` AND ${where.join(" AND ")}` : "";
      const arms = RUN_STATUSES.map(
        (s) => `SELECT ${RUN_COLUMNS} FROM runs WHERE status = '${s}'${rest}`,
      );
      sql = `${arms.join(" UNION ALL ")} ORDER BY created_at DESC, id DESC LIMIT ?`;
      const each = params.splice(0);
      for (const _ of RUN_STATUSES) params.push(...each);
    } else {
      sql =
        `SELECT ${RUN_COLUMNS} FROM runs` +
        (where.length > 0 ? ` WHERE ${where.join(" AND ")}` : "") +
        " ORDER BY created_at DESC, id DESC LIMIT ?";
    }
    // As PostgreSQL's store takes a limit (pageCount): a fraction floored, one below 0 lists
    // none (bound as given, SQLite's LIMIT read -1 as every run and 2.5 as a datatype
    // mismatch).
    params.push(filter.limit === undefined ? -1 : pageCount(filter.limit));
    return (tx.prepare(sql).all(...params) as RunRow[]).map(runFromRow);
  });
}

export function listEvents(ctx: StoreContext, runId: string): Promise<EventRecord[]> {
  return ctx.read("listEvents", (tx) =>
    (tx.prepare("SELECT * FROM events WHERE run_id = ? ORDER BY seq").all(runId) as EventRow[]).map(
      eventFromRow,
    ),
  );
}
