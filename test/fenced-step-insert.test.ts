// Attacks on SQLite's one-statement step write (journal-writes.ts, insertFenced, 012c70e:
// INSERT ... SELECT fenced by the run's epoch, the encrypted mark read in it while the store
// is believed unmarked; what it did not insert goes the usual way), beyond what
// sqlite-statements.test.ts holds: two processes (store objects on one file) where one's
// epoch went stale, generation > 0, a step with spend in a batch after steps without, a batch
// mixing runs and outcomes, hostile values (NUL, a 1 MB result, a lone surrogate), and the
// mark set by another process after this one's fenced insert had run (its statement
// prepared and cached): every outcome as the old path answered it, nothing extra stored.

import { randomBytes } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import {
  type EncryptionKey,
  EncryptionKeyMissingError,
  encryptedStore,
  type Store,
} from "../src/index.js";
import type { StepRecord } from "../src/store/store.js";
import { freshStorage } from "./helpers/engines.js";
import { stepOf } from "./helpers/step-records.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const step = (runId: string, over: Partial<StepRecord> = {}): StepRecord =>
  stepOf(runId, "s1", 1, {
    name: "s1",
    result: '"v"',
    startedAt: 1,
    completedAt: 2,
    delivery: 1,
    issuedAfter: 0,
    ...over,
  });

let now = 1_000;
const clock = { now: () => now } as never;

async function two(): Promise<{ a: Store; b: Store; make: () => Store }> {
  now = 1_000;
  const make = freshStorage("sqlite", cleanups);
  const a = make();
  const b = make();
  await a.open({ clock });
  cleanups.push(() => a.close());
  await b.open({ clock });
  cleanups.push(() => b.close());
  return { a, b, make };
}

async function claimed(s: Store, id: string, leaseMs = 60_000): Promise<number> {
  const { run } = await s.createRun({
    id,
    workflow: "wf",
    version: "1",
    input: "-1",
    budgetLimit: {},
    claimBy: { workerId: "w-a", leaseMs },
  });
  return run.epoch;
}

describe("SQLite's fenced step insert under attack", () => {
  it("a process whose lease another took writes nothing; the taker's record stands", async () => {
    const { a, b } = await two();
    const stale = await claimed(a, "r1", 100);
    expect(await a.appendRecords([{ runId: "r1", epoch: stale, steps: [step("r1")] }])).toEqual([
      { ok: true },
    ]);
    now += 1_000; // a's lease ends; b claims the run
    const [claim] = await b.claimRuns({
      workerId: "w-b",
      workflows: ["wf@1"],
      limit: 1,
      leaseMs: 60_000,
    });
    expect(claim?.run.epoch).toBe(stale + 1);
    const epoch = claim!.run.epoch;
    // a goes on with a new key and an identical rewrite: both refused as lease lost.
    for (const s of [step("r1", { key: "s2", seq: 2 }), step("r1")]) {
      expect(await a.appendRecords([{ runId: "r1", epoch: stale, steps: [s] }])).toEqual([
        { ok: false, reason: "lease-lost" },
      ]);
    }
    // b writes s2 its own way; a's s2 again: still refused, b's stands.
    const s2 = step("r1", { key: "s2", seq: 2, result: '"b"' });
    expect(await b.appendRecords([{ runId: "r1", epoch, steps: [s2] }])).toEqual([{ ok: true }]);
    expect(
      await a.appendRecords([{ runId: "r1", epoch: stale, steps: [step("r1", { key: "s2" })] }]),
    ).toEqual([{ ok: false, reason: "lease-lost" }]);
    expect((await a.loadJournal("r1")).steps.map((s) => [s.key, s.result])).toEqual([
      ["s1", '"v"'],
      ["s2", '"b"'],
    ]);
  });

  it("generations, spend after steps without, and a batch mixing runs answer as before", async () => {
    const { a } = await two();
    const e1 = await claimed(a, "r1");
    const e2 = await claimed(a, "r2");
    expect(
      await a.appendRecords([
        { runId: "r1", epoch: e1, steps: [step("r1")] },
        { runId: "r2", epoch: e2 + 1, steps: [step("r2")] }, // stale
        { runId: "nope", epoch: 1, steps: [step("nope")] }, // no such run
        { runId: "r1", epoch: e1, steps: [step("r1", { key: "s1", generation: 1, seq: 2 })] },
        { runId: "r1", epoch: e1, steps: [step("r1", { key: "p", seq: 3, spend: { usd: 2 } })] },
        { runId: "r2", epoch: e2, steps: [step("r2", { key: "q", seq: 1 })] },
        // Its own generation's identical rewrite, then another record under it.
        { runId: "r1", epoch: e1, steps: [step("r1", { key: "s1", generation: 1, seq: 2 })] },
        {
          runId: "r1",
          epoch: e1,
          steps: [step("r1", { key: "s1", generation: 1, seq: 2, result: '"w"' })],
        },
      ]),
    ).toEqual([
      { ok: true },
      { ok: false, reason: "lease-lost" },
      { ok: false, reason: "lease-lost" },
      { ok: true },
      { ok: true },
      { ok: true },
      { ok: true },
      { ok: false, reason: "conflict", key: "s1" },
    ]);
    // The spend step rewritten (an unknown outcome retried): counted once.
    expect(
      await a.appendRecords([
        { runId: "r1", epoch: e1, steps: [step("r1", { key: "p", seq: 3, spend: { usd: 2 } })] },
      ]),
    ).toEqual([{ ok: true }]);
    expect((await a.getRun("r1"))?.budgetSpent).toEqual({ usd: 2 });
    expect((await a.getRun("r2"))?.budgetSpent).toEqual({});
    const j = await a.loadJournal("r1");
    expect(j.steps.map((s) => [s.key, s.generation, s.result])).toEqual([
      ["s1", 0, '"v"'],
      ["s1", 1, '"v"'],
      ["p", 0, '"v"'],
    ]);
    expect((await a.loadJournal("r2")).steps.map((s) => s.key)).toEqual(["q"]);
  });

  it("hostile values: 1 MB with a NUL's escape stored exactly; a raw NUL, a lone surrogate refused alone", async () => {
    const { a } = await two();
    const e = await claimed(a, "r1");
    // A NUL's escape (codec text never holds a raw one), and the raw NUL and lone surrogate
    // no backend stores exactly (storable.ts): each refused alone, before the insert.
    const big = `"${"x".repeat(1 << 20)}\\u0000é😀"`;
    const nul = step("r1", { result: big });
    const raw = step("r1", { key: "raw", seq: 2, result: '"\u0000"' });
    const lone = step("r1", { key: "bad", seq: 3, result: '"\ud800"' });
    const unstorable = (key: string) =>
      expect.objectContaining({ ok: false, reason: "unstorable", key });
    expect(
      await a.appendRecords([
        { runId: "r1", epoch: e, steps: [raw] },
        { runId: "r1", epoch: e, steps: [nul] },
        { runId: "r1", epoch: e, steps: [lone] },
      ]),
    ).toEqual([unstorable("raw"), { ok: true }, unstorable("bad")]);
    // The same record again: a no-op, not a conflict (the stored text is the text given).
    expect(await a.appendRecords([{ runId: "r1", epoch: e, steps: [nul] }])).toEqual([
      { ok: true },
    ]);
    const [s] = (await a.loadJournal("r1")).steps;
    expect(s?.result === big).toBe(true);
    expect((await a.loadJournal("r1")).steps).toHaveLength(1);
  });

  it("a mark set by another process after this one's fenced inserts refuses its next plain step", async () => {
    const { a, make } = await two();
    const e = await claimed(a, "r1");
    // Fenced inserts before the mark (the statement reading the mark is prepared, cached).
    expect(await a.appendRecords([{ runId: "r1", epoch: e, steps: [step("r1")] }])).toEqual([
      { ok: true },
    ]);
    const k1: EncryptionKey = { id: "k1", key: randomBytes(32).toString("base64") };
    const keyed = encryptedStore(make(), { keys: [k1] });
    await keyed.open({ clock });
    cleanups.push(() => keyed.close());
    expect(await keyed.isMarkedEncrypted?.()).toBe(true);
    // A batch: a step holding nothing plain ("-1"), then a plain one: refused whole.
    const err = await a
      .appendRecords([
        { runId: "r1", epoch: e, steps: [step("r1", { key: "n", seq: 2, result: "-1" })] },
        { runId: "r1", epoch: e, steps: [step("r1", { key: "s2", seq: 3, result: '"SECRET"' })] },
      ])
      .then(
        () => undefined,
        (x: unknown) => x,
      );
    expect(err).toBeInstanceOf(EncryptionKeyMissingError);
    expect((await keyed.loadJournal("r1")).steps.map((s) => s.key)).toEqual(["s1"]);
    // A step holding nothing plain still goes, and the next plain one is refused again.
    expect(
      await a.appendRecords([
        { runId: "r1", epoch: e, steps: [step("r1", { key: "n", seq: 2, result: "-1" })] },
      ]),
    ).toEqual([{ ok: true }]);
    await expect(
      a.appendRecords([
        { runId: "r1", epoch: e, steps: [step("r1", { key: "s3", seq: 4, result: '"S"' })] },
      ]),
    ).rejects.toBeInstanceOf(EncryptionKeyMissingError);
    expect((await keyed.loadJournal("r1")).steps.map((s) => s.key)).toEqual(["s1", "n"]);
  });
});
