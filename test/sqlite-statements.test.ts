// The SQLite statements a run executes, counted (better-sqlite3's Statement methods wrapped),
// for 20-step runs started and awaited one after another through the engine:
// - a step is ONE statement besides its transaction's BEGIN and COMMIT: its insert reads the
//   run's epoch (the fence) and the store's encrypted mark inside itself (journal-writes.ts,
//   insertFenced), where the mark read, the epoch read and the insert were three;
// - no statement of a run hands back a runs row as an object (27 properties better-sqlite3
//   sets one by one): a release read one and had one RETURNING (run-control.ts, releaseInTx).
// And the paths that one statement hands back to: a lost lease, an identical rewrite, a key
// taken by another record, a marked store.

import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { createEngine, sqliteStore, workflow } from "../src/index.js";
import type { StepRecord } from "../src/store/store.js";
import { createVirtualClock } from "../src/testing/index.js";
import { type StatementCounts, statementCounts } from "./helpers/sqlite-statement-counts.js";
import { stepOf } from "./helpers/step-records.js";

// The guard's background mark read (a cost per second, not per run) is counted apart: see
// helpers/sqlite-statement-counts.ts.
let c: StatementCounts;
beforeAll(() => {
  c = statementCounts();
});

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  c.counting = false;
  for (const f of cleanups.splice(0).reverse()) await f();
});

const loop = workflow(
  { name: "loop", version: "1" },
  async (ctx, input: { steps: number }): Promise<number> => {
    let sum = 0;
    for (let i = 0; i < input.steps; i++) sum += (await ctx.step("s", async () => ({ i }))).i;
    return sum;
  },
);

function statementsLike(re: RegExp): number {
  return c.like(re);
}

describe("SQLite statements per run (counted)", () => {
  it("a step is one statement, and no runs row comes back as an object", async () => {
    // A clock that stands still: no heartbeat round (every leaseMs / 3) falls in the counted
    // window, whose renewal writes read the mark too (a loaded machine stretched the window
    // past the default 10 s and counted one mark read more), nor the guard's read of the mark
    // again once its last is a second old (plain-payloads.ts, MARK_FRESH_MS).
    const engine = createEngine({
      store: sqliteStore(":memory:"),
      workflows: [loop],
      clock: createVirtualClock(),
    });
    cleanups.push(() => engine.close());
    for (let i = 0; i < 2; i++) await (await engine.start(loop, { steps: 20 })).result();
    c.start();
    const runs = 5;
    for (let i = 0; i < runs; i++) {
      expect(await (await engine.start(loop, { steps: 20 })).result()).toBe(190);
    }
    c.counting = false;
    const steps = runs * 20;
    // One insert a step, and no other statement on its way.
    expect(statementsLike(/^INSERT INTO steps/)).toBe(steps);
    expect(statementsLike(/^SELECT epoch FROM runs WHERE id = \?$/)).toBe(0);
    // The mark is read in no statement of its own: the create's insert reads it in itself
    // (sql.ts, insertNewRow), as a step's does, and the release in its read of the run's
    // row (sql.ts, findRowChecked).
    expect(statementsLike(/^SELECT 1 FROM store_marks/)).toBe(0);
    // Create (1, its insert), the release's read and update (2), 20 steps;
    // the claim rounds a run may meet are the engine's own, at most one a run.
    const all = c.total();
    const claims = statementsLike(/runs_ready_idle/);
    expect(claims).toBeLessThanOrEqual(runs);
    expect(all - claims).toBe(runs * 23);
    expect(c.objectRuns).toBe(0);
  });
});

const step = (over: Partial<StepRecord> = {}): StepRecord =>
  stepOf("r1", "s1", 1, {
    name: "s1",
    result: '[{"i":1},1]',
    startedAt: 1,
    completedAt: 2,
    delivery: 1,
    issuedAfter: 0,
    ...over,
  });

describe("a lone step's one statement hands every other case to the usual path", () => {
  it("lost lease, identical rewrite and taken key answer as before; nothing extra lands", async () => {
    const store = sqliteStore(":memory:");
    await store.open({ clock: { now: () => 1_000 } as never });
    cleanups.push(() => store.close());
    const { run } = await store.createRun({
      id: "r1",
      workflow: "wf",
      version: "1",
      input: "-1",
      claimBy: { workerId: "w", leaseMs: 60_000 },
    } as never);
    const epoch = run.epoch;
    c.start();
    expect(await store.appendRecords([{ runId: "r1", epoch, steps: [step()] }])).toEqual([
      { ok: true },
    ]);
    expect(statementsLike(/./)).toBe(1);
    // The same record again (a retry after an unknown outcome): a no-op, answered ok.
    expect(await store.appendRecords([{ runId: "r1", epoch, steps: [step()] }])).toEqual([
      { ok: true },
    ]);
    // Another record under the key: a conflict.
    expect(
      await store.appendRecords([{ runId: "r1", epoch, steps: [step({ result: '"other"' })] }]),
    ).toEqual([{ ok: false, reason: "conflict", key: "s1" }]);
    // A stale epoch: lease lost, nothing written.
    expect(
      await store.appendRecords([{ runId: "r1", epoch: epoch - 1, steps: [step({ key: "s2" })] }]),
    ).toEqual([{ ok: false, reason: "lease-lost" }]);
    // A run that does not exist: lease lost too.
    expect(await store.appendRecords([{ runId: "nope", epoch, steps: [step()] }])).toEqual([
      { ok: false, reason: "lease-lost" },
    ]);
    // In one batch: the fenced insert of one write, the usual path of the other.
    expect(
      await store.appendRecords([
        { runId: "r1", epoch: epoch + 1, steps: [step({ key: "s3" })] },
        { runId: "r1", epoch, steps: [step({ key: "s4", seq: 4 })] },
      ]),
    ).toEqual([{ ok: false, reason: "lease-lost" }, { ok: true }]);
    c.counting = false;
    const journal = await store.loadJournal("r1");
    expect(journal.steps.map((s) => [s.key, s.result])).toEqual([
      ["s1", '[{"i":1},1]'],
      ["s4", '[{"i":1},1]'],
    ]);
  });
});
