// `tsx bench/replay-core.ts [steps] [--pairs=N]`: the replay core's JavaScript per replayed
// step, with no store, engine or worker (issue 13: resume within 2x of reading the rows raw).
// A Context is handed a journal of `steps` recorded steps (as the bench loop records them:
// "s", "s#2", ..., each handed over in turn, its value `{ i }`) and replays it to the end of
// the loop; the same for a journal of none. Printed per replayed step: the process's CPU
// time (process.cpuUsage), as the median over alternating pairs of the `steps` replay less
// the empty one, and the asynchronous resources made (by type; each costs the async hook).
// PROFILE=OUT.cpuprofile: a CPU profile of the long replays (bench/profile-summary.ts with
// pairs x steps).

import { createHook } from "node:async_hooks";
import { writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import type { Journal, StepRecord } from "../src/store/store.js";
import type { WorkflowContext } from "../src/workflow/context-types.js";
import { testContextHost } from "../test/helpers/context-host.js";
import { fromSource } from "./cairn.js";

const root = fromSource ? "../src" : "../dist";
const { Context }: typeof import("../src/workflow/context.js") = await import(
  `${root}/workflow/context.js`
);
const { encode }: typeof import("../src/codec/codec.js") = await import(`${root}/codec/codec.js`);

const args = process.argv.slice(2);
const steps = Number(args.find((a) => !a.startsWith("--")) ?? 1000);
const pairs = Number(args.find((a) => a.startsWith("--pairs="))?.slice(8) ?? 40);

function journalOf(n: number): Journal {
  const recs: StepRecord[] = [];
  for (let i = 0; i < n; i++) {
    recs.push({
      runId: "r",
      key: i === 0 ? "s" : `s#${i + 1}`,
      generation: 0,
      seq: i,
      name: "s",
      kind: "step",
      outcome: "ok",
      result: encode({ i }),
      error: null,
      spend: {},
      attempt: 1,
      startedAt: 0,
      completedAt: 0,
      delivery: i,
      issuedAfter: i,
      issuedLate: false,
    });
  }
  return { steps: recs, attempts: [], intents: [], events: [] };
}

async function loop(ctx: WorkflowContext, input: { steps: number }): Promise<number> {
  let sum = 0;
  for (let i = 0; i < input.steps; i++) {
    sum += (await ctx.step("s", async () => ({ i }))).i;
  }
  return sum;
}

const host = () => testContextHost();

const cpu = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

/** Replays a fresh copy of the journal of `n` steps (the store hands each execution its own
 *  records); the CPU time of the replay alone, in us. */
async function replay(n: number): Promise<number> {
  const journal = journalOf(n);
  const c0 = cpu();
  const outcome = await new Context(host(), journal).start(loop as never, { steps: n });
  const used = cpu() - c0;
  if (outcome.kind !== "completed" || outcome.output !== (n * (n - 1)) / 2 + 0) {
    throw new Error(`replay-core: the replay ended ${JSON.stringify(outcome)}`);
  }
  return used;
}

for (let i = 0; i < 10; i++) {
  await replay(steps);
  await replay(0);
}
const perStep: number[] = [];
for (let i = 0; i < pairs; i++) {
  const a = await replay(steps);
  const b = await replay(0);
  perStep.push((a - b) / steps);
}
perStep.sort((x, y) => x - y);
const counts = new Map<string, number>();
let sign = 0;
const hook = createHook({
  init(_id, type) {
    if (sign !== 0) counts.set(type, (counts.get(type) ?? 0) + sign);
  },
});
hook.enable();
sign = 1;
await replay(steps);
sign = -1;
await replay(0);
sign = 0;
hook.disable();
console.log(
  `replay core, per replayed step (${steps} steps less 0, ${pairs} pairs): CPU median ${perStep[pairs >> 1]!.toFixed(2)} us (quartiles ${perStep[pairs >> 2]!.toFixed(2)}, ${perStep[(3 * pairs) >> 2]!.toFixed(2)})`,
);
console.log(
  `  resources: ${[...counts]
    .filter(([, v]) => v !== 0)
    .map(([k, v]) => `${k} ${(v / steps).toFixed(2)}`)
    .join(", ")}`,
);
const profile = process.env.PROFILE;
if (profile) {
  const session = new Session();
  session.connect();
  await session.post("Profiler.enable");
  await session.post("Profiler.setSamplingInterval", { interval: 50 });
  await session.post("Profiler.start");
  for (let i = 0; i < pairs; i++) await replay(steps);
  const { profile: p } = await session.post("Profiler.stop");
  writeFileSync(profile, JSON.stringify(p));
  console.log(`profile of ${pairs} replays (${pairs * steps} replayed steps) in ${profile}`);
}
