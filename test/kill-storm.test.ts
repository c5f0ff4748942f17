// The kill storm: hundreds of short-lived worker processes on each backend, SIGKILLed a few
// hundred milliseconds into their lives, some first stopped past their lease (SIGSTOP) and
// continued (SIGCONT) as zombies; on PostgreSQL (a private cluster this test creates, so
// that restarting it touches nobody else) backends are terminated and the server restarted
// under them. Two workers race on SQLite, four on PostgreSQL; runs are started in batches
// until the kill budget is spent. The workflow makes every kind of call (ctx.now/random/
// uuid, step, effect, sleep, wait, child).
// Pass bar: every run completes with the output of an undisturbed run; every run's journal
// holds each expected key once; every run's effect key is applied once (a perform repeated
// under an applied key is counted and printed); no sleep ends early and no wait is lost.
// Seeded: a failure prints CAIRN_SEED=<n>, which replays the controller's schedule. Counts
// go to the torture summary printed at the end of `vitest run`. The default run is the
// storm at scale 0.1 (per backend 50 SIGKILLs and 10 zombie cycles; 200 runs on SQLite;
// 10 backend terminations and a restart on PostgreSQL); CAIRN_SOAK=1 runs scale 10;
// CAIRN_STORM_SCALE=<factor> sets the factor (0.15, 75 SIGKILLs per backend, was the default).

import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { createEngine, type Engine, sqliteStore } from "../src/index.js";
import { postgresStore } from "../src/postgres.js";
import { expectedStormOutput, storm } from "./fixtures/storm-workflows.js";
import { pool } from "./helpers/child.js";
import {
  type PrivateCluster,
  privateClusterAvailable,
  startPrivateCluster,
} from "./helpers/private-postgres.js";
import {
  goStormWorker,
  removeStormWorkerBundle,
  type StormWorker,
  seededRandom,
  spawnStormWorker,
  stormSeed,
  stormWorkerBundle,
} from "./helpers/storm.js";
import { recordTortureCounts } from "./helpers/torture-counts.js";

const SOAK = process.env.CAIRN_SOAK === "1";
/** The targets below are scale 1. The default run (npm test, CI) is scale 0.1: every kind
 *  of disturbance on both backends, 100 SIGKILLs, inside the suite's ten minutes (0.4 took
 *  94 s of a 727 s run, 0.25 about 82 s of an 870 s one, 0.15 about 42 s of a 650-720 s
 *  one). Each kill costs a worker process's start (node and the bundle, already as small as
 *  it gets): the file's time is its kills' CPU, so the count is what sets it. The thousands
 *  are the soak's (CAIRN_SOAK=1: scale 10).
 *  CAIRN_STORM_SCALE=0.05 (say) shrinks every target for a quick local run. */
const SCALE = Number(process.env.CAIRN_STORM_SCALE ?? (SOAK ? 10 : 0.1));
const n = (base: number) => Math.max(1, Math.ceil(base * SCALE));
const seed = stormSeed();
const TIMEOUT = SOAK ? 4_000_000 : 900_000;
/** Workers kept booted (not yet racing) to replace the killed at once. */
const SPARES = 2;
const STORM_KEYS = ["@now", "@random", "@uuid", "a", "pr", "nap", "go", "kid", "@now#2"];

interface Targets {
  workers: number;
  /** Runs to start at least: once the kill budget is spent, the rest race with kills a
   *  second or so apart. */
  minRuns: number;
  kills: number;
  zombies: number;
  terminations: number;
  restarts: number;
  leaseMs: number;
}

interface Counts {
  kills: number;
  zombies: number;
  terminations: number;
  restarts: number;
  runs: number;
  /** Writes the store refused a worker (fenced zombies, mostly). */
  rejectedWrites: number;
  /** Workers that exited without being killed (their stderr is kept). */
  unexpectedExits: number;
  /** Performs repeated under a key already applied (reported; the bar is per key). */
  repeatedPerforms: number;
}

/** Tries `fn` again while SQLite's write lock is held (by a zombie this process will
 *  continue), waiting asynchronously so the controller keeps running meanwhile. A write
 *  refused with SQLITE_BUSY never began its transaction: trying it again writes it once. */
async function retryBusy<T>(fn: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await fn();
    } catch (err) {
      const busy = /SQLITE_BUSY/.test(String((err as Error)?.message));
      if (!busy || i >= 1_200) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

const tmps: string[] = [];
afterAll(() => {
  for (const d of tmps) rmSync(d, { recursive: true, force: true });
  removeStormWorkerBundle();
});

async function runStorm(
  target: Targets,
  storage: {
    client: () => Engine;
    workerConfig: object;
    terminateOne?: () => Promise<boolean>;
    restart?: () => Promise<void>;
  },
  ledger: string,
): Promise<{ counts: Counts; failures: string[] }> {
  const rnd = seededRandom(seed ^ target.workers);
  const bundle = await stormWorkerBundle();
  const client = storage.client();
  const counts: Counts = {
    kills: 0,
    zombies: 0,
    terminations: 0,
    restarts: 0,
    runs: 0,
    rejectedWrites: 0,
    unexpectedExits: 0,
    repeatedPerforms: 0,
  };
  const failures: string[] = [];
  const fleet: StormWorker[] = [];
  const killed = new Set<StormWorker>();
  const config = { ...storage.workerConfig, ledger, leaseMs: target.leaseMs, concurrency: 32 };
  const startBatch = async (n: number) => {
    const first = counts.runs;
    counts.runs += n;
    const ids = Array.from({ length: n }, (_, k) => first + k);
    await pool(ids, 8, async (i) => {
      const h = await retryBusy(() => client.start(storm, { i }, { id: `storm-${i}` }));
      // Sent before the run waits: kept, and delivered to the wait.
      await retryBusy(() => client.sendEvent(h.id, "go", 7 * i));
    });
  };
  // Runs not yet finished (a failed or canceled run counts as finished: the checks at the
  // end report it).
  const unfinished = async () =>
    (
      await client.listRuns({
        workflow: "storm",
        status: ["pending", "running", "waiting", "paused"],
        limit: 1_000_000,
      })
    ).length;

  // The fleet is driven by a timer of its own, never by the loop below: a worker stopped as
  // a zombie may hold SQLite's write lock (or, on PostgreSQL, a row lock) that only its
  // SIGCONT releases, so a controller that sent its signals between store calls waited on
  // the zombie it was to continue (the storm hung until its timeout).
  /** The kill budget is spent: the remaining runs race, with kills further apart. */
  let calm = false;
  /** Runs finished at the last count; the deadline passed. */
  let done = 0;
  let givenUp = false;
  const act = () => {
    const now = Date.now();
    for (const w of fleet) {
      if (w.exited && !killed.has(w) && !w.err.startsWith("counted")) {
        counts.unexpectedExits++;
        failures.push(`worker ${w.pid} exited by itself: ${w.err.slice(0, 500)}`);
        w.err = `counted ${w.err}`;
      }
    }
    const live = fleet.filter((w) => !w.exited && !killed.has(w));
    // Racing: started and not stopped. Spares boot ahead (loaded, store open) and start on
    // "go" when one of the racers is gone, so kills are not paced by process start-up.
    let racing = live.filter((w) => w.started && !w.stopped).length;
    for (const w of live) {
      if (racing >= target.workers) break;
      if (w.booted && !w.started) {
        goStormWorker(w);
        racing++;
      }
    }
    const spares = live.filter((w) => !w.started).length;
    for (let k = spares; k < SPARES; k++) {
      const w = spawnStormWorker(bundle, config);
      w.zombie =
        counts.zombies + fleet.filter((x) => x.zombie && !x.exited).length < target.zombies &&
        rnd() < 0.25;
      fleet.push(w);
    }
    for (const w of live) {
      if (w.ready && w.actAt === Number.POSITIVE_INFINITY) {
        w.actAt = now + (calm ? 500 + rnd() * 1_000 : 10 + rnd() * 150);
      }
      if (now < w.actAt) continue;
      if (w.zombie && !w.stopped) {
        w.child.kill("SIGSTOP");
        w.stopped = true;
        w.zombie = false; // stopped once
        w.actAt = now + target.leaseMs + 100 + rnd() * 200;
      } else if (w.stopped) {
        w.child.kill("SIGCONT");
        w.stopped = false;
        counts.zombies++;
        w.actAt = now + 50 + rnd() * 250;
      } else {
        w.child.kill("SIGKILL");
        killed.add(w);
        counts.kills++;
      }
    }
  };

  // Starts batches, counts finished runs, and disturbs the server (PostgreSQL) until the
  // budget is spent and every run has finished.
  const drive = async () => {
    await startBatch(100);
    let nextTerminate = 0;
    let nextRestart = Date.now() + 1_000;
    let nextCount = 0;
    while (!givenUp) {
      const now = Date.now();
      if (
        storage.terminateOne &&
        counts.terminations < target.terminations &&
        now >= nextTerminate
      ) {
        if (await storage.terminateOne()) counts.terminations++;
        nextTerminate = now + 30 + rnd() * 120;
      }
      if (storage.restart && counts.restarts < target.restarts && now >= nextRestart) {
        await storage.restart();
        counts.restarts++;
        nextRestart = Date.now() + 1_000 + rnd() * 1_500;
      }
      if (now >= nextCount) {
        nextCount = now + 250;
        if (process.env.CAIRN_STORM_PROGRESS) {
          appendFileSync(
            process.env.CAIRN_STORM_PROGRESS,
            `${new Date().toISOString()} ${JSON.stringify({ ...counts, done })}\n`,
          );
        }
        done = counts.runs - (await unfinished());
        const budgetLeft = counts.kills < target.kills || counts.zombies < target.zombies;
        calm = !budgetLeft;
        if (budgetLeft && counts.runs - done < 40) await startBatch(60);
        else if (!budgetLeft && counts.runs < target.minRuns) {
          await startBatch(Math.min(500, target.minRuns - counts.runs));
        }
        const pgDone =
          counts.terminations >= target.terminations && counts.restarts >= target.restarts;
        if (!budgetLeft && pgDone && done === counts.runs && counts.runs >= target.minRuns) return;
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  };

  const actTimer = setInterval(act, 10);
  let giveUp: NodeJS.Timeout | undefined;
  try {
    // The deadline holds even if a store call never returns: the race ends, the fleet is
    // killed below, and the report says how far the storm got.
    const limitMs = SOAK ? 3_600_000 : 600_000;
    const outcome = await Promise.race([
      drive().then(() => "done" as const),
      new Promise<"late">((r) => {
        giveUp = setTimeout(() => r("late"), limitMs);
      }),
    ]);
    if (outcome === "late") {
      givenUp = true;
      failures.push(`gave up after ${limitMs / 1000} s: ${done} of ${counts.runs} runs completed`);
    }
  } finally {
    clearTimeout(giveUp);
    clearInterval(actTimer);
    for (const w of fleet) {
      if (w.exited) continue;
      if (w.stopped) w.child.kill("SIGCONT");
      w.child.kill("SIGKILL");
      if (!killed.has(w)) counts.kills++;
      killed.add(w);
    }
    await Promise.all(fleet.map((w) => w.done));
    for (const w of fleet) counts.rejectedWrites += (w.out.match(/^rejected /gm) ?? []).length;
  }

  // The pass bar.
  const runs = await client.listRuns({ workflow: "storm", limit: 1_000_000 });
  for (const r of runs) {
    const i = (r.input as { i: number }).i;
    if (r.status !== "completed" || r.output !== expectedStormOutput(i)) {
      failures.push(
        `run "${r.id}" is ${r.status} with ${JSON.stringify(r.output ?? r.error)}; expected ${expectedStormOutput(i)}`,
      );
      continue;
    }
    const keys = (await client.getSteps(r.id)).map((s) => `${s.key}:${s.status}`);
    const want = STORM_KEYS.map((k) => `${k}:completed`);
    if (JSON.stringify([...keys].sort()) !== JSON.stringify([...want].sort())) {
      failures.push(`run "${r.id}" journal: ${keys.join(" ")}`);
    }
  }
  if (runs.length !== counts.runs)
    failures.push(`${runs.length} runs found, ${counts.runs} started`);
  // The bar is per key, as a provider that honours idempotency keys applies them: every
  // run's effect applied exactly once. A perform repeated under the same key (a zombie
  // stopped between its lease check and its perform, a window no lease can close) is
  // counted and reported, not a failure.
  const markers = readFileSync(join(ledger, "effects.log"), "utf8").split("\n").filter(Boolean);
  const applied = new Set(markers).size;
  counts.repeatedPerforms = markers.length - applied;
  if (applied !== counts.runs) {
    failures.push(`${applied} effect keys applied for ${counts.runs} runs`);
  }
  await client.close();
  return { counts, failures };
}

function ledgerDir(): string {
  const d = mkdtempSync(join(tmpdir(), "cairn-storm-"));
  tmps.push(d);
  writeFileSync(join(d, "effects.log"), "");
  writeFileSync(join(d, "bodies.log"), "");
  return d;
}

describe("kill storm", () => {
  it(
    "SQLite: two workers racing, SIGKILLed and stopped as zombies, finish every run once",
    async () => {
      const ledger = ledgerDir();
      const db = join(ledger, "storm.db");
      const { counts, failures } = await runStorm(
        {
          workers: 2,
          minRuns: n(2_000),
          kills: n(500),
          zombies: n(100),
          terminations: 0,
          restarts: 0,
          leaseMs: 400,
        },
        {
          // A worker stopped as a zombie may hold SQLite's write lock until this process
          // continues it: a waiting write here must not block the event loop (better-sqlite3
          // waits synchronously), so it fails fast and is tried again (retryBusy).
          client: () =>
            createEngine({ store: sqliteStore(db, { busyTimeoutMs: 50 }), worker: false }),
          workerConfig: { sqlite: db },
        },
        ledger,
      );
      recordTortureCounts("kill-storm sqlite", { ...counts }, seed);
      expect(failures, `CAIRN_SEED=${seed} ${JSON.stringify(counts)}`).toEqual([]);
      expect(counts.kills).toBeGreaterThanOrEqual(n(500));
      expect(counts.zombies).toBeGreaterThanOrEqual(n(100));
    },
    TIMEOUT,
  );

  const pgIt = privateClusterAvailable() ? it : it.skip;
  pgIt(
    "PostgreSQL (private cluster): four workers, kills, zombies, backend terminations and server restarts",
    async () => {
      const cluster: PrivateCluster = await startPrivateCluster();
      const admin = new pg.Client({ connectionString: cluster.url });
      admin.on("error", () => {});
      const tag = `cairn-storm-${process.pid}`;
      const workerUrl = new URL(cluster.url);
      workerUrl.searchParams.set("application_name", tag);
      try {
        const ledger = ledgerDir();
        const rnd = seededRandom(seed ^ 0x5eed);
        let adminUp: pg.Client | undefined;
        const adminClient = async () => {
          if (adminUp) return adminUp;
          const c = new pg.Client({ connectionString: cluster.url });
          c.on("error", () => {
            adminUp = undefined;
          });
          await c.connect();
          adminUp = c;
          return c;
        };
        const { counts, failures } = await runStorm(
          {
            workers: 4,
            minRuns: 0,
            kills: n(500),
            zombies: n(100),
            terminations: n(100),
            restarts: n(10),
            leaseMs: 1_000,
          },
          {
            client: () =>
              createEngine({
                store: postgresStore(cluster.url, { schema: "storm", poolSize: 4 }),
                worker: false,
              }),
            workerConfig: { pg: { url: workerUrl.toString(), schema: "storm" } },
            terminateOne: async () => {
              try {
                const c = await adminClient();
                const r = await c.query<{ pid: number }>(
                  "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
                  [tag],
                );
                const victim = r.rows[Math.floor(rnd() * r.rows.length)];
                if (!victim) return false;
                const t = await c.query<{ ok: boolean }>("SELECT pg_terminate_backend($1) AS ok", [
                  victim.pid,
                ]);
                return t.rows[0]?.ok === true;
              } catch {
                adminUp = undefined;
                return false;
              }
            },
            restart: async () => {
              await adminUp?.end().catch(() => {});
              adminUp = undefined;
              await cluster.restart();
            },
          },
          ledger,
        );
        recordTortureCounts("kill-storm postgres", { ...counts }, seed);
        expect(failures, `CAIRN_SEED=${seed} ${JSON.stringify(counts)}`).toEqual([]);
        expect(counts.kills).toBeGreaterThanOrEqual(n(500));
        expect(counts.zombies).toBeGreaterThanOrEqual(n(100));
        expect(counts.terminations).toBeGreaterThanOrEqual(n(100));
        expect(counts.restarts).toBeGreaterThanOrEqual(n(10));
      } finally {
        await admin.end().catch(() => {});
        await cluster.destroy();
      }
    },
    TIMEOUT,
  );
});
