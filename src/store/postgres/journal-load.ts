// A run's journal on PostgreSQL (loadJournal): everything replay and fork read of a run.
//
// Usually ONE statement (one snapshot, one round trip) that aggregates each part (steps,
// attempts, intents, unconsumed events) into one JSON text. A JSON text over 512 MiB (V8's
// longest string) threw inside the driver's socket handler, where no caller can catch it:
// the worker process died, and so did every worker that claimed the run next (270 step
// results of 2 MiB, or 1,000 pending events of 2 MiB, are within the default limits). So a
// part whose rows pass AGGREGATED_BYTES comes back NULL from that statement, and is read as
// rows instead, one row a message (each bounded by the store's per-record limits).
//
// The rows are read in a READ ONLY, REPEATABLE READ transaction that asks the aggregate
// statement again: every part of the journal comes from that one snapshot. fork reads the
// journal of a run it holds no lease on, whose holder may commit between two statements
// (a step's outcome without its attempts would be a history that never was).

import type { Journal, StepRecord } from "../store.js";
import {
  type AttemptRow,
  type EventRow,
  type IntentRow,
  type StepRow,
  stepFromJsonValues,
  toAttempt,
  toEvent,
  toEventHead,
  toIntent,
  toStep,
} from "./rows.js";
import type { StoreContext, Tables } from "./sql.js";

/** Above this many bytes of a part's rows (as text), loadJournal reads that part as rows
 *  instead of as one JSON text: JSON's escapes may make a text up to six times its rows
 *  (a control character becomes \u00XX), and 6 x 64 MiB stays under V8's 512 MiB. */
const AGGREGATED_BYTES = 64 * 1024 * 1024;

/** What a row's columns other than its payloads weigh as JSON, at most: ids, keys and names
 *  (names are at most 200 characters), numbers, times, flags, and their field names. */
const ROW_BYTES = 2048;

type PartName = "steps" | "attempts" | "intents" | "events";

/** A part: its rows, their order, what a row weighs, and what of a row is read (`x`: all
 *  of it): the named `columns` (an object of them), or `values`, the aggregate's own
 *  expression of a row. */
interface Part {
  from: string;
  order: string;
  bytes: string;
  columns?: string[];
  values?: string;
}

/** An event's columns but its payload (loadJournal's `eventHeads`). */
const HEAD_COLUMNS = ["seq", "run_id", "name", "created_at", "consumed_by", "idempotency_key"];

/** Each part's rows of run $1, in the order replay reads them, and what a row weighs as
 *  text: its payload columns' lengths plus ROW_BYTES for the rest. `octet_length` of a text
 *  column reads its length from the stored header without decompressing it, so sizing a
 *  run's journal costs no second serialization of its payloads (casting each row to text
 *  to measure it did, on every load); a jsonb column (errors, spend) is cast, but is small
 *  or absent on nearly every row. */
function parts(t: Tables, heads: boolean): Record<PartName, Part> {
  const rest = `${ROW_BYTES} + octet_length(x.spend::text)`;
  return {
    steps: {
      from: `${t.steps} x WHERE x.run_id = $1`,
      order: "x.seq, x.key, x.generation",
      bytes: `coalesce(octet_length(x.result), 0) + coalesce(octet_length(x.error::text), 0) + ${rest}`,
      // A step a JSON array of its columns, not an object: a run's steps are most of its
      // journal, and an object repeats its 17 column names on every row (a 1,000-step
      // journal was 2.5 times the text to build, send and parse). Not run_id: it is $1.
      values: `json_build_array(${STEP_VALUES.map((c) => `x.${c}`).join(", ")})`,
    },
    attempts: {
      from: `${t.attempts} x WHERE x.run_id = $1`,
      order: "x.generation, x.started_at, x.key, x.attempt",
      bytes: `octet_length(x.error::text) + ${rest}`,
    },
    intents: {
      from: `${t.intents} x WHERE x.run_id = $1`,
      order: "x.created_at, x.key",
      bytes: `octet_length(x.data) + ${ROW_BYTES}`,
    },
    events: {
      from: `${t.events} x WHERE x.run_id = $1 AND x.consumed_by IS NULL`,
      order: "x.seq",
      bytes: `${heads ? "" : "octet_length(x.payload) + "}coalesce(octet_length(x.idempotency_key), 0) + ${ROW_BYTES}`,
      ...(heads && { columns: HEAD_COLUMNS }),
    },
  };
}

/** The step columns the aggregate holds of each step, in order (stepFromJsonValues reads
 *  them so): every column of the table but run_id. */
const STEP_VALUES = [
  "key",
  "generation",
  "seq",
  "name",
  "kind",
  "outcome",
  "result",
  "error",
  "spend",
  "attempt",
  "started_at",
  "completed_at",
  "delivery",
  "issued_after",
  "issued_late",
  "reconciled",
] as const;

type Rows = { steps: StepRow[]; attempts: AttemptRow[]; intents: IntentRow[]; events: EventRow[] };
/** The aggregate's answer: steps as arrays of STEP_VALUES, the other parts as rows; NULL
 *  for a part read as rows instead. */
type Aggregated = {
  steps: unknown[][] | null;
  attempts: AttemptRow[] | null;
  intents: IntentRow[] | null;
  events: EventRow[] | null;
};
type Whole = { [K in keyof Aggregated]: NonNullable<Aggregated[K]> };

/** Every part as one JSON text, or NULL where its rows pass $2 bytes. The size is asked
 *  first, in a subquery of its own: the aggregate is then never built for a part too long
 *  (past 1 GiB the server itself would refuse to build it, and the run could never load). */
function aggregateSql(all: Record<PartName, Part>): string {
  const columns = Object.entries(all).map(
    ([name, p]) =>
      `CASE WHEN (SELECT coalesce(sum(${p.bytes}), 0) FROM ${p.from}) > $2 THEN NULL
        ELSE (SELECT coalesce(json_agg(${rowOf(p)} ORDER BY ${p.order}), '[]'::json) FROM ${p.from}) END
        AS ${name}`,
  );
  return `SELECT ${columns.join(",\n")}`;
}

/** A part's row as json_agg takes it. */
function rowOf(p: Part): string {
  if (p.values) return p.values;
  if (!p.columns) return "x";
  return `json_build_object(${p.columns.map((c) => `'${c}', x.${c}`).join(", ")})`;
}

/** `heads`: the unconsumed events without their payloads, as `eventHeads`. */
export async function loadJournal(
  ctx: StoreContext,
  runId: string,
  heads = false,
): Promise<Journal> {
  const all = parts(ctx.t, heads);
  const sql = aggregateSql(all);
  const params = [runId, AGGREGATED_BYTES];
  const first = await ctx.db.statement<Aggregated>("loadJournal", "idempotent", sql, params);
  const row = mustRow(first.rows[0]);
  if (whole(row)) return toJournal(runId, row, [], heads);
  return ctx.db.transaction("loadJournal", "idempotent", async (tx) => {
    await tx.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY");
    // Asked again in this snapshot: the first answer's parts may be older than its rows.
    const again = mustRow((await tx.query<Aggregated>(sql, params)).rows[0]);
    const rows = async <K extends PartName>(name: K): Promise<Rows[K]> => {
      const p = all[name];
      const columns = p.columns?.map((c) => `x.${c}`).join(", ") ?? "x.*";
      return (await tx.query(`SELECT ${columns} FROM ${p.from} ORDER BY ${p.order}`, [runId]))
        .rows as Rows[K];
    };
    return toJournal(
      runId,
      {
        steps: again.steps ?? [],
        attempts: again.attempts ?? (await rows("attempts")),
        intents: again.intents ?? (await rows("intents")),
        events: again.events ?? (await rows("events")),
      },
      again.steps === null ? await rows("steps") : [],
      heads,
    );
  });
}

function whole(a: Aggregated): a is Whole {
  return a.steps !== null && a.attempts !== null && a.intents !== null && a.events !== null;
}

/** The journal of `runId` from its parts, its steps from `stepRows` instead when they were
 *  read as rows (then `r.steps` is empty). `heads`: the event rows have no payload
 *  (loadJournal's `eventHeads`). */
function toJournal(runId: string, r: Whole, stepRows: StepRow[], heads: boolean): Journal {
  const steps: StepRecord[] = stepRows.map(toStep);
  for (const v of r.steps) steps.push(stepFromJsonValues(runId, v));
  return {
    steps,
    attempts: r.attempts.map(toAttempt),
    intents: r.intents.map(toIntent),
    ...(heads
      ? { events: [], eventHeads: r.events.map(toEventHead) }
      : { events: r.events.map(toEvent) }),
  };
}

/** The one row a SELECT of scalar subqueries always answers. */
function mustRow(row: Aggregated | undefined): Aggregated {
  if (row === undefined) throw new Error("loadJournal's statement returned no row");
  return row;
}
