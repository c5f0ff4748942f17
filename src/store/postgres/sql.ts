// What every PostgreSQL verb shares: the schema-qualified table names, the store's notion
// of "now" computed in SQL, and publishing hints inside a writing transaction.
//
// Time (clock skew between machines): every lease, ready_at and timestamp decision
// is taken in SQL with the DATABASE's clock, so workers on machines whose clocks disagree
// still agree on who holds a lease.
//
// A virtual test clock (one that does not read Date.now()) must move the store's time. The
// formula of store.ts, database now() + (clock.now() - Date.now()), does that, but with a
// stopped virtual clock its value wanders: the database reads its clock later than the
// process read Date.now(), by a latency that varies per call, so "now" jitters and can step
// BACK a millisecond (a run created now is not yet claimable now); caching the offset instead
// lets it drift ahead by the real time that passes (a 30 s backoff fires early by however
// long the test has run). For such a clock the only drift-free, monotonic choice is the
// clock's own reading, so it is passed as the time: the DATABASE's clock is what matters
// for the system clock, and a virtual clock has no skew to defend against. See clockParamOf.

import type { StoreHint } from "../store.js";
import type { Database, Tx } from "./connection.js";
import type { GuardBuild } from "./plain-triggers.js";

export const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/** What is wrong with `schema` as the name of cairn's schema, or undefined if nothing is.
 *  One rule and one wording for postgresStore() and the store selection (CAIRN_PG_SCHEMA). */
export function schemaNameProblem(schema: string): string | undefined {
  // PostgreSQL's own schemas: pg_* cannot be created (the open failed with the server's
  // "unacceptable schema name"), and information_schema exists, so a superuser's open
  // created cairn's tables among the system views.
  if (schema.startsWith("pg_") || schema === "information_schema") {
    return (
      `invalid PostgreSQL schema name ${JSON.stringify(schema)}: it is one of PostgreSQL's ` +
      'own (pg_* and information_schema are reserved); use another name (e.g. "cairn")'
    );
  }
  if (SCHEMA_NAME.test(schema)) return undefined;
  return (
    `invalid PostgreSQL schema name ${JSON.stringify(schema.slice(0, 80))}; use lowercase ` +
    "letters, digits and underscores, starting with a letter or underscore, at most 63 " +
    'characters (e.g. "cairn")'
  );
}

export interface Tables {
  runs: string;
  steps: string;
  attempts: string;
  intents: string;
  events: string;
  workers: string;
  schemaVersion: string;
  /** The store's functions (migration 2): the group commit, and its amount sum. */
  appendRecords: string;
  addAmounts: string;
  /** Releases without events, many in one statement (migration 13). */
  releaseRuns: string;
  /** Shared rate limits and run streams (cairn/ai, migration 7). */
  rateLimiters: string;
  rateGrants: string;
  runStreams: string;
  runStreamHeads: string;
  /** The largest epoch of a deleted run (migration 15): new runs start above it. */
  epochFloor: string;
  /** What the store says of itself, by name (migration 24): `encrypted`. */
  storeMarks: string;
}

/** Qualified, quoted table (and function) names. `schema` must already match SCHEMA_NAME:
 *  it is the only identifier ever put into SQL text; every value travels as a parameter. */
export function tablesIn(schema: string): Tables {
  const q = `"${schema}"`;
  return {
    runs: `${q}.runs`,
    steps: `${q}.steps`,
    attempts: `${q}.attempts`,
    intents: `${q}.intents`,
    events: `${q}.events`,
    workers: `${q}.workers`,
    schemaVersion: `${q}.schema_version`,
    appendRecords: `${q}.append_records`,
    addAmounts: `${q}.add_amounts`,
    releaseRuns: `${q}.release_runs`,
    rateLimiters: `${q}.rate_limiters`,
    rateGrants: `${q}.rate_grants`,
    runStreams: `${q}.run_streams`,
    runStreamHeads: `${q}.run_stream_heads`,
    epochFloor: `${q}.epoch_floor`,
    storeMarks: `${q}.store_marks`,
  };
}

/** The store's now (ms) in SQL: parameter `$p` is null for the real clock, which then
 *  reads the database clock at the moment of evaluation (clock_timestamp, not the
 *  transaction start), or a virtual clock's reading. Statements that need one consistent
 *  value evaluate it once, in a CTE or sub-select. */
export function nowSql(p: number): string {
  return `coalesce($${p}::bigint, floor(extract(epoch from clock_timestamp()) * 1000)::bigint)`;
}

/** The `$p` of nowSql for a clock: null (database time) for a clock that reads the system's
 *  time (`Clock.system`), else the clock's reading in whole ms. Taken at each call, so moving
 *  a virtual clock takes effect at once. Decided by what the clock is, never by how close
 *  its reading is to Date.now(): a stopped virtual clock started at Date.now() was taken
 *  for the real one for a second, so runs created then got the database's time as readyAt
 *  and a second later were never claimable at the clock's earlier reading. */
export function clockParamOf(
  clock: { now(): number; system?: boolean } | undefined,
): number | null {
  if (!clock || clock.system) return null;
  return Math.round(clock.now());
}

/** What the verbs need from the store. */
export interface StoreContext {
  db: Database;
  /** "host:port/database, schema "x"", for messages (never credentials). */
  description: string;
  t: Tables;
  /** The `$p` of nowSql, taken at each call (clockParamOf). */
  clockParam(): number | null;
  channel: string;
  /** The build whose plain-payload triggers this store installs (plain-triggers.ts); absent:
   *  this build's. Another only in tests, which play two builds of a rolling deploy. */
  guardBuild?: GuardBuild;
}

/** NOTIFY payloads must stay under 8000 bytes, or pg_notify fails the whole transaction. */
const MAX_HINT_BYTES = 7_000;

/** A hint as a NOTIFY payload. A run id too long for one is left out: the hint still says
 *  "look", which is all a hint promises. */
export function hintPayload(hint: StoreHint): string {
  const json = JSON.stringify(hint);
  return Buffer.byteLength(json) <= MAX_HINT_BYTES ? json : JSON.stringify({ kind: hint.kind });
}

/** Queues hints with pg_notify inside the caller's transaction: they are delivered only if
 *  it commits. They stay hints: a lost one only delays a poller. */
export async function publish(tx: Tx, channel: string, hints: StoreHint[]): Promise<void> {
  if (hints.length === 0) return;
  await tx.query("SELECT pg_notify($1, h) FROM unnest($2::text[]) AS h", [
    channel,
    hints.map(hintPayload),
  ]);
}

/** Columns of `runs` a new run sets (its epoch from the epoch floor, migration 15); the rest
 *  take their defaults. Used by forkRun;
 *  createGroup (runs.ts) inserts an unclaimed run with the same columns and values, for
 *  many runs at once: keep the two alike. Parameters: $1 clock (nowSql), $2 id, $3 workflow,
 *  $4 version, $5 input, $6 budget limit (json), $7 parent id, $8 trace context, $9 handed
 *  input digest. */
export function insertRunSql(t: Tables): string {
  return `INSERT INTO ${t.runs}
      (id, workflow, version, status, input, budget_limit, parent_id, trace_context,
       handed_input_digest, ready_at, created_at, updated_at, epoch, create_token)
    SELECT $2, $3, $4, 'pending', $5, $6::jsonb, $7, $8, $9, c.now, c.now, c.now, f.epoch, $10
      FROM (SELECT ${nowSql(1)} AS now) c,
        (SELECT epoch FROM ${t.epochFloor} WHERE id = 1 FOR KEY SHARE) f
    ON CONFLICT (id) DO NOTHING
    RETURNING *`;
}
