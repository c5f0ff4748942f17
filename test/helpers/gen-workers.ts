// Where the generative replay test's runs execute (see gen-harness.ts): fresh storage of
// either backend, and the workers of one run, one per incarnation. In-process workers are
// engines on a crashable store (src/testing/crashable-store.ts), driven by a virtual clock;
// a kill stops one dead and the next takes over after the lease. Process workers are
// test/fixtures/gen-worker.ts, bundled once and kept warm, and really SIGKILLed (by the test
// on a timer, or by themselves at a crash point).

import type { ChildProcess } from "node:child_process";
import { spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { createEngine, type Engine, realClock, type Store, sqliteStore } from "../../src/index.js";
import { postgresStore } from "../../src/postgres.js";
import type { RunRecord } from "../../src/store/store.js";
import { type CrashableStore, crashableStore } from "../../src/testing/crashable-store.js";
import type { VirtualClock } from "../../src/testing/index.js";
import { FIXTURES } from "./child.js";
import { storePredicates, type Trigger } from "./gen-crash-points.js";
import { interpreterWorkflows } from "./gen-interpreter.js";
import type { Incarnation, Ledger } from "./gen-ledger.js";
import { testSchema } from "./postgres.js";

export type Backend = "sqlite" | "postgres";

/** Virtual lease of in-process workers; a takeover advances the clock past it. */
const LEASE_MS = 10_000;
/** Virtual time per driving tick (sleeps are 1-40 ms, timeouts 5-60 ms). */
const TICK_MS = 20;

export interface Storage {
  /** Makes the storage ready for its first store (before `mk`). */
  prepare(): Promise<void>;
  mk(): Store;
  /** For worker processes. */
  spec: { kind: "sqlite"; path: string } | { kind: "postgres"; url: string; schema: string };
  drop(): Promise<void>;
}

export function storage(backend: Backend, dir: string, pgUrl: string | undefined): Storage {
  if (backend === "sqlite") {
    const path = join(dir, "cairn.db");
    return {
      prepare: async () => copyFileSync(await migratedSqlite(), path),
      mk: () => sqliteStore(path, { synchronous: "normal" }),
      spec: { kind: "sqlite", path },
      drop: async () => {},
    };
  }
  if (!pgUrl) throw new Error("PostgreSQL backend without a database URL");
  const { schema, drop } = testSchema(pgUrl, "cairn_gen");
  return {
    prepare: async () => {},
    // Small pools: the server is shared (max_connections), and a dead engine keeps its own.
    mk: () => postgresStore(pgUrl, { schema, poolSize: 2 }),
    spec: { kind: "postgres", url: pgUrl, schema },
    drop,
  };
}

let template: Promise<string> | undefined;

/** An empty SQLite database at the newest migration, made once per test process: each case
 *  runs on two fresh databases (hundreds per run), and migrating each from nothing was about
 *  a tenth of the in-process cases' CPU. A copy is the file the migrations make (they write
 *  no per-database value); the migrations themselves are tested in their own files. */
function migratedSqlite(): Promise<string> {
  template ??= (async () => {
    const dir = mkdtempSync(join(existsSync("/dev/shm") ? "/dev/shm" : tmpdir(), "cairn-gen-tpl-"));
    process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, "migrated.db");
    const store = sqliteStore(path, { synchronous: "normal" });
    await store.open({ clock: realClock });
    await store.close();
    return path;
  })();
  return template;
}

export interface LiveWorker {
  no: number;
  readonly killed: boolean;
  storeCalls(): number;
  /** For stuck reports. */
  describe(): string;
  /** Ends the worker after the run finished (gracefully; stragglers are silenced). */
  stop(): Promise<void>;
  /** After its kill: resolves once what the worker had sent to the storage before it died
   *  has landed or failed, so the storage is as the kill left it (what the next worker
   *  finds). A record still on the wire at the kill may commit a moment later; read before
   *  that, a kill snapshot misses an outcome the recovery then builds on. */
  settled(): Promise<void>;
}

export interface WorkerHost {
  start(no: number, trigger: Trigger | undefined): Promise<LiveWorker>;
  /** Lets time pass while the run (as last read) executes. */
  tick(run?: RunRecord): Promise<void>;
  /** After a kill, before the next worker starts. */
  afterKill(): Promise<void>;
  close(): Promise<void>;
}

function realDelay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export class InProcessHost implements WorkerHost {
  /** The engine of the current incarnation. */
  private live: Engine | undefined;

  constructor(
    private readonly st: Storage,
    private readonly ledger: Ledger,
    private readonly clock: VirtualClock,
    private readonly log: (m: string, err?: unknown) => void,
  ) {}

  async start(no: number, trigger: Trigger | undefined): Promise<LiveWorker> {
    const inc: Incarnation = { no, dead: false };
    let killed = false;
    let engine: Engine | undefined;
    let timer: NodeJS.Timeout | undefined;
    // The kill, from whichever trigger: the store and the incarnation die together, at once
    // (the ledger drops the incarnation's writes from now on, as a dead process makes none).
    const kill = () => {
      if (inc.dead) return;
      inc.dead = true;
      killed = true;
      store.crash();
      if (timer) clearTimeout(timer);
      this.ledger.onWrite = undefined;
      // Its timers stop; everything else it tries hangs on the dead store.
      queueMicrotask(() => void engine?.close().catch(() => {}));
    };
    const preds = storePredicates(trigger, kill);
    const store: CrashableStore = crashableStore(this.st.mk(), {
      crashBefore: preds.crashBefore,
      crashAfter: preds.crashAfter,
    });
    if (trigger?.kind === "ledger") {
      const base = this.ledger.writes;
      this.ledger.onWrite = (count) => {
        if (count - base >= trigger.n) kill();
      };
    } else {
      this.ledger.onWrite = undefined;
    }
    engine = createEngine({
      store,
      workflows: [...interpreterWorkflows({ ledger: this.ledger.view(inc), inc })],
      clock: this.clock,
      leaseMs: LEASE_MS,
      // Heartbeats follow the virtual clock (every advance); the real interval is moot.
      heartbeatMs: 3_600_000,
      pollIntervalMs: 5,
      closeGraceMs: 0,
      // A non-deterministic program that drops a call made after its own I/O is caught when
      // the replay has waited this long for it (real time): well inside the harness's
      // STUCK_MS, far beyond any I/O of a generated program.
      replayStallMs: 8_000,
      log: (m, err) => {
        if (!inc.dead) this.log(`worker ${no}: ${m}`, err);
      },
    });
    this.live = engine;
    if (trigger?.kind === "time") timer = setTimeout(kill, trigger.ms);
    return {
      no,
      get killed() {
        return killed;
      },
      storeCalls: () => preds.count(),
      settled: () => store.settled(),
      describe: () => `${JSON.stringify(engine?.metrics())}, store calls ${store.calls}`,
      stop: async () => {
        if (timer) clearTimeout(timer);
        this.ledger.onWrite = undefined;
        if (!killed) await engine?.close();
        inc.dead = true;
      },
    };
  }

  async tick(run?: RunRecord): Promise<void> {
    const live = this.live;
    if (
      run?.status === "running" &&
      run.leaseUntil !== null &&
      live &&
      run.leaseOwner !== live.workerId &&
      live.metrics().activeExecutions === 0
    ) {
      // A dead engine holds the lease: a claim it had in flight at its crash committed after
      // the crash (as a killed process's last transaction may). Let that lease run out now.
      await this.clock.set(run.leaseUntil + 1);
    }
    await this.clock.advance(TICK_MS);
    // Every advance makes the engine heartbeat and poll: a real pause keeps that cheap.
    await realDelay(2);
  }

  async afterKill(): Promise<void> {
    // Date.now()-named calls must see another millisecond in the next incarnation.
    await realDelay(2);
    await this.clock.advance(LEASE_MS + 1);
  }

  async close(): Promise<void> {}
}

let bundled: Promise<string> | undefined;

/** test/fixtures/gen-worker.ts bundled into one ES module (dependencies stay external), built
 *  once per test process: a worker then starts in a third of the time `node --import tsx`
 *  takes, which is what bounds the SIGKILL runs on a small machine. */
function workerScript(): Promise<string> {
  bundled ??= (async () => {
    const { build } = await import("esbuild");
    const root = fileURLToPath(new URL("../../", import.meta.url));
    const outfile = join(
      root,
      "node_modules",
      ".cache",
      "cairn-test",
      `gen-worker-${process.pid}.mjs`,
    );
    await build({
      entryPoints: [`${FIXTURES}gen-worker.ts`],
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      packages: "external",
      outfile,
      logLevel: "error",
    });
    process.once("exit", () => rmSync(outfile, { force: true }));
    return outfile;
  })();
  return bundled;
}

interface ProcessWorker {
  child: ChildProcess;
  exited: boolean;
  signal: NodeJS.Signals | null;
  stderr: string;
  stdout: string;
  done: Promise<void>;
}

function spawnWorker(script: string): ProcessWorker {
  const child = spawn(process.execPath, [script], {
    stdio: ["pipe", "pipe", "pipe"],
    env: process.env,
  });
  const w: ProcessWorker = {
    child,
    exited: false,
    signal: null,
    stderr: "",
    stdout: "",
    done: Promise.resolve(),
  };
  child.stdout?.on("data", (d) => {
    w.stdout += d;
  });
  child.stderr?.on("data", (d) => {
    w.stderr += d;
  });
  w.done = new Promise<void>((resolve) => {
    child.on("close", (_code, signal) => {
      w.exited = true;
      w.signal = signal;
      resolve();
    });
    child.on("error", () => {
      w.exited = true;
      resolve();
    });
  });
  return w;
}

/** Worker processes kept warm for every SIGKILL case of this test process: loading Node and
 *  the bundle takes longer than most runs, so it happens while other work goes on. An idle
 *  worker exits by itself when this process goes away (its stdin closes). */
const warm: ProcessWorker[] = [];
const WARM_WORKERS = 2;

async function takeWorker(): Promise<ProcessWorker> {
  const script = await workerScript();
  let w = warm.shift();
  while (w?.exited) w = warm.shift();
  while (warm.length < WARM_WORKERS) warm.push(spawnWorker(script));
  return w ?? spawnWorker(script);
}

/** Kills the idle warm workers (call once every SIGKILL case is done). */
export async function closeWorkerPool(): Promise<void> {
  const idle = warm.splice(0);
  for (const w of idle) w.child.kill("SIGKILL");
  await Promise.all(idle.map((w) => w.done));
}

async function waitForOutput(w: ProcessWorker, text: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!w.stdout.includes(text)) {
    if (w.exited) throw new Error(`gen-worker exited before "${text}": ${w.stderr}`);
    if (Date.now() > deadline) throw new Error(`gen-worker did not print "${text}": ${w.stderr}`);
    await realDelay(5);
  }
}

function withApplicationName(url: string, name: string): string {
  const u = new URL(url);
  u.searchParams.set("application_name", name);
  return u.toString();
}

/** Waits until the server has no session named `name` left: a killed client's sessions end
 *  once the server is done with what they had sent (it then reads the closed socket). */
async function sessionsGone(url: string, name: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const deadline = Date.now() + 30_000;
  try {
    while (Date.now() < deadline) {
      const r = await client.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1",
        [name],
      );
      if (r.rows[0]?.n === 0) return;
      await realDelay(5);
    }
  } finally {
    await client.end();
  }
}

/** Worker processes (test/fixtures/gen-worker.ts) taken from the warm pool, one per
 *  incarnation of the run. */
export class ProcessHost implements WorkerHost {
  constructor(
    private readonly st: Storage,
    private readonly ledger: Ledger,
  ) {}

  async start(no: number, trigger: Trigger | undefined): Promise<LiveWorker> {
    const w = await takeWorker();
    await waitForOutput(w, "loaded");
    // On PostgreSQL the worker's sessions carry its pid, so that once it is killed the test
    // can wait for the server to be done with them (settled()).
    const session = `cairn-gen-worker-${w.child.pid}`;
    const spec = this.st.spec;
    const store =
      spec.kind === "postgres" ? { ...spec, url: withApplicationName(spec.url, session) } : spec;
    const orders = {
      no,
      trigger: trigger?.kind === "time" ? undefined : trigger,
      store,
      ledger: this.ledger.path,
    };
    w.child.stdin?.write(`${JSON.stringify(orders)}\n`);
    await waitForOutput(w, "ready").catch((err) => {
      // A self-kill can come before "ready" (a crash point in the first store calls).
      if (!(w.exited && w.signal === "SIGKILL")) throw err;
    });
    let timer: NodeJS.Timeout | undefined;
    if (trigger?.kind === "time") timer = setTimeout(() => w.child.kill("SIGKILL"), trigger.ms);
    return {
      no,
      get killed() {
        if (w.exited && w.signal !== "SIGKILL") {
          throw new Error(
            `gen-worker ${no} exited (${w.signal ?? "code"}) without being killed: ${w.stderr}`,
          );
        }
        return w.exited;
      },
      storeCalls: () => 0,
      settled: async () => {
        await w.done;
        // A COMMIT the process had sent before the kill is still carried out by the server.
        if (spec.kind === "postgres") await sessionsGone(spec.url, session);
      },
      describe: () => `pid ${w.child.pid}, stderr ${w.stderr.slice(-300)}`,
      stop: async () => {
        if (timer) clearTimeout(timer);
        if (!w.exited) w.child.kill("SIGTERM");
        await w.done;
      },
    };
  }

  async tick(_run?: RunRecord): Promise<void> {
    await realDelay(5);
  }

  async afterKill(): Promise<void> {}

  async close(): Promise<void> {}
}
