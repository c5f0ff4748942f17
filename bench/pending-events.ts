// How much one execution of a run costs when many events it does not wait for are pending.
// Before, every unconsumed event of the run was read into memory (loadJournal, and again at
// each reloadEvents); now an execution reads the events of the names its calls take, a page
// at a time (Store.pendingEventHeadsNamed). Usage:
//   npx tsx bench/pending-events.ts <sqlite|postgres> <count> <payloadBytes>
// (postgres: $CAIRN_TEST_POSTGRES_URL). Events are inserted by SQL (sendEvent one by one
// would take minutes), then one execution consumes the one event its wait names.
// executionMs: from the claim's answer to the release's (the execution alone); totalMs: the
// worker's start to the result (with the store's open, which on SQLite checkpoints the
// inserted rows); eventRowsRead: the event rows (whole or heads) the store handed over.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import pg from "pg";
import { createEngine, type Store, sqliteStore, workflow } from "../src/index.js";
import { postgresStore } from "../src/store/postgres/postgres-store.js";

const [backend = "sqlite", countText = "100000", bytesText = "100"] = process.argv.slice(2);
const count = Number(countText);
const bytes = Number(bytesText);
const pgUrl = process.env.CAIRN_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const schema = `bench_pending_${process.pid}`;
const dir = mkdtempSync(join(tmpdir(), "cairn-pending-"));
const path = join(dir, "cairn.db");

const makeStore = (): Store =>
  backend === "sqlite" ? sqliteStore(path) : postgresStore(pgUrl, { schema });

const wf = workflow({ name: "w", version: "1" }, async (ctx) => {
  const go = await ctx.waitForEvent("go");
  return go.timedOut ? "late" : "done";
});

const limits = { maxEventsPerRun: count + 10, maxPendingEventsPerRun: count + 10 };
const mb = (n: number) => `${(n / 1024 / 1024).toFixed(0)} MB`;

async function insertNoise(payload: string): Promise<void> {
  if (backend === "sqlite") {
    const db = new Database(path);
    const ins = db.prepare(
      "INSERT INTO events (run_id, name, payload, created_at) VALUES ('r1', 'noise', ?, 0)",
    );
    db.transaction(() => {
      for (let i = 0; i < count; i++) ins.run(payload);
    })();
    db.close();
    return;
  }
  const c = new pg.Client({ connectionString: pgUrl });
  await c.connect();
  for (let done = 0; done < count; done += 1000) {
    await c.query(
      `INSERT INTO "${schema}".events (run_id, name, payload, created_at)
        SELECT 'r1', 'noise', $1, 0 FROM generate_series(1, $2)`,
      [payload, Math.min(1000, count - done)],
    );
  }
  await c.end();
}

/** The store, timing the claim and release of run r1 and counting the event rows read. */
function measured(inner: Store) {
  const counts = { claimedAt: 0, releasedAt: 0, eventRows: 0 };
  const rowsOf = (verb: string, out: unknown): number => {
    if (verb === "loadJournal") {
      const j = out as { events: unknown[]; eventHeads?: unknown[] };
      return j.events.length + (j.eventHeads?.length ?? 0);
    }
    return verb.startsWith("pendingEvent") ? (out as unknown[]).length : 0;
  };
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== "function") return value;
      const verb = String(prop);
      const seen = (out: unknown, runId: string | undefined) => {
        counts.eventRows += rowsOf(verb, out);
        const now = performance.now();
        if (verb === "claimRuns" && (out as unknown[]).length > 0) counts.claimedAt ||= now;
        if (verb === "releaseRun" && runId === "r1") counts.releasedAt = now;
        return out;
      };
      return (...args: unknown[]) => {
        const runId = (args[0] as { runId?: string } | undefined)?.runId;
        const out = value.apply(target, args);
        return out instanceof Promise ? out.then((o) => seen(o, runId)) : out;
      };
    },
  }) as Store;
  return { store, counts };
}

async function main(): Promise<void> {
  const client = createEngine({ store: makeStore(), workflows: [wf], worker: false, limits });
  await client.start(wf, undefined, { id: "r1" });
  await client.sendEvent("r1", "sample", "x".repeat(bytes));
  const payload = (await client.listEvents("r1"))[0]!;
  // The stored text of that payload, as sendEvent wrote it.
  const stored =
    backend === "sqlite"
      ? (
          new Database(path).prepare("SELECT payload FROM events LIMIT 1").get() as {
            payload: string;
          }
        ).payload
      : JSON.stringify(["x".repeat(bytes)]);
  void payload;
  await insertNoise(stored);
  await client.sendEvent("r1", "go", 1);
  await client.close();

  global.gc?.();
  const base = process.memoryUsage();
  let peakRss = base.rss;
  let peakHeap = base.heapUsed;
  const sampler = setInterval(() => {
    const m = process.memoryUsage();
    peakRss = Math.max(peakRss, m.rss);
    peakHeap = Math.max(peakHeap, m.heapUsed);
  }, 5);
  const t0 = performance.now();
  const { store, counts } = measured(makeStore());
  const worker = createEngine({ store, workflows: [wf], pollIntervalMs: 10, limits });
  const out = await worker.handle("r1").result();
  const ms = performance.now() - t0;
  clearInterval(sampler);
  await worker.close();
  console.log(
    JSON.stringify({
      backend,
      count,
      bytes,
      out,
      executionMs: Math.round(counts.releasedAt - counts.claimedAt),
      totalMs: Math.round(ms),
      eventRowsRead: counts.eventRows,
      peakRssGrowth: mb(peakRss - base.rss),
      peakHeapGrowth: mb(peakHeap - base.heapUsed),
    }),
  );
}

try {
  await main();
} finally {
  rmSync(dir, { recursive: true, force: true });
  if (backend === "postgres") {
    const c = new pg.Client({ connectionString: pgUrl });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await c.end();
  }
}
