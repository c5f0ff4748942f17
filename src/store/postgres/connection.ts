// Running one store verb against PostgreSQL: check out a connection, run the verb's
// transaction, and survive the connection failures a long-lived worker fleet will see
// (backend terminated by an admin or a failover, server restarting, network reset).
//
// Failure modes handled here (a connection lost at any moment of a transaction):
// - A connection error BEFORE the COMMIT is sent means the server rolled the transaction
//   back: every verb may simply run again on a fresh connection.
// - A connection error DURING the COMMIT (or during a single autocommit write) leaves the
//   outcome unknown. Only verbs whose repetition is harmless are retried then ("idempotent"
//   policy), or that find their own earlier write by a token of the call ("own-write": once
//   its retries fail too, the outcome is unknown); the others ("before-commit") raise a
//   StoreError that says the outcome is unknown. Which verb has which policy, and why, is
//   documented in postgres-store.ts.
// - Deadlocks and serialization failures roll the transaction back too: always retried.
// - A client whose backend died emits 'error' events; one with no listener crashes the
//   process, so checked-out clients get a listener and the pool gets one for idle clients.
// Retry backoff uses real timers, never the injected Clock: it is about the network, and a
// virtual test clock must not be able to stall or skip it.

import type pg from "pg";
import { CairnError, StoreError } from "../../errors.js";
import { waitAtMost } from "../../lib/timers.js";
import { type PlainPayload, plainPayloadRefusal } from "../plain-payloads.js";
import { PLAIN_REFUSED } from "./plain-triggers.js";

/** Per-connection guards: a stuck statement or a stalled process holding row locks in an
 *  open transaction must not block other workers forever. */
export const STATEMENT_TIMEOUT_MS = 30_000;
export const IDLE_IN_TRANSACTION_TIMEOUT_MS = 30_000;

/** Delays before each retry (ms); jittered ±25%. About 3 s in all: enough to ride out a
 *  terminated backend or a quick failover, short enough that a caller learns of an outage. */
const RETRY_DELAYS_MS = [50, 100, 200, 400, 800, 1600];

export type RetryPolicy =
  /** Running the verb twice is harmless: retried even when the commit outcome is unknown. */
  | "idempotent"
  /** Retried only when the transaction certainly did not commit. */
  | "before-commit"
  /** Retried even when the commit outcome is unknown: each try looks for the call's own
   *  earlier write first (a token of the call, written with it). A caller repeating the call
   *  has another token and cannot, so once every retry failed after a commit whose answer
   *  was lost, the error says the outcome is unknown. */
  | "own-write";

export interface Tx {
  /** True when an earlier try of this same call lost its connection while committing, so
   *  it may have taken effect: a verb that is not naturally idempotent checks for its own
   *  earlier effect before applying itself again. */
  readonly mayHaveCommitted: boolean;
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    sql: string,
    params?: unknown[],
    /** A name to prepare it under, once per connection: honoured on the store's own pool
     *  only (a caller's pool may be shared, or sit behind a pooler that drops them). One
     *  name is one text for the life of the pool. A stale one is tried again on another
     *  connection (isStalePlan), so name only a body's one statement or one in a
     *  transaction: an autocommit statement before it would run twice. */
    name?: string,
    /** "array": each row an array of its columns' values, in the statement's order (pg's
     *  rowMode), not an object of them: no column names set on every row. */
    rowMode?: "array",
  ): Promise<pg.QueryResult<R>>;
}

/** Thrown inside a transaction body to roll back and still return a value (an outcome such
 *  as a conflict or a lost lease is a result, not an error). */
export class Rollback<T> {
  constructor(readonly value: T) {}
}

const CONNECTION_SQLSTATES = new Set([
  "57P01", // admin_shutdown: pg_terminate_backend, smart/fast shutdown
  "57P02", // crash_shutdown
  "57P03", // cannot_connect_now: the server is starting up or shutting down
  "53300", // too_many_connections
]);

const NODE_CONNECTION_CODES = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN",
]);

const CONNECTION_MESSAGES = [
  "Connection terminated",
  "Client has encountered a connection error",
  "Client was closed and is not queryable",
  "timeout exceeded when trying to connect",
  // query_timeout (postgres-store.ts): the server did not answer; the session is unusable.
  "Query read timeout",
];

function errorCode(err: unknown): string | undefined {
  if (err !== null && typeof err === "object" && "code" in err) {
    const code = (err as { code: unknown }).code;
    return typeof code === "string" ? code : undefined;
  }
  return undefined;
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The connection (not the statement) failed: the session and its transaction are gone. */
export function isConnectionError(err: unknown): boolean {
  const code = errorCode(err);
  if (code !== undefined) {
    if (code.startsWith("08") || CONNECTION_SQLSTATES.has(code)) return true;
    if (NODE_CONNECTION_CODES.has(code)) return true;
  }
  const message = errorMessage(err);
  return CONNECTION_MESSAGES.some((m) => message.includes(m));
}

/** A prepared statement (Tx.query's name) whose result columns changed since it was
 *  prepared on this connection: a newer cairn's migration added a column to a table it
 *  returns rows of, while this store was open. The server refuses it before it runs. */
function isStalePlan(err: unknown): boolean {
  return (
    errorCode(err) === "0A000" &&
    errorMessage(err).includes("cached plan must not change result type")
  );
}

/** More stale connections than any pool holds: past this, the error is reported. */
const MAX_STALE_PLANS = 100;

/** The server rolled the transaction back and asks for it to be run again. */
function isRolledBackForRetry(err: unknown): boolean {
  const code = errorCode(err);
  return code === "40001" || code === "40P01";
}

function sleepMs(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function ignoreError(): void {
  // A client error while checked out also rejects the running (or next) query, which is
  // where it is handled; this listener only keeps the 'error' event from crashing Node.
}

export class Database {
  readonly #pool: pg.Pool;
  readonly #description: string;
  readonly #beginSql: string;
  readonly #autocommit: boolean;

  /**
   * @param sessionTimeoutsSet true when the pool's connections were created by the store
   *   with statement_timeout and idle_in_transaction_session_timeout set; otherwise (a pool
   *   the caller passed in) every verb runs in a transaction that sets them locally, so the
   *   caller's own sessions are left as they were.
   */
  constructor(pool: pg.Pool, description: string, sessionTimeoutsSet: boolean) {
    this.#pool = pool;
    this.#description = description;
    this.#autocommit = sessionTimeoutsSet;
    // READ COMMITTED whatever the session's default: see readCommitted in postgres-store.ts.
    this.#beginSql = sessionTimeoutsSet
      ? "BEGIN ISOLATION LEVEL READ COMMITTED"
      : `BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL statement_timeout = ${STATEMENT_TIMEOUT_MS}; ` +
        `SET LOCAL idle_in_transaction_session_timeout = ${IDLE_IN_TRANSACTION_TIMEOUT_MS}`;
  }

  /** Whether a statement's name prepares it (Tx.query): on the store's own pool only. */
  get prepares(): boolean {
    return this.#autocommit;
  }

  /** Runs `body` in one transaction, retrying per `policy` (see the file header). */
  transaction<T>(verb: string, policy: RetryPolicy, body: (tx: Tx) => Promise<T>): Promise<T> {
    return this.#run(verb, policy, true, body);
  }

  /** One statement. Autocommit where the session timeouts are set on the connection.
   *  `name`: prepared under it (see Tx.query). */
  async statement<R extends pg.QueryResultRow = pg.QueryResultRow>(
    verb: string,
    policy: RetryPolicy,
    sql: string,
    params: unknown[] = [],
    name?: string,
    rowMode?: "array",
  ): Promise<pg.QueryResult<R>> {
    return this.#run(verb, policy, !this.#autocommit, (tx) =>
      tx.query<R>(sql, params, name, rowMode),
    );
  }

  /** Like statement(), for a body of statements that need no common transaction (each
   *  one is atomic by itself), with the retry flag that tells it to look for its own
   *  earlier effect. */
  statements<T>(verb: string, policy: RetryPolicy, body: (tx: Tx) => Promise<T>): Promise<T> {
    return this.#run(verb, policy, !this.#autocommit, body);
  }

  /** Resolves once the verbs under way have settled, or after `ms`: the store's close()
   *  waits for them before it ends the pool. pg-pool never answers a connect() still queued
   *  when end() is called (one finding an idle client is served on the next tick), so a
   *  verb asked for just before close() never settled. */
  async settled(ms: number): Promise<void> {
    if (this.#inFlight.size > 0) await waitAtMost(Promise.allSettled([...this.#inFlight]), ms);
    // The pool ends once its clients are back: the kept one goes back now, and no other
    // is kept after it.
    this.#keeping = false;
    this.#dropKept();
  }

  readonly #inFlight = new Set<Promise<unknown>>();

  #run<T>(
    verb: string,
    policy: RetryPolicy,
    inTransaction: boolean,
    body: (tx: Tx) => Promise<T>,
  ): Promise<T> {
    const running = this.#tries(verb, policy, inTransaction, body);
    this.#inFlight.add(running);
    const done = () => this.#inFlight.delete(running);
    running.then(done, done);
    return running;
  }

  async #tries<T>(
    verb: string,
    policy: RetryPolicy,
    inTransaction: boolean,
    body: (tx: Tx) => Promise<T>,
  ): Promise<T> {
    let mayHaveCommitted = false;
    let stalePlans = 0;
    for (let attempt = 1; ; attempt++) {
      // "connect": nothing sent. "body": sent, not committed. "commit": outcome unknown.
      let phase: "connect" | "body" | "commit" = "connect";
      let client: pg.PoolClient | undefined;
      try {
        client = this.#takeKept() ?? (await this.#pool.connect());
        this.#listenFor(client);
        const c = client;
        const named = this.#autocommit;
        const tx: Tx = {
          mayHaveCommitted,
          query: (sql, params, name, rowMode) =>
            name !== undefined && named
              ? c.query({ name, text: sql, values: params ?? [], ...(rowMode && { rowMode }) })
              : rowMode
                ? // Rows as arrays: the caller's R says so (rowMode is its own argument).
                  (c.query({ text: sql, values: params ?? [], rowMode }) as never)
                : c.query(sql, params),
        };
        let value: T;
        if (inTransaction) {
          phase = "body";
          await c.query(this.#beginSql);
          try {
            value = await body(tx);
          } catch (err) {
            if (!(err instanceof Rollback)) throw err;
            await c.query("ROLLBACK");
            this.#release(c);
            return err.value as T;
          }
          phase = "commit";
          await c.query("COMMIT");
        } else {
          phase = "commit";
          value = await body(tx);
        }
        this.#release(c);
        return value;
      } catch (err) {
        if (client && isStalePlan(err)) {
          // Its prepared statement is stale on this connection, and on no new one: drop the
          // connection and try again. Nothing ran, whatever the policy.
          this.#release(client, err instanceof Error ? err : new Error(String(err)));
          client = undefined;
          if (++stalePlans <= MAX_STALE_PLANS) {
            attempt--;
            continue;
          }
        }
        if (client) await this.#discard(client, err);
        const retryable =
          isRolledBackForRetry(err) ||
          (isConnectionError(err) && (policy !== "before-commit" || phase !== "commit"));
        const delay = RETRY_DELAYS_MS[attempt - 1];
        if (retryable && delay !== undefined) {
          if (phase === "commit" && isConnectionError(err)) mayHaveCommitted = true;
          await sleepMs(delay * (0.75 + Math.random() * 0.5));
          continue;
        }
        const unknown = policy === "own-write" && (mayHaveCommitted || phase === "commit");
        throw this.#mapError(err, verb, policy, unknown ? "commit" : phase, attempt);
      }
    }
  }

  /** The store's own clients keep their listener for life, added at their first checkout:
   *  adding and removing one per checkout was two emitter calls on every statement. A
   *  caller's clients get one while checked out only, so they are handed back as they were. */
  #listenFor(client: pg.PoolClient): void {
    if (!this.#autocommit) {
      client.on("error", ignoreError);
    } else if (!this.#listening.has(client)) {
      client.on("error", ignoreError);
      // A kept client whose connection dies while it waits is handed back to the pool
      // (with the error: the pool drops it), never given to the next statement.
      const lost = () => {
        if (this.#kept !== client) return;
        this.#kept = undefined;
        client.release(new Error("Connection terminated while kept"));
      };
      client.on("error", lost);
      client.once("end", lost);
      this.#listening.add(client);
    }
  }

  readonly #listening = new WeakSet<pg.PoolClient>();

  /**
   * On the store's own pool, the client a statement ended with is kept checked out for the
   * next one rather than handed back (one at a time): a pool checkout and release cost
   * two timers, a nextTick and a few closures, about 20 us of CPU a statement on a loaded
   * 2-core machine, on every step of a run executing alone. It goes back to the pool when
   * a caller waits for one (the pool is full), when its connection dies, and at close.
   */
  #kept: pg.PoolClient | undefined;
  #keeping = true;

  #takeKept(): pg.PoolClient | undefined {
    const kept = this.#kept;
    this.#kept = undefined;
    return kept;
  }

  #dropKept(): void {
    this.#takeKept()?.release();
  }

  #release(client: pg.PoolClient, err?: Error): void {
    if (!this.#autocommit) {
      client.removeListener("error", ignoreError);
    } else if (
      err === undefined &&
      this.#keeping &&
      this.#kept === undefined &&
      this.#pool.waitingCount === 0
    ) {
      this.#kept = client;
      return;
    }
    client.release(err);
  }

  /** After a failure: roll back if the session still works, else destroy the client so the
   *  pool never hands out a dead connection again. */
  async #discard(client: pg.PoolClient, err: unknown): Promise<void> {
    if (isConnectionError(err)) {
      // Dropped, not ended: pg's end() says goodbye and waits for the server's answer,
      // which a silent peer never sends, and the socket would keep the process alive.
      dropSocket(client);
      this.#release(client, err instanceof Error ? err : new Error(String(err)));
      return;
    }
    try {
      await client.query("ROLLBACK");
      this.#release(client);
    } catch (rollbackErr) {
      this.#release(
        client,
        rollbackErr instanceof Error ? rollbackErr : new Error(String(rollbackErr)),
      );
    }
  }

  #mapError(
    err: unknown,
    verb: string,
    policy: RetryPolicy,
    phase: "connect" | "body" | "commit",
    attempts: number,
  ): Error {
    if (err instanceof CairnError) return err;
    const where = `PostgreSQL (${this.#description})`;
    if (isConnectionError(err)) {
      if (phase === "commit" && policy !== "idempotent") {
        return new StoreError(
          `Lost the connection to ${where} while committing ${verb}: whether it took effect ` +
            "is unknown, and it is not safe to repeat blindly. Read the current state " +
            `before trying again (${errorMessage(err)}).`,
          { cause: err },
        );
      }
      return new StoreError(
        `Cannot reach ${where} for ${verb} after ${attempts} tr${attempts === 1 ? "y" : "ies"}: ` +
          `${errorMessage(err)}. Check that the database is running and reachable; ` +
          "the call can be repeated.",
        { cause: err },
      );
    }
    const code = errorCode(err);
    if (code === "ERR_INVALID_URL") {
      // pg's URL parser refused the connection string (Node's code, not a SQLSTATE): say
      // so, and how to write one; the URL itself may hold a password and is not repeated.
      return new StoreError(
        `${where}: the connection URL is not a valid URL, so no connection was tried. ` +
          "Write it as postgres://user:password@host:5432/database, with a port that is a " +
          "number and @ : / ? # in the user or password percent-encoded (%40 for @).",
        { cause: err },
      );
    }
    if (code === "22021" || code === "22P05") {
      return new StoreError(
        `${where} cannot store a value given to ${verb}: it contains a NUL character or ` +
          "invalid UTF-8, which PostgreSQL text cannot hold. Remove it (ids, names, keys and " +
          `encoded payloads must be valid text) (SQLSTATE ${code}).`,
        { cause: err },
      );
    }
    if (code === "54000") {
      return new StoreError(
        `${where} refused ${verb}: an id, name or key is too long to index (keep them under ` +
          `about 2 KB) (SQLSTATE ${code}).`,
        { cause: err },
      );
    }
    if (code === "25006") {
      // The server's own words name whatever statement came first ("cannot execute SELECT
      // in a read-only transaction"), which hides the cause.
      return new StoreError(
        `${where} refused ${verb}: the session is read-only (a hot standby replica, or ` +
          "default_transaction_read_only set for this role or database). Point cairn at the " +
          `primary, with a role that may write (SQLSTATE ${code}: ${errorMessage(err)}).`,
        { cause: err },
      );
    }
    if (code === "42501") {
      return new StoreError(
        `${where} refused ${verb}: the role lacks a privilege on cairn's schema or tables. ` +
          "cairn creates, reads and writes the tables of its schema: grant the role those " +
          `rights, or use the role that created them (SQLSTATE ${code}: ${errorMessage(err)}).`,
        { cause: err },
      );
    }
    if (code === PLAIN_REFUSED) {
      // A trigger of a store marked encrypted refused a plain payload (plain-triggers.ts):
      // the guard's own refusal, naming what and where.
      return plainPayloadRefusal(this.#description, refusedPart(err));
    }
    if (code === "57014") {
      return new StoreError(
        `${where} canceled ${verb}: it ran longer than statement_timeout ` +
          `(${STATEMENT_TIMEOUT_MS} ms). Check the database load and locks.`,
        { cause: err },
      );
    }
    return new StoreError(
      `${where} failed ${verb}: ${errorMessage(err)}${code ? ` (SQLSTATE ${code})` : ""}.`,
      { cause: err },
    );
  }
}

/** The part a trigger refused, from the JSON its error's DETAIL holds. */
function refusedPart(err: unknown): PlainPayload {
  const detail = (err as { detail?: unknown }).detail;
  try {
    const d = JSON.parse(typeof detail === "string" ? detail : "") as Record<string, unknown>;
    const text = (k: string) => (typeof d[k] === "string" ? d[k] : undefined);
    const runId = text("runId");
    const key = text("key");
    return {
      what: text("what") ?? "a payload",
      ...(runId !== undefined && { runId }),
      ...(key !== undefined && { key }),
    };
  } catch {
    return { what: "a payload" };
  }
}

/** Closes a pg client's socket at once, without the goodbye a silent server would never
 *  answer. pg has no public call for it; its connection's stream is the socket. */
export function dropSocket(client: pg.ClientBase): void {
  (
    client as unknown as { connection?: { stream?: { destroy(): void } } }
  ).connection?.stream?.destroy();
}
