// `tsx bench/pg-step-gap.ts [runs] [url]`: where a sequential 20-step run's time goes on
// PostgreSQL, beside the raw floor (20 single-row INSERTs on one connection), the two
// alternated run by run. For every query: the time from the previous query's answer to its
// send (the client's JavaScript on the critical path: nothing is in flight meanwhile) and
// from its send to its answer (server, network and the commit's flush; and the event
// loop's busy time within it: JavaScript that ran while the answer was awaited, which
// delays its reading if it outlasts the server), by statement. A
// step's gap is split at the store's edge: the store's receive path (the INSERT's answer to
// appendRecords resolving), the engine (that to the next appendRecords call) and the
// store's send path (that call to the INSERT's send). Wall time: on a loaded machine the
// medians move, and the split is what to read. The schema is one of its own, dropped at
// the end.

import { randomBytes } from "node:crypto";
import pg from "pg";
import type { Store } from "../src/index.js";
import { cairn, cairnPostgres } from "./cairn.js";
import { benchPgUrl, pgFloor, STEPS } from "./pg-floor.js";
import { loop } from "./workflows.js";

const runs = Number(process.argv[2] ?? 200);
const url = benchPgUrl(process.argv[3]);
const schema = `cairn_gap_${randomBytes(4).toString("hex")}`;

let on = false;
let lastAnswer = 0;
let storeCalled = 0;
let storeAnswered: number | undefined;
const byStatement = new Map<string, { gap: number[]; trip: number[]; busy: number[] }>();
const split = { receive: [] as number[], engine: [] as number[], send: [] as number[] };

const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
const realQuery = proto.query;
proto.query = function (this: unknown, ...args: unknown[]) {
  const sent = performance.now();
  const answer = realQuery.apply(this, args);
  const elu0 = performance.eventLoopUtilization();
  if (on && answer instanceof Promise) {
    const q = args[0] as string | { name?: string; text?: string };
    const key = (typeof q === "string" ? q : (q.name ?? q.text ?? ""))
      .replace(/\s+/g, " ")
      .replace(/"cairn_gap_[0-9a-f]+"\./g, "")
      .slice(0, 48);
    const gap = sent - lastAnswer;
    if (key === "cairn_insert_single_step") split.send.push((sent - storeCalled) * 1000);
    answer.then(
      () => {
        lastAnswer = performance.now();
        const e = byStatement.get(key) ?? { gap: [], trip: [], busy: [] };
        e.gap.push(gap * 1000);
        e.trip.push((lastAnswer - sent) * 1000);
        e.busy.push(performance.eventLoopUtilization(elu0).active * 1000);
        byStatement.set(key, e);
      },
      () => {},
    );
  }
  return answer;
};

const base = cairnPostgres.postgresStore(url, { schema });
const store = new Proxy(base, {
  get(target, prop, receiver) {
    const value = Reflect.get(target, prop, receiver);
    if (typeof value !== "function") return value;
    if (prop !== "appendRecords") return value.bind(target);
    return (...args: unknown[]) => {
      storeCalled = performance.now();
      if (on && storeAnswered !== undefined) {
        split.engine.push((storeCalled - storeAnswered) * 1000);
      }
      storeAnswered = undefined;
      return (value.apply(target, args) as Promise<unknown>).then((out) => {
        storeAnswered = performance.now();
        if (on) split.receive.push((storeAnswered - lastAnswer) * 1000);
        return out;
      });
    };
  },
}) as Store;
const engine = cairn.createEngine({ store, workflows: [loop], concurrency: 10 });
const { cairnRun, floorRun, open, close } = pgFloor("pg-step-gap", url, schema, engine);

const median = (xs: number[]) => xs.slice().sort((a, b) => a - b)[xs.length >> 1] ?? 0;

try {
  await open();
  for (let i = 0; i < Math.max(20, runs / 4); i++) {
    await cairnRun();
    await floorRun();
  }
  const wall = { cairn: [] as number[], floor: [] as number[] };
  on = true;
  for (let i = 0; i < runs; i++) {
    storeAnswered = undefined;
    const c0 = performance.now();
    lastAnswer = c0;
    await cairnRun();
    wall.cairn.push((performance.now() - c0) * 1000);
    const t0 = performance.now();
    lastAnswer = t0;
    await floorRun();
    wall.floor.push((performance.now() - t0) * 1000);
  }
  on = false;
  console.log(
    `${runs} runs of ${STEPS} steps, alternated with the floor's; us, medians. Wall per run: ` +
      `cairn ${median(wall.cairn).toFixed(0)}, floor ${median(wall.floor).toFixed(0)}`,
  );
  console.log(
    `a step's gap: store receive path ${median(split.receive).toFixed(0)}, engine ` +
      `${median(split.engine).toFixed(0)}, store send path ${median(split.send).toFixed(0)}`,
  );
  for (const [key, e] of [...byStatement].sort((a, b) => b[1].gap.length - a[1].gap.length)) {
    console.log(
      `${(e.gap.length / runs).toFixed(2).padStart(6)}/run  gap before ${median(e.gap).toFixed(0).padStart(5)}` +
        `  send->answer ${median(e.trip).toFixed(0).padStart(5)} (the loop busy` +
        ` ${median(e.busy).toFixed(0).padStart(4)} of it)  ${key}`,
    );
  }
} finally {
  await close();
}
