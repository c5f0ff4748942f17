// `tsx bench/pg-cpu-per-run.ts [runs] [url]`: on PostgreSQL, the client's CPU time
// (process.cpuUsage) per 20-step run started and awaited one after another, and per run of
// the raw floor (the same 20 rows as single-row INSERTs, one transaction each, on one
// connection); the round trips each makes (queries sent on any connection of this process,
// counted at pg.Client.prototype.query) and the notifications this process hears; and the
// store verbs a run calls; and, for a local server, the server's CPU per run (its backends'
// on-CPU time from each query's send to its answer, by statement). CPU and counts, not wall
// time: the figures hold on a loaded machine. The schema is one of its own, dropped at the end. PROFILE_ONLY=1 runs cairn's
// runs alone (for `node --cpu-prof --import tsx`), leaving the schema behind. INPUT_BYTES=n
// gives each run an input padded to about n bytes (the bytes each run receives from the
// server, counted on every pg connection's socket, then show what comes back of it).

import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import pg from "pg";
import { cairn, cairnPostgres } from "./cairn.js";
import { countedStore } from "./lib.js";
import { benchPgUrl, pgFloor, STEPS } from "./pg-floor.js";
import { loop } from "./workflows.js";

const { createEngine } = cairn;
const { postgresStore } = cairnPostgres;
const runs = Number(process.argv[2] ?? 300);
const url = benchPgUrl(process.argv[3]);

// Every query any pg client of this process sends, every notification it hears, and the
// bytes its connections receive.
let queries = 0;
let notifications = 0;
let bytesIn = 0;
const counting = new WeakSet<object>();
const padding = "x".repeat(Number(process.env.INPUT_BYTES ?? 0));
const proto = pg.Client.prototype as unknown as {
  query: (...args: unknown[]) => unknown;
  emit: (event: string, ...args: unknown[]) => boolean;
};
const realQuery = proto.query;
/** While set, each query's server CPU: its backend's on-CPU time (Linux's
 *  /proc/<pid>/schedstat, in ns; a local server only) from the query's send to its answer,
 *  by statement (its prepared name, or the start of its text). Not while the client's CPU is
 *  measured: two file reads a query. */
let serverCpu: Map<string, { n: number; us: number }> | undefined;
function backendNs(pid: number): number | undefined {
  try {
    return Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[0]);
  } catch {
    return undefined;
  }
}
proto.query = function (
  this: { processID?: number; connection?: { stream?: NodeJS.EventEmitter } },
  ...args: unknown[]
) {
  queries++;
  const stream = this.connection?.stream;
  if (stream && !counting.has(stream)) {
    counting.add(stream);
    stream.on("data", (b: Buffer) => {
      bytesIn += b.length;
    });
  }
  const pid = this.processID;
  const byStatement = serverCpu;
  const ns0 = byStatement && pid ? backendNs(pid) : undefined;
  const answer = realQuery.apply(this, args);
  if (byStatement && pid && ns0 !== undefined && answer instanceof Promise) {
    const q = args[0] as string | { name?: string; text?: string };
    const what = (typeof q === "string" ? q : (q.name ?? q.text ?? "")).replace(/\s+/g, " ");
    const done = () => {
      const ns1 = backendNs(pid);
      if (ns1 === undefined) return;
      const key = what.slice(0, 48);
      const e = byStatement.get(key) ?? { n: 0, us: 0 };
      e.n++;
      e.us += (ns1 - ns0) / 1000;
      byStatement.set(key, e);
    };
    answer.then(done, done);
  }
  return answer;
};
const realEmit = proto.emit;
proto.emit = function (this: unknown, event: string, ...args: unknown[]) {
  if (event === "notification") notifications++;
  return realEmit.call(this, event, ...args);
};

const schema = `cairn_cpu_${randomBytes(4).toString("hex")}`;
const store = postgresStore(url, { schema });
const calls = new Map<string, number>();
const engine = createEngine({
  store: countedStore(store, calls),
  workflows: [loop],
  concurrency: 10,
});
const { cairnRun, floorRun, open, close } = pgFloor(
  "pg-cpu-per-run",
  url,
  schema,
  engine,
  padding === "" ? undefined : { pad: padding },
);

interface Figures {
  cpuUs: number;
  queries: number;
  notifications: number;
  bytesIn: number;
}

async function measure(n: number, one: () => Promise<void>): Promise<Figures> {
  const q0 = queries;
  const n0 = notifications;
  const b0 = bytesIn;
  const c0 = process.cpuUsage();
  for (let i = 0; i < n; i++) await one();
  const c = process.cpuUsage(c0);
  return {
    cpuUs: (c.user + c.system) / n,
    queries: (queries - q0) / n,
    notifications: (notifications - n0) / n,
    bytesIn: (bytesIn - b0) / n,
  };
}

try {
  await open();
  if (process.env.PROFILE_ONLY === "1") {
    // For `node --cpu-prof`: cairn's runs alone, after the same warm-up.
    await measure(runs / 4, cairnRun);
    const c = await measure(runs, cairnRun);
    console.log(`cairn ${c.cpuUs.toFixed(0)} us/run over ${runs} runs (${runs * STEPS} steps)`);
    process.exit(0);
  }
  for (let i = 0; i < 2; i++) {
    await measure(runs / 4, cairnRun);
    await measure(runs / 4, floorRun);
  }
  const lines: string[] = [];
  for (let i = 0; i < 3; i++) {
    const c = await measure(runs, cairnRun);
    const f = await measure(runs, floorRun);
    calls.clear();
    serverCpu = new Map();
    await measure(20, cairnRun);
    const cairnServer = serverCpu;
    serverCpu = new Map();
    await measure(20, floorRun);
    const floorServer = serverCpu;
    serverCpu = undefined;
    await new Promise((r) => setTimeout(r, 20)); // the last answers' reads
    const perRun = [...calls].map(([v, k]) => `${v} ${k / 20}`).join(", ");
    const total = (m: typeof serverCpu) =>
      [...(m ?? new Map()).values()].reduce((a, e) => a + e.us, 0);
    const statements = [...cairnServer]
      .sort((a, b) => b[1].us - a[1].us)
      .map(([k, e]) => `${(e.n / 20).toFixed(2)} x ${k} ${(e.us / e.n).toFixed(0)} us`)
      .join("; ");
    lines.push(
      `cairn ${c.cpuUs.toFixed(0)} us/run, ${c.queries.toFixed(2)} queries/run, ` +
        `${c.notifications.toFixed(2)} notifications/run, ${c.bytesIn.toFixed(0)} bytes in/run; floor ${f.cpuUs.toFixed(0)} us/run, ` +
        `${f.queries.toFixed(2)} queries/run; ratio ${(c.cpuUs / f.cpuUs).toFixed(2)} (${perRun})`,
    );
    lines.push(
      `  server CPU (local backends' schedstat): cairn ${(total(cairnServer) / 20).toFixed(0)} us/run, ` +
        `floor ${(total(floorServer) / 20).toFixed(0)} us/run; cairn by statement: ${statements}`,
    );
  }
  console.log(lines.join("\n"));
} finally {
  await close();
}
