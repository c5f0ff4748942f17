// `tsx bench/plain-payload-guard.ts [writes]`: the CPU time (process.cpuUsage) the check of
// a store marked encrypted (store/plain-payloads.ts) adds to one appendRecords call of one
// step, against the raw floor of the same call without it, measured in the same run:
// - marked, ciphertext (an encryptedStore's writes): the envelope prefix of each payload;
// - unmarked, believed (a plain store's writes): a clock reading and a comparison.
// The write itself is a resolved promise, so the figure is the check's alone. Counts, not
// wall time: it holds on a loaded machine.

import { PlainPayloadGuard, plainInWrites } from "../src/store/plain-payloads.js";
import type { RunWrite } from "../src/store/store.js";

const writes = Number(process.argv[2] ?? 1_000_000);
const done = Promise.resolve([{ ok: true as const }]);
const write = () => done;
const step = (result: string): RunWrite[] => [
  {
    runId: "run_1",
    epoch: 1,
    steps: [
      {
        runId: "run_1",
        key: "s1",
        generation: 0,
        seq: 1,
        name: "s1",
        kind: "step",
        outcome: "ok",
        delivery: null,
        issuedAfter: null,
        issuedLate: false,
        result,
        error: null,
        spend: {},
        attempt: 1,
        startedAt: 1,
        completedAt: 2,
      },
    ],
  },
];

function cpuNsPer(fn: () => unknown): number {
  for (let i = 0; i < 10_000; i++) fn(); // warm-up
  const c0 = process.cpuUsage();
  for (let i = 0; i < writes; i++) fn();
  const c = process.cpuUsage(c0);
  return ((c.user + c.system) * 1000) / writes;
}

const cipher = step(`cairn:enc:1:k1:${"A".repeat(64)}`);
const plain = step('"hello"');
let t = 0;
const clock = () => t;
const marked = new PlainPayloadGuard("bench", async () => true, clock);
marked.saw(true);
const unmarked = new PlainPayloadGuard("bench", async () => false, clock);
unmarked.saw(false);

const floor = cpuNsPer(() => write());
const markedNs = cpuNsPer(() => marked.admit(() => plainInWrites(cipher), write));
const unmarkedNs = cpuNsPer(() => unmarked.admit(() => plainInWrites(plain), write));
t = 0;
const fmt = (ns: number) => `${ns.toFixed(1)} ns`;
console.log(`writes: ${writes}; raw floor (the write alone): ${fmt(floor)} CPU per call`);
console.log(
  `marked store, ciphertext:  ${fmt(markedNs)} (+${fmt(markedNs - floor)}, ${(markedNs / floor).toFixed(2)}x the floor)`,
);
console.log(
  `unmarked store, plain:     ${fmt(unmarkedNs)} (+${fmt(unmarkedNs - floor)}, ${(unmarkedNs / floor).toFixed(2)}x the floor)`,
);
