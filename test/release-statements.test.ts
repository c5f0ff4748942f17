// A SQLite release reads the store's encrypted mark in its read of the run's row (sql.ts,
// findRowChecked), not in a statement of its own: a run that records steps made a mark read
// per release (`SELECT 1 FROM store_marks`), one of its run-level statements. Counted here
// (better-sqlite3's Statement methods wrapped), and the mark still refuses a plain release
// at once when another process marks the store after this one believed it unmarked.

import { afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  createEngine,
  EncryptionKeyMissingError,
  encryptedStore,
  sqliteStore,
  workflow,
} from "../src/index.js";
import { createVirtualClock } from "../src/testing/index.js";
import { k1, newRun } from "./helpers/plain-records.js";
import { tempDbPath } from "./helpers/sqlite.js";
import { type StatementCounts, statementCounts } from "./helpers/sqlite-statement-counts.js";

// Every statement counted by text (better-sqlite3's Statement methods wrapped).
let c: StatementCounts;
beforeAll(() => {
  c = statementCounts();
});

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  if (c) c.counting = false;
  for (const c of cleanups.splice(0).reverse()) await c();
});

const loop = workflow(
  { name: "loop", version: "1" },
  async (ctx, input: { steps: number }): Promise<number> => {
    let sum = 0;
    for (let i = 0; i < input.steps; i++) sum += (await ctx.step("s", async () => ({ i }))).i;
    return sum;
  },
);

const statementsLike = (re: RegExp): number => c.like(re);

describe("a SQLite release's statements (counted)", () => {
  it("a run with steps reads the mark in its release's row read: no statement of its own", async () => {
    // A clock that stands still: no heartbeat round (whose renewals read the mark) in the
    // window, nor the guard's read of the mark again once its last is a second old
    // (plain-payloads.ts, MARK_FRESH_MS), which a loaded machine's slow window met.
    const engine = createEngine({
      store: sqliteStore(":memory:"),
      workflows: [loop],
      clock: createVirtualClock(),
    });
    cleanups.push(() => engine.close());
    for (let i = 0; i < 2; i++) await (await engine.start(loop, { steps: 3 })).result();
    c.start();
    const runs = 5;
    for (let i = 0; i < runs; i++) {
      expect(await (await engine.start(loop, { steps: 3 })).result()).toBe(3);
    }
    c.counting = false;
    expect(statementsLike(/^SELECT 1 FROM store_marks/)).toBe(0);
    // The release's read holds the mark beside the row, once a run.
    expect(statementsLike(/^SELECT id, .* EXISTS \(SELECT 1 FROM store_marks .* FROM runs/)).toBe(
      runs,
    );
    expect(statementsLike(/^UPDATE runs SET status/)).toBe(runs);
    // Per run: the create's insert, 3 steps, the release's read and its update; the claim
    // rounds a run may meet are the engine's own, at most one a run.
    const all = c.total();
    const claims = statementsLike(/runs_ready_idle/);
    expect(claims).toBeLessThanOrEqual(runs);
    expect(all - claims).toBe(runs * 6);
  });

  it("a mark another process wrote since still refuses a plain release, writing nothing", async () => {
    const db = tempDbPath();
    cleanups.push(db.cleanup);
    const clock = createVirtualClock();
    const plain = sqliteStore(db.path);
    await plain.open({ clock });
    cleanups.push(() => plain.close());
    const claimBy = { workerId: "w", leaseMs: 60_000 };
    const made = await plain.createRun({ ...newRun("r1", "-1"), claimBy });
    const epoch = made.run.epoch;
    // Believed unmarked (read at open): the release carries the check, read in its row read.
    const keyed = encryptedStore(sqliteStore(db.path), { keys: [k1] });
    await keyed.open({ clock });
    cleanups.push(() => keyed.close());
    const released = plain.releaseRun({
      runId: "r1",
      epoch,
      status: "completed",
      output: '"SECRET"',
      readyAt: null,
    });
    const err = await released.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(EncryptionKeyMissingError);
    expect((err as EncryptionKeyMissingError).runId).toBe("r1");
    const run = await keyed.getRun("r1");
    expect(run?.status).toBe("running");
    expect(run?.output).toBeNull();
    // A release of a run that is gone (no row: the read found no mark) still asks the mark.
    await expect(
      plain.releaseRun({
        runId: "nobody",
        epoch: 1,
        status: "completed",
        output: '"SECRET"',
        readyAt: null,
      }),
    ).rejects.toBeInstanceOf(EncryptionKeyMissingError);
    // What the mark leaves plain passes.
    const ok = await plain.releaseRun({ runId: "r1", epoch, status: "completed", readyAt: null });
    expect(ok.ok).toBe(true);
  });
});
