// Worker processes on PostgreSQL for the torture tests: spawn pg-worker.ts children, wait
// until they run, kill, stop and continue them, and collect what they printed. Also the
// small SQL helpers those tests share.

import type { ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import type pg from "pg";
import { type ChildResult, spawnFixture } from "./child.js";
import { withClient } from "./postgres.js";

/** `base` with a unique application_name on every connection made from it, so a test can
 *  find (and terminate) exactly its own workers' backends on a shared server. */
export function taggedUrl(base: string, prefix = "cairn-torture"): { url: string; tag: string } {
  const tag = `${prefix}-${randomBytes(4).toString("hex")}`;
  const u = new URL(base);
  u.searchParams.set("application_name", tag);
  return { url: u.toString(), tag };
}

export interface WorkerProcessOptions {
  concurrency?: number;
  leaseMs?: number;
  heartbeatMs?: number;
  pollIntervalMs?: number;
  poolSize?: number;
}

export interface WorkerProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly done: Promise<ChildResult>;
  /** Everything it printed to stdout (stderr) so far. */
  stdout(): string;
  stderr(): string;
  exited: boolean;
}

/** Polls `check` every `intervalMs` until it returns a truthy value; throws after
 *  `timeoutMs` with `what` (and `detail()`, if given, to say where things stood). */
export async function waitFor<T>(
  check: () => T | Promise<T>,
  what: string,
  timeoutMs: number,
  options: { intervalMs?: number; detail?: () => string | Promise<string> } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v as NonNullable<T>;
    if (Date.now() > deadline) {
      const detail = options.detail ? ` (${await options.detail()})` : "";
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${detail}`);
    }
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 50));
  }
}

/** A set of pg-worker.ts processes on one schema. */
export class Fleet {
  readonly all: WorkerProcess[] = [];

  constructor(
    private readonly url: string,
    private readonly schema: string,
    private readonly options: WorkerProcessOptions = {},
    private readonly env: Record<string, string> = {},
  ) {}

  /** Spawns a worker; resolves once it printed "ready" (its engine runs). */
  async spawn(env: Record<string, string> = {}): Promise<WorkerProcess> {
    const w = this.spawnNoWait(env);
    await waitFor(
      () => w.stdout().includes("ready ") || w.exited,
      `worker ${w.pid} to start`,
      30_000,
    );
    if (!w.stdout().includes("ready ")) {
      const res = await w.done;
      throw new Error(`worker ${w.pid} exited before it was ready: ${res.stderr}`);
    }
    return w;
  }

  /** Spawns a worker without waiting for it to be ready. */
  spawnNoWait(env: Record<string, string> = {}): WorkerProcess {
    const { child, done } = spawnFixture(
      "pg-worker.ts",
      [this.url, this.schema, JSON.stringify(this.options)],
      { ...this.env, ...env },
    );
    let out = "";
    let err = "";
    child.stdout?.on("data", (d) => {
      out += d;
    });
    child.stderr?.on("data", (d) => {
      err += d;
    });
    const w: WorkerProcess = {
      child,
      pid: child.pid ?? -1,
      done,
      stdout: () => out,
      stderr: () => err,
      exited: false,
    };
    void done.then(
      () => {
        w.exited = true;
      },
      () => {
        w.exited = true;
      },
    );
    this.all.push(w);
    return w;
  }

  live(): WorkerProcess[] {
    return this.all.filter((w) => !w.exited);
  }

  /** SIGKILLs every worker still running and waits for them to be gone. */
  async killAll(): Promise<void> {
    const live = this.live();
    for (const w of live) w.child.kill("SIGKILL");
    await Promise.all(live.map((w) => w.done.catch(() => undefined)));
  }
}

/** Stops `w` gracefully (SIGTERM: its engine closes, releasing what it holds) and waits
 *  for it to exit; returns its exit code. */
export async function stop(w: WorkerProcess): Promise<number | null> {
  w.child.kill("SIGTERM");
  const res = await w.done;
  return res.code;
}

/** SIGKILLs `w` and waits until the process is gone. */
export async function kill(w: WorkerProcess): Promise<void> {
  w.child.kill("SIGKILL");
  await w.done.catch(() => undefined);
}

/** One value of a single-row query on a short-lived connection of its own. */
export async function queryValue<T>(url: string, sql: string, params: unknown[] = []): Promise<T> {
  return withClient(url, async (c) => {
    const r = await c.query(sql, params);
    return Object.values(r.rows[0] ?? {})[0] as T;
  });
}

/** Row counts of the runs table by status. */
export async function statusCounts(c: pg.ClientBase, schema: string): Promise<Map<string, number>> {
  const r = await c.query<{ status: string; n: string }>(
    `SELECT status, count(*) AS n FROM "${schema}".runs GROUP BY status`,
  );
  return new Map(r.rows.map((row) => [row.status, Number(row.n)]));
}

export function describeCounts(counts: Map<string, number>): string {
  return [...counts].map(([k, v]) => `${k} ${v}`).join(", ") || "no runs";
}

/** The exactly-once check both torture files end with: `expected` step rows, none doubled
 *  (the primary key forbids it; this checks they are all there), and `expected` provider
 *  keys, each applied once. Needs an `expect` so a failure names the count that is off. */
export async function expectJournalAndLedgerExact(
  c: pg.ClientBase,
  schema: string,
  expected: number,
  expect: (actual: number, what: string) => void,
): Promise<void> {
  const j = await c.query<{ n: string; distinct_keys: string }>(
    `SELECT count(*) AS n, count(DISTINCT (run_id, key)) AS distinct_keys FROM "${schema}".steps`,
  );
  expect(Number(j.rows[0]?.n) - expected, "step rows minus expected");
  expect(Number(j.rows[0]?.distinct_keys) - expected, "distinct step keys minus expected");
  const l = await c.query<{ n: string; keys: string }>(
    `SELECT count(*) AS n, count(DISTINCT key) AS keys FROM "${schema}".ledger`,
  );
  expect(Number(l.rows[0]?.n) - expected, "ledger rows minus expected");
  expect(Number(l.rows[0]?.keys) - expected, "distinct ledger keys minus expected");
}
