// A run's journal on PostgreSQL (loadJournal): everything replay and fork read of a run.
//
// Usually ONE statement (one snapshot, one round trip), prepared on the store's own pool:
// the run's steps as rows (arrays of their columns: pg's rowMode "array"), and one more row
// holding the other parts (attempts, intents, unconsumed events), each aggregated into one
// JSON text. Steps are most of a journal: as one JSON text (json_build_array per step)
// they cost the server about four times the plain rows (every payload escaped into the
// text, and every row's size summed first, below), which made a resume of 1,000 steps
// 1.3x reading its rows raw before any replay began. Rows bound nothing but their own
// size, so steps need no size check.
//
// A JSON text over 512 MiB (V8's longest string) threw inside the driver's socket handler,
// where no caller can catch it: the worker process died, and so did every worker that
// claimed the run next (1,000 pending events of 2 MiB are within the default limits). So a
// part whose rows pass AGGREGATED_BYTES comes back NULL from that statement, and is read as
// rows instead, one row a message (each bounded by the store's per-record limits).
//
// The rows are read in a READ ONLY, REPEATABLE READ transaction that asks the statement
// again: every part of the journal comes from that one snapshot. fork reads the journal of
// a run it holds no lease on, whose holder may commit between two statements (a step's
// outcome without its attempts would be a history that never was).

import type { JournalEvents } from "../journal-page.js";
import type { Journal, StepRecord } from "../store.js";
import {
  type AttemptRow,
  type EventRow,
  type IntentRow,
  STEP_NUMBERS_SQL,
  stepFromValues,
  toAttempt,
  toEvent,
  toEventHead,
  toIntent,
} from "./rows.js";
import type { StoreContext, Tables } from "./sql.js";

/** Above this many bytes of a part's rows (as text), loadJournal reads that part as rows
 *  instead of as one JSON text: JSON's escapes may make a text up to six times its rows
 *  (a control character becomes \u00XX), and 6 x 64 MiB stays under V8's 512 MiB. */
const AGGREGATED_BYTES = 64 * 1024 * 1024;

/** What a row's columns other than its payloads weigh as JSON, at most: ids, keys and names
 *  (names are at most 200 characters), numbers, times, flags, and their field names. */
const ROW_BYTES = 2048;

type PartName = "attempts" | "intents" | "events";

/** A part aggregated as JSON: its rows, their order, what a row weighs, and which of its
 *  columns are read (all of them, as an object, when none are named). */
interface Part {
  from: string;
  order: string;
  bytes: string;
  columns?: string[];
}

/** An event's columns but its payload (loadJournal's `eventHeads`). */
const HEAD_COLUMNS = ["seq", "run_id", "name", "created_at", "consumed_by", "idempotency_key"];

/** The parts aggregated as JSON, of run $1, in the order replay reads them, and what a row
 *  weighs as text: its payload columns' lengths plus ROW_BYTES for the rest. `octet_length`
 *  of a text column reads its length from the stored header without decompressing it, so
 *  sizing a part costs no second serialization of its payloads; a jsonb column (spend) is
 *  cast, but is small. */
function parts(t: Tables, events: JournalEvents): Record<PartName, Part> {
  const heads = events !== "whole";
  return {
    attempts: {
      from: `${t.attempts} x WHERE x.run_id = $1`,
      order: "x.generation, x.started_at, x.key, x.attempt",
      bytes: `octet_length(x.error::text) + ${ROW_BYTES} + octet_length(x.spend::text)`,
    },
    intents: {
      from: `${t.intents} x WHERE x.run_id = $1`,
      order: "x.created_at, x.key",
      bytes: `octet_length(x.data) + ${ROW_BYTES}`,
    },
    events: {
      // None asked for (LoadJournalOptions.pendingEvents false): a constant false the
      // planner answers without reading a row.
      from: `${t.events} x WHERE x.run_id = $1 AND x.consumed_by IS NULL${events === "none" ? " AND false" : ""}`,
      order: "x.seq",
      bytes: `${heads ? "" : "octet_length(x.payload) + "}coalesce(octet_length(x.idempotency_key), 0) + ${ROW_BYTES}`,
      ...(heads && { columns: HEAD_COLUMNS }),
    },
  };
}

/** The step columns a step row holds, in order (stepFromValues reads them so): every
 *  column of the table but run_id (it is $1). Key, generation and seq are columns of their
 *  own (the statement orders by them); spend is its text, NULL for the empty object nearly
 *  every step has; attempt, the two times, delivery, issued_after, issued_late and
 *  reconciled come as ONE text of whole numbers (rows.ts STEP_NUMBERS_SQL), and no column
 *  tells a step's row from the parts row. The driver makes a string of every non-NULL field
 *  it reads, and the journal keeps them alive until its records are built: 13 fields a row
 *  and 8 strings a plain step (were 20 and 15) took loadJournal's CPU time on 1,000 steps
 *  from about 0.93x to 0.66x that of reading the rows raw (issue 13;
 *  test/journal-load-fields.test.ts counts them). */
const STEP_VALUES = [
  "key",
  "generation",
  "seq",
  "name",
  "kind",
  "outcome",
  "result",
  "error",
  "NULLIF(x.spend, '{}'::jsonb)::text",
  STEP_NUMBERS_SQL,
] as const;

/** A row of the statement: a step's (STEP_VALUES, then three NULLs), or the one row of the
 *  other parts (NULLs in place of a step, then each part as the JSON of its rows, or NULL
 *  where its rows pass $2 bytes). Its seq is NULL, so ORDER BY puts it last. */
type Row = unknown[];
const PARTS_AT = STEP_VALUES.length;

type Rows = { attempts: AttemptRow[]; intents: IntentRow[]; events: EventRow[] };
type Aggregated = { [K in PartName]: Rows[K] | null };

/** The statement: the steps as rows in replay's order, then the parts' row (ORDER BY
 *  puts it last: its seq is NULL). A part's size is asked first, in a subquery of its own:
 *  its aggregate is then never built when too long (past 1 GiB the server itself would
 *  refuse to build it, and the run could never load). */
function journalSql(t: Tables, all: Record<PartName, Part>): string {
  const aggregates = Object.entries(all).map(
    ([name, p]) =>
      `CASE WHEN (SELECT coalesce(sum(${p.bytes}), 0) FROM ${p.from}) > $2 THEN NULL
        ELSE (SELECT coalesce(json_agg(${rowOf(p)} ORDER BY ${p.order}), '[]'::json) FROM ${p.from}) END
        AS ${name}`,
  );
  const steps = STEP_VALUES.map((c) => (/^[a-z_]+$/.test(c) ? `x.${c}` : c)).join(", ");
  const none = STEP_VALUES.map(() => "NULL").join(", ");
  // seq is NOT NULL in steps: the parts row's NULL sorts after every step (ASC, NULLS LAST).
  return `SELECT ${steps}, NULL::json, NULL::json, NULL::json
      FROM ${t.steps} x WHERE x.run_id = $1
    UNION ALL
    SELECT ${none}, ${aggregates.join(",\n")}
    ORDER BY seq, key, generation`;
}

/** A part's row as json_agg takes it. */
function rowOf(p: Part): string {
  if (!p.columns) return "x";
  return `json_build_object(${p.columns.map((c) => `'${c}', x.${c}`).join(", ")})`;
}

/** The statement's text, built once per schema and kind. */
const texts = new WeakMap<Tables, Partial<Record<JournalEvents, string>>>();

function statementFor(t: Tables, events: JournalEvents): string {
  let cached = texts.get(t);
  if (cached === undefined) {
    cached = {};
    texts.set(t, cached);
  }
  cached[events] ??= journalSql(t, parts(t, events));
  return cached[events];
}

/** The journal, with the unconsumed events as `events` asks. */
export async function loadJournal(
  ctx: StoreContext,
  runId: string,
  events: JournalEvents = "whole",
): Promise<Journal> {
  const heads = events === "heads";
  const sql = statementFor(ctx.t, events);
  const params = [runId, AGGREGATED_BYTES];
  // Prepared (the store's own pool): planning its eight subqueries and the union took the
  // server about 0.8 ms, more than reading 1,000 steps.
  const name = {
    whole: "cairn_load_journal",
    heads: "cairn_load_journal_heads",
    none: "cairn_load_journal_no_events",
  }[events];
  const first = await ctx.db.statement("loadJournal", "idempotent", sql, params, name, "array");
  const rows = first.rows as unknown as Row[];
  const aggregated = partsOf(rows);
  if (whole(aggregated)) return toJournal(runId, rows, aggregated, heads);
  return ctx.db.transaction("loadJournal", "idempotent", async (tx) => {
    await tx.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY");
    // Asked again in this snapshot: the first answer's parts may be older than its rows.
    const again = (await tx.query(sql, params, undefined, "array")).rows as unknown as Row[];
    const a = partsOf(again);
    const all = parts(ctx.t, events);
    const read = async <K extends PartName>(name: K): Promise<Rows[K]> => {
      const held = a[name];
      if (held !== null) return held;
      const p = all[name];
      const columns = p.columns?.map((c) => `x.${c}`).join(", ") ?? "x.*";
      return (await tx.query(`SELECT ${columns} FROM ${p.from} ORDER BY ${p.order}`, [runId]))
        .rows as Rows[K];
    };
    return toJournal(
      runId,
      again,
      {
        attempts: await read("attempts"),
        intents: await read("intents"),
        events: await read("events"),
      },
      heads,
    );
  });
}

/** The parts the statement's last row holds. */
function partsOf(rows: Row[]): Aggregated {
  const last = rows[rows.length - 1];
  // A step's key and seq are never NULL: the parts row's are.
  if (last === undefined || last[0] !== null || last[2] !== null)
    throw new Error("loadJournal's statement returned no parts row");
  return {
    attempts: last[PARTS_AT] as AttemptRow[] | null,
    intents: last[PARTS_AT + 1] as IntentRow[] | null,
    events: last[PARTS_AT + 2] as EventRow[] | null,
  };
}

function whole(a: Aggregated): a is Rows {
  return a.attempts !== null && a.intents !== null && a.events !== null;
}

/** The journal of `runId`: its steps from the statement's rows (all but the last), the
 *  other parts from `r`. `heads`: the event rows have no payload (loadJournal's
 *  `eventHeads`). */
function toJournal(runId: string, rows: Row[], r: Rows, heads: boolean): Journal {
  const steps: StepRecord[] = new Array(rows.length - 1);
  for (let i = 0; i < steps.length; i++) steps[i] = stepFromValues(runId, rows[i]!);
  return {
    steps,
    attempts: r.attempts.map(toAttempt),
    intents: r.intents.map(toIntent),
    ...(heads
      ? { events: [], eventHeads: r.events.map(toEventHead) }
      : { events: r.events.map(toEvent) }),
  };
}
